r"""The rollout engine against the policy: how far their log-probs disagree, and truncated
importance sampling (TIS) to correct the gradient for it.

The responses of a policy-gradient step are sampled by one program (the rollout engine: vLLM,
a static KV-cache decoder, a Hugging Face loop) and scored by another (the policy's training
forward). Other kernels, a lower-precision copy, a KV cache against a full forward, or a weight
sync that silently failed make the two disagree, so the samples come from a distribution
:math:`\pi_\text{engine}` slightly (or badly) off the :math:`\pi_\text{old}` the loss assumes.

- :func:`logprob_mismatch` measures it per batch over the response tokens:
  :math:`|\log\pi_\text{old} - \log\pi_\text{engine}|` (mean and max) and the share of tokens
  whose ratio :math:`\exp(\log\pi_\text{old} - \log\pi_\text{engine})` lies outside
  ``[0.5, 2]``.
- :func:`tis_weights` gives each token the weight
  :math:`w_t = \min(\pi_\text{old}(o_t) / \pi_\text{engine}(o_t), C)`, detached (Yao et al. 2025,
  "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"), and
  :func:`apply_token_weights` multiplies a per-token policy-gradient loss by it before the
  masked reduction (``grpo_loss`` with ``LossInputs(token_weights=w)`` does the same inside the
  objective).
  Where engine and policy agree exactly, :math:`w_t = \exp(0) = 1` exactly, and multiplying by
  1.0 is exact in IEEE arithmetic: the loss and its gradient are unchanged bit for bit.
- :func:`mismatch_warning` decides whether a measured mean difference deserves a warning.

All of it is pure (tensors in, tensors out) and works under ``torch.func.vmap``; the statistics
and weights are detached (they are for logging and weighting, never differentiated).
"""

from __future__ import annotations

import math

import torch

from ._typing import Float, Shaped, Tensor
from .masked import masked_mean_or_zero

__all__ = [
    "RATIO_BAND",
    "apply_token_weights",
    "logprob_mismatch",
    "mismatch_warning",
    "tis_weights",
]

RATIO_BAND: tuple[float, float] = (0.5, 2.0)
"""A token's ratio ``exp(policy - engine)`` outside this band counts in ``ratio_outside``."""


def _masked_diff(
    policy_log_probs: Tensor, engine_log_probs: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """``(policy - engine)`` detached, 0 outside the mask (padding may hold anything, even
    NaN, without reaching a statistic), and the boolean mask."""
    keep = response_mask != 0
    diff = policy_log_probs.detach() - engine_log_probs.detach()
    return torch.where(keep, diff, torch.zeros_like(diff)), keep


def logprob_mismatch(
    policy_log_probs: Float[Tensor, "*batch seq"],
    engine_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"],
) -> dict[str, Tensor]:
    r"""How far the engine's per-token log-probs are from the policy's, over the response
    tokens.

    Args:
        policy_log_probs: log-probs of the sampled tokens under the policy's own forward
            (e.g. the old log-probs of the ratio losses).
        engine_log_probs: the log-probs the rollout engine returned for the same tokens.
        response_mask: non-zero on the response tokens; everything else is ignored.

    Returns:
        Detached scalars (float, the log-probs' dtype): ``logprob_diff_mean`` and
        ``logprob_diff_max`` (mean and max of :math:`|\text{policy} - \text{engine}|`) and
        ``ratio_outside`` (share of tokens with :math:`\exp(\text{policy} - \text{engine})`
        outside :data:`RATIO_BAND`). All three are 0 when the mask selects no token.
    """
    diff, keep = _masked_diff(policy_log_probs, engine_log_probs, response_mask)
    absdiff = diff.abs()
    ratio = torch.exp(diff)
    low, high = RATIO_BAND
    outside = keep & ((ratio < low) | (ratio > high))
    return {
        "logprob_diff_mean": masked_mean_or_zero(absdiff, keep),
        # |diff| is 0 outside the mask, so the max over everything is the max over the mask
        # (and 0 with an empty one)
        "logprob_diff_max": absdiff.amax() if absdiff.numel() else absdiff.sum(),
        "ratio_outside": masked_mean_or_zero(outside.to(absdiff.dtype), keep),
    }


def tis_weights(
    old_log_probs: Float[Tensor, "*batch seq"],
    engine_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"],
    cap: float = 2.0,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Truncated importance-sampling weights of the sampled tokens.

    .. math:: w_t = \min\big(\exp(\log\pi_\text{old}(o_t) - \log\pi_\text{engine}(o_t)),\ C\big)

    Args:
        old_log_probs: log-probs under the policy the loss treats as the sampler
            (:math:`\pi_\text{old}`: the old log-probs of the ratio losses, or the policy's
            own log-probs on an on-policy step).
        engine_log_probs: the engine's log-probs of the same tokens.
        response_mask: non-zero on the response tokens.
        cap: :math:`C \ge 1`: a weight never exceeds it. (Below 1 it would down-weight even
            tokens on which engine and policy agree, which is no truncation.)

    Returns:
        ``(weights, metadata)``: detached weights of the log-probs' shape, exactly 1.0 where
        the two log-probs are equal and on every masked-out token; metadata (detached scalars)
        ``tis_weight_mean`` (mean weight over the response tokens) and ``tis_clipped``
        (share of response tokens whose ratio exceeded the cap), both 0 on an empty mask.

    Raises:
        ValueError: on a cap below 1 (or NaN).
    """
    if not cap >= 1.0:
        raise ValueError(f"tis_cap must be >= 1, got {cap}")
    diff, keep = _masked_diff(old_log_probs, engine_log_probs, response_mask)
    ratio = torch.exp(diff)  # exactly 1 outside the mask (exp(0))
    weights = torch.clamp(ratio, max=cap)
    metadata = {
        "tis_weight_mean": masked_mean_or_zero(weights, keep),
        "tis_clipped": masked_mean_or_zero((keep & (ratio > cap)).to(weights.dtype), keep),
    }
    return weights, metadata


def apply_token_weights(
    token_loss: Float[Tensor, "*batch seq"], weights: Float[Tensor, "*batch seq"]
) -> Float[Tensor, "*batch seq"]:
    r"""A per-token loss with each token weighted: :math:`w_t \ell_t`, the weights detached.

    For every loss type of :mod:`reasoning_core.losses` (``no_baseline``,
    ``reinforce_with_baseline``, ``grpo_clip``, ``grpo_no_clip``) the per-token loss comes
    before the masked reduction, so weighting it there weights each token's gradient:
    :math:`\nabla(w_t\ell_t) = w_t\nabla\ell_t`. For ``grpo_clip`` the weight multiplies the
    clipped surrogate, as in Yao et al. (2025): the trust region stays the one of
    :math:`\pi_\theta/\pi_\text{old}` and the weight corrects for the engine.
    """
    return token_loss * weights.detach()


def mismatch_warning(diff_mean: float, threshold: float | None) -> str | None:
    """The warning for a mean engine/policy log-prob difference ``diff_mean``, or None.

    None when ``threshold`` is None (warning off), when ``diff_mean`` is at most
    ``threshold``, or when it is not a number (no response token was measured). Otherwise
    one message naming the measured value, the threshold and the likely causes.
    """
    if threshold is None or math.isnan(diff_mean) or diff_mean <= threshold:
        return None
    return (
        f"the rollout engine's log-probs differ from the policy's by {diff_mean:.3g} per "
        f"response token on average (logprob_diff_warn is {threshold:g}); the engine may not "
        "be sampling from the policy being trained. Likely causes: stale weights (the "
        "engine's weight sync failed or is skipped), a different dtype (a bfloat16 engine "
        "against a float32 policy), or temperature or top-p applied differently by the "
        "engine and by the policy's forward. Set rollout_correction: tis to weight the "
        "loss for it."
    )
