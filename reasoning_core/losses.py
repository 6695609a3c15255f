"""Policy-gradient and SFT losses, and the two microbatch train steps.

The loss functions are pure: tensors in, ``(per-token loss, metadata)`` out, with the
reduction left to the caller (:func:`~reasoning_core.masked.masked_mean` or
:func:`~reasoning_core.masked.masked_normalize`), so ``torch.func.grad(..., has_aux=True)``
and ``torch.func.vmap`` apply to them. :func:`sft_loss` and :func:`grpo_loss` are the pure
scalar objectives; the two ``*_microbatch_train_step`` functions are thin wrappers whose
contract (docs/contract.md) is to call ``.backward()`` on them.

Empty responses (a row whose mask is all zero) never make a loss NaN. The handout's
``masked_mean`` is 0/0 = NaN on such a row, so the objectives reduce per response with
:func:`~reasoning_core.masked.masked_mean_or_zero` instead: the same value on every non-empty
row, bit for bit, and exactly 0 with no gradient on an empty one. The batch mean stays over all
``B`` rows (an empty row adds 0 to the sum and 1 to the count), which is what makes ``k``
accumulated microbatches equal one step over the whole batch.

Metadata tensors are detached: they are for logging, not for differentiation.
"""

from __future__ import annotations

from typing import Literal

import torch

from ._typing import Float, Shaped, Tensor
from .correction import apply_token_weights
from .masked import masked_mean_or_zero, masked_normalize

__all__ = [
    "LOSS_TYPES",
    "LENGTH_NORMS",
    "compute_naive_policy_gradient_loss",
    "compute_grpo_clip_loss",
    "compute_grpo_no_clip_loss",
    "compute_policy_gradient_loss",
    "sft_loss",
    "grpo_loss",
    "sft_microbatch_train_step",
    "grpo_microbatch_train_step",
]

LossType = Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"]
LOSS_TYPES: tuple[str, ...] = (
    "no_baseline",
    "reinforce_with_baseline",
    "grpo_clip",
    "grpo_no_clip",
)
LengthNorm = Literal["masked_mean", "masked_normalize"]
LENGTH_NORMS: tuple[str, ...] = ("masked_mean", "masked_normalize")


def _check_column(name: str, column: Tensor, like: Tensor) -> None:
    # A (B,) advantage would silently broadcast against (B, T) along the wrong axis.
    if column.dim() != like.dim() or column.shape[-1] != 1:
        raise ValueError(
            f"{name} must have shape (..., 1) matching policy_log_probs {tuple(like.shape)}, "
            f"got {tuple(column.shape)}"
        )


def compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
) -> Float[Tensor, "*batch seq"]:
    r"""Per-token REINFORCE loss (Williams 1992).

    .. math:: \ell_t = -A \, \log \pi_\theta(o_t \mid q, o_{<t})

    With raw rewards as ``A`` this is vanilla REINFORCE; with group-centered rewards it is
    REINFORCE with a baseline. Its gradient is the policy gradient
    :math:`-A \nabla_\theta \log \pi_\theta`.

    Args:
        raw_rewards_or_advantages: one scalar per response, shape ``(B, 1)``.
        policy_log_probs: per-token log-probs of the sampled tokens, ``(B, T)``.

    Returns:
        The unreduced per-token loss ``(B, T)``.
    """
    _check_column("raw_rewards_or_advantages", raw_rewards_or_advantages, policy_log_probs)
    return -raw_rewards_or_advantages * policy_log_probs


def compute_grpo_clip_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    cliprange: float,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Per-token GRPO-Clip loss, PPO's clipped surrogate (Schulman et al. 2017, eq. 7) with
    group advantages (Shao et al. 2024, eq. 3; no KL term).

    .. math::
        r_t = \exp(\log\pi_\theta(o_t) - \log\pi_{\theta_\text{old}}(o_t)), \qquad
        \ell_t = -\min\big(r_t A,\ \mathrm{clip}(r_t, 1-\epsilon, 1+\epsilon)\,A\big)

    A token is *clipped* where the clipped term is strictly smaller than the unclipped one;
    there ``r_t`` lies outside ``[1-eps, 1+eps]`` on the side the advantage pushes towards,
    and the token's gradient is exactly zero. At ``r_t = 1`` (on-policy) the gradient equals
    REINFORCE's.

    Args:
        advantages: ``(B, 1)``.
        policy_log_probs: ``(B, T)`` under the policy being trained.
        old_log_probs: ``(B, T)`` under the policy that sampled; a constant (detached here,
            so the policy's own log-probs may be passed for an on-policy step).
        cliprange: ``epsilon``, e.g. 0.2.

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (bool, per token) and ``ratio``.
    """
    _check_column("advantages", advantages, policy_log_probs)
    if cliprange < 0:
        raise ValueError(f"cliprange must be >= 0, got {cliprange}")
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange) * advantages
    loss = -torch.minimum(unclipped, clipped)
    metadata = {"clipped": (clipped < unclipped).detach(), "ratio": ratio.detach()}
    return loss, metadata


def compute_grpo_no_clip_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Per-token unclipped ratio objective, :math:`\ell_t = -r_t A` with
    :math:`r_t = \exp(\log\pi_\theta - \log\pi_{\theta_\text{old}})`.

    The importance-weighted policy gradient without PPO's trust region: it equals the
    REINFORCE gradient when ``policy == old`` and lets off-policy steps move freely
    otherwise (the handout's GRPO-No-Clip ablation). ``old_log_probs`` is detached, as in
    :func:`compute_grpo_clip_loss`.

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (all False) and ``ratio``.
    """
    _check_column("advantages", advantages, policy_log_probs)
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    loss = -ratio * advantages
    metadata = {"clipped": torch.zeros_like(ratio, dtype=torch.bool), "ratio": ratio.detach()}
    return loss, metadata


def _require(loss_type: str, **arguments: object) -> None:
    for name, value in arguments.items():
        if value is None:
            raise ValueError(f"loss_type={loss_type!r} needs {name}, which is None")


def compute_policy_gradient_loss(
    policy_log_probs: Float[Tensor, "*batch seq"],
    loss_type: LossType,
    raw_rewards: Float[Tensor, "*batch 1"] | None = None,
    advantages: Float[Tensor, "*batch 1"] | None = None,
    old_log_probs: Float[Tensor, "*batch seq"] | None = None,
    cliprange: float | None = None,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    """Dispatch to the per-token loss named by ``loss_type``.

    ============================  ===========================  ==============================
    ``loss_type``                 loss                         needs
    ============================  ===========================  ==============================
    ``"no_baseline"``             ``-R log pi``                ``raw_rewards``
    ``"reinforce_with_baseline"`` ``-A log pi``                ``advantages``
    ``"grpo_clip"``               ``-min(rA, clip(r)A)``       ``advantages, old_log_probs,
                                                               cliprange``
    ``"grpo_no_clip"``            ``-rA``                      ``advantages, old_log_probs``
    ============================  ===========================  ==============================

    Returns:
        ``(loss (B, T), metadata)``; every loss type reports ``clipped`` (bool per token,
        all False where nothing clips) so callers can log a clip fraction uniformly.

    Raises:
        ValueError: on an unknown ``loss_type`` or a missing argument it needs (named).
    """
    if loss_type == "no_baseline":
        _require(loss_type, raw_rewards=raw_rewards)
        loss = compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs)
        return loss, {"clipped": torch.zeros_like(loss, dtype=torch.bool)}
    if loss_type == "reinforce_with_baseline":
        _require(loss_type, advantages=advantages)
        loss = compute_naive_policy_gradient_loss(advantages, policy_log_probs)
        return loss, {"clipped": torch.zeros_like(loss, dtype=torch.bool)}
    if loss_type == "grpo_clip":
        _require(loss_type, advantages=advantages, old_log_probs=old_log_probs, cliprange=cliprange)
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    if loss_type == "grpo_no_clip":
        _require(loss_type, advantages=advantages, old_log_probs=old_log_probs)
        return compute_grpo_no_clip_loss(advantages, policy_log_probs, old_log_probs)
    raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {LOSS_TYPES}")


def sft_loss(
    policy_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"],
    normalize_constant: float = 1.0,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    r"""Pure SFT objective: mean over examples of the masked token NLL sum over a constant.

    .. math:: L = \frac{1}{B} \sum_b \frac{1}{c} \sum_t m_{bt}\,(-\log \pi_\theta(o_{bt}))

    An empty response row adds 0 to the sum (and still counts in ``B``).

    Returns:
        ``(loss, metadata)`` with the scalar loss and detached ``per_example_loss``,
        ``num_response_tokens`` and ``mean_token_nll`` (masked mean over all tokens; 0, not
        NaN, when the batch has no response token).
    """
    per_example = masked_normalize(-policy_log_probs, response_mask, normalize_constant, dim=-1)
    loss = per_example.mean()
    metadata = {
        "per_example_loss": per_example.detach(),
        "num_response_tokens": (response_mask != 0).sum(),
        "mean_token_nll": masked_mean_or_zero(-policy_log_probs, response_mask).detach(),
    }
    return loss, metadata


def sft_microbatch_train_step(
    policy_log_probs: Float[Tensor, "batch seq"],
    response_mask: Shaped[Tensor, "batch seq"],
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """One SFT microbatch: :func:`sft_loss` divided by ``gradient_accumulation_steps``,
    then ``loss.backward()``.

    With ``k`` equal microbatches the accumulated gradient equals that of one step over the
    whole batch with ``gradient_accumulation_steps = 1``.

    Returns:
        ``(loss, metadata)``: the detached scaled loss that was back-propagated and
        :func:`sft_loss`'s metadata.
    """
    _check_accumulation(gradient_accumulation_steps)
    loss, metadata = sft_loss(policy_log_probs, response_mask, normalize_constant)
    loss = loss / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), metadata


def grpo_loss(
    policy_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"],
    loss_type: LossType,
    raw_rewards: Float[Tensor, "*batch 1"] | None = None,
    advantages: Float[Tensor, "*batch 1"] | None = None,
    old_log_probs: Float[Tensor, "*batch seq"] | None = None,
    cliprange: float | None = None,
    length_norm: LengthNorm = "masked_mean",
    normalize_constant: float | None = None,
    token_weights: Float[Tensor, "*batch seq"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    r"""Pure policy-gradient objective of one batch of responses.

    The per-token loss of :func:`compute_policy_gradient_loss` is reduced per response,
    then averaged over responses:

    - ``length_norm="masked_mean"`` (GRPO as in Shao et al. 2024, eq. 3):
      :math:`\frac{1}{|o_b|}\sum_t \ell_{bt}`. Each response weighs the same, so a token of
      a short response weighs more than one of a long response.
    - ``length_norm="masked_normalize"`` (Dr. GRPO, Liu et al. 2025):
      :math:`\frac{1}{c}\sum_t \ell_{bt}` with a constant ``c`` (``normalize_constant``,
      e.g. the maximum generation length), so every token weighs the same.

    The loss is :math:`L = \frac{1}{B}\sum_b L_b` over all ``B`` rows. A row with no response
    token (``|o_b| = 0``) has :math:`L_b = 0` and no gradient under both norms: the per-response
    mean goes through :func:`~reasoning_core.masked.masked_mean_or_zero` (guarded, 0 on an
    empty row), not the handout's ``masked_mean`` (NaN there). On non-empty rows the two are
    bitwise equal, so batches without empty rows get exactly the handout's loss. Because empty
    rows still count in ``B``, the gradient with ``n`` empty rows of ``B`` is
    :math:`\frac{B-n}{B}` times that of the batch with those rows dropped.

    ``token_weights`` (e.g. :func:`~reasoning_core.correction.tis_weights`), when given,
    multiply the per-token loss before the reduction (detached, as
    :func:`~reasoning_core.correction.apply_token_weights`), whatever the loss type; weights
    of exactly 1 leave the loss and its gradient unchanged bit for bit.

    Returns:
        ``(loss, metadata)``: scalar loss; detached ``per_example_loss``, ``clip_fraction``
        (share of response tokens clipped), ``num_response_tokens``, and ``ratio_mean``
        (masked mean ratio) for the ratio-based losses. ``clip_fraction`` and ``ratio_mean``
        are 0, not NaN, when the batch has no response token.

    Raises:
        ValueError: as :func:`compute_policy_gradient_loss`, on an unknown ``length_norm``,
            or on ``length_norm="masked_normalize"`` without ``normalize_constant``.
    """
    if length_norm not in LENGTH_NORMS:
        raise ValueError(f"unknown length_norm {length_norm!r}; expected one of {LENGTH_NORMS}")
    if length_norm == "masked_normalize" and normalize_constant is None:
        raise ValueError("length_norm='masked_normalize' needs normalize_constant, which is None")
    token_loss, pg_meta = compute_policy_gradient_loss(
        policy_log_probs=policy_log_probs,
        loss_type=loss_type,
        raw_rewards=raw_rewards,
        advantages=advantages,
        old_log_probs=old_log_probs,
        cliprange=cliprange,
    )
    if token_weights is not None:
        token_loss = apply_token_weights(token_loss, token_weights)
    if length_norm == "masked_mean":
        # Guarded: an empty row gives 0 and no gradient where masked_mean would give NaN.
        per_example = masked_mean_or_zero(token_loss, response_mask, dim=-1)
    else:
        per_example = masked_normalize(token_loss, response_mask, normalize_constant, dim=-1)
    loss = per_example.mean()
    metadata = {
        "per_example_loss": per_example.detach(),
        "clip_fraction": masked_mean_or_zero(
            pg_meta["clipped"].to(token_loss.dtype), response_mask
        ),
        "num_response_tokens": (response_mask != 0).sum(),
    }
    if "ratio" in pg_meta:
        metadata["ratio_mean"] = masked_mean_or_zero(pg_meta["ratio"], response_mask)
    return loss, metadata


def grpo_microbatch_train_step(
    policy_log_probs: Float[Tensor, "batch seq"],
    response_mask: Shaped[Tensor, "batch seq"],
    gradient_accumulation_steps: int,
    loss_type: LossType,
    raw_rewards: Float[Tensor, "batch 1"] | None = None,
    advantages: Float[Tensor, "batch 1"] | None = None,
    old_log_probs: Float[Tensor, "batch seq"] | None = None,
    cliprange: float | None = None,
    length_norm: LengthNorm = "masked_mean",
    normalize_constant: float | None = None,
    token_weights: Float[Tensor, "batch seq"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """One policy-gradient microbatch: :func:`grpo_loss` divided by
    ``gradient_accumulation_steps``, then ``loss.backward()``.

    With ``k`` equal microbatches the accumulated gradient equals that of one step over the
    whole batch with ``gradient_accumulation_steps = 1`` (for ``masked_normalize`` this
    needs the same ``normalize_constant`` in every microbatch, which is why it is a
    required constant rather than the microbatch's padded length). That holds with empty
    response rows too: each contributes 0 and no gradient (never NaN) and counts in its
    microbatch's size, as :func:`grpo_loss` describes.

    Returns:
        ``(loss, metadata)``: the detached scaled loss and :func:`grpo_loss`'s metadata.
    """
    _check_accumulation(gradient_accumulation_steps)
    loss, metadata = grpo_loss(
        policy_log_probs=policy_log_probs,
        response_mask=response_mask,
        loss_type=loss_type,
        raw_rewards=raw_rewards,
        advantages=advantages,
        old_log_probs=old_log_probs,
        cliprange=cliprange,
        length_norm=length_norm,
        normalize_constant=normalize_constant,
        token_weights=token_weights,
    )
    loss = loss / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), metadata


def _check_accumulation(steps: int) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be a positive int, got {steps!r}")
