"""Masked reductions: the handout's ``masked_mean`` and ``masked_normalize``.

``masked_mean`` is the handout's formula, ``sum(tensor * mask, dim) / sum(mask, dim)``: a slice
with no masked-in element is 0/0 = NaN, as ``torch.mean`` of nothing is. Code that must not
produce NaN on an empty row (the train steps) reduces through :func:`masked_mean_or_zero`, a
guarded reduction that gives 0 there, rather than patching ``masked_mean``'s output.

All functions treat ``mask`` as boolean (non-zero means "counts"; the handout's masks are 0/1)
and select with ``torch.where`` rather than multiplying: ``0 * inf`` is NaN, so multiplying
would let a non-finite value at a masked-out position leak into the result. For a finite
``tensor`` and a 0/1 mask selection gives the same sums as the handout's product, bit for bit.
Selection is also what makes the masked-out values provably irrelevant, in value and in
gradient. No boolean indexing is used, so the functions work under ``torch.func.vmap``.
"""

from __future__ import annotations

import torch

from ._typing import Float, Shaped, Tensor

__all__ = ["masked_mean", "masked_mean_or_zero", "masked_normalize"]


def _select(tensor: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    keep = torch.broadcast_to(mask, tensor.shape) != 0
    return torch.where(keep, tensor, torch.zeros_like(tensor)), keep


def masked_normalize(
    tensor: Float[Tensor, "*dims"],
    mask: Shaped[Tensor, "*#dims"],
    normalize_constant: float = 1.0,
    dim: int | None = None,
) -> Float[Tensor, "*reduced"]:
    r"""Sum ``tensor`` over the masked-in elements and divide by a constant.

    .. math:: \mathrm{masked\_normalize}(x, m, c) = \frac{1}{c} \sum_i m_i x_i

    The constant does not depend on the mask, which is what Dr. GRPO (Liu et al. 2025,
    "Understanding R1-Zero-Like Training: A Critical Perspective") uses to remove the
    length bias of a per-response mean: with ``c`` the maximum generation length every
    unmasked token gets the same weight ``1 / c`` whatever its response's length.

    Args:
        tensor: values to sum.
        mask: same shape as ``tensor`` (or broadcastable to it); non-zero means "counts".
        normalize_constant: the divisor ``c``.
        dim: dimension to sum over; ``None`` sums over all dimensions.

    Returns:
        The normalized sum; its shape follows ``tensor.sum(dim)``. An all-zero mask gives 0.

    >>> masked_normalize(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1, 0, 1]), 2.0)
    tensor(2.5000)
    """
    selected, _ = _select(tensor, mask)
    total = selected.sum() if dim is None else selected.sum(dim)
    return total / normalize_constant


def _masked_sum_and_count(tensor: Tensor, mask: Tensor, dim: int | None) -> tuple[Tensor, Tensor]:
    selected, keep = _select(tensor, mask)
    if dim is None:
        return selected.sum(), keep.sum()
    return selected.sum(dim), keep.sum(dim)


def masked_mean(
    tensor: Float[Tensor, "*dims"],
    mask: Shaped[Tensor, "*#dims"],
    dim: int | None = None,
) -> Float[Tensor, "*reduced"]:
    r"""Mean of ``tensor`` over the masked-in elements along ``dim``: the handout's formula.

    .. math:: \mathrm{masked\_mean}(x, m) = \frac{\sum_i m_i x_i}{\sum_i m_i}

    A slice with no masked-in element is ``0 / 0 = NaN``, as ``torch.mean`` of an empty tensor
    is (with and without ``dim``). Nothing is added to the denominator. Where a caller needs 0
    for an empty slice (the train steps' per-response reduction), it uses
    :func:`masked_mean_or_zero`, which equals this function on every non-empty slice.

    Args:
        tensor: values to average.
        mask: same shape as ``tensor`` (or broadcastable to it); non-zero means "counts".
        dim: dimension to average over; ``None`` averages over all elements.

    Returns:
        Shape follows ``tensor.mean(dim)``; NaN exactly where the slice's mask is all zero.

    >>> masked_mean(torch.tensor([[1.0, 3.0], [5.0, 7.0]]), torch.tensor([[1, 1], [0, 0]]), dim=1)
    tensor([2., nan])
    """
    total, count = _masked_sum_and_count(tensor, mask, dim)
    return total / count  # the integer count, not count.to(bf16), which rounds above 256


def masked_mean_or_zero(
    tensor: Float[Tensor, "*dims"],
    mask: Shaped[Tensor, "*#dims"],
    dim: int | None = None,
) -> Float[Tensor, "*reduced"]:
    r""":func:`masked_mean` guarded for empty slices: 0 there, and no gradient.

    .. math:: \frac{\sum_i m_i x_i}{\max(1, \sum_i m_i)}

    The ``max(1, .)`` is exact rather than an epsilon: the count is an integer, and when it is
    0 the numerator is 0 too (masked-out values are selected away, not multiplied), so an
    empty slice gives exactly 0 and its elements get exactly zero gradient. On a non-empty
    slice ``max(1, n) = n`` and the result is :func:`masked_mean`'s, bit for bit. This is the
    reduction the losses use per response (docs/contract.md, "Edge cases"); it is not the
    handout's ``masked_mean``, which is NaN on an empty slice.

    >>> masked_mean_or_zero(
    ...     torch.tensor([[1.0, 3.0], [5.0, 7.0]]), torch.tensor([[1, 1], [0, 0]]), dim=1
    ... )
    tensor([2., 0.])
    """
    total, count = _masked_sum_and_count(tensor, mask, dim)
    return total / count.clamp(min=1)
