"""Masked reductions with a defined value on an empty mask.

Both functions treat ``mask`` as boolean (non-zero means "counts") and select with
``torch.where`` rather than multiplying: ``0 * inf`` is NaN, so multiplying would let a
non-finite value at a masked position leak into the result. Selection is also what makes
the masked-out values provably irrelevant, in value and in gradient. No boolean indexing is
used, so both functions work under ``torch.func.vmap``.
"""

from __future__ import annotations

import torch

from ._typing import Float, Shaped, Tensor

__all__ = ["masked_mean", "masked_normalize"]


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


def masked_mean(
    tensor: Float[Tensor, "*dims"],
    mask: Shaped[Tensor, "*#dims"],
    dim: int | None = None,
) -> Float[Tensor, "*reduced"]:
    r"""Mean of ``tensor`` over the masked-in elements along ``dim``.

    .. math:: \mathrm{masked\_mean}(x, m) = \frac{\sum_i m_i x_i}{\max(1, \sum_i m_i)}

    The ``max(1, .)`` is exact rather than an epsilon: the count is an integer, and when it
    is 0 the numerator is 0 too, so an all-zero mask gives exactly 0 (never NaN) and
    contributes no gradient. For a non-empty mask it is the plain mean.

    Args:
        tensor: values to average.
        mask: same shape as ``tensor`` (or broadcastable to it); non-zero means "counts".
        dim: dimension to average over; ``None`` averages over all elements.

    Returns:
        Shape follows ``tensor.mean(dim)``.

    >>> masked_mean(torch.tensor([[1.0, 3.0], [5.0, 7.0]]), torch.tensor([[1, 1], [0, 0]]), dim=1)
    tensor([2., 0.])
    """
    selected, keep = _select(tensor, mask)
    if dim is None:
        total, count = selected.sum(), keep.sum()
    else:
        total, count = selected.sum(dim), keep.sum(dim)
    return total / count.clamp(min=1).to(total.dtype)
