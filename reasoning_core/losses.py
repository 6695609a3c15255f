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

import math
from typing import Literal

import torch

from ._typing import Float, Shaped, Tensor
from .correction import apply_token_weights
from .kl import KL_ESTIMATORS, kl_penalty
from .masked import masked_mean_or_zero, masked_normalize

__all__ = [
    "LOSS_TYPES",
    "LENGTH_NORMS",
    "compute_naive_policy_gradient_loss",
    "compute_grpo_clip_loss",
    "compute_grpo_no_clip_loss",
    "compute_dapo_clip_loss",
    "compute_gspo_loss",
    "compute_cispo_loss",
    "compute_sapo_loss",
    "compute_policy_gradient_loss",
    "token_mean_constant",
    "sft_loss",
    "grpo_loss",
    "sft_microbatch_train_step",
    "grpo_microbatch_train_step",
]

LossType = Literal[
    "no_baseline",
    "reinforce_with_baseline",
    "grpo_clip",
    "grpo_no_clip",
    "dapo",
    "gspo",
    "cispo",
    "sapo",
]
LOSS_TYPES: tuple[str, ...] = (
    "no_baseline",
    "reinforce_with_baseline",
    "grpo_clip",
    "grpo_no_clip",
    "dapo",
    "gspo",
    "cispo",
    "sapo",
)
LengthNorm = Literal["masked_mean", "masked_normalize", "token_mean"]
LENGTH_NORMS: tuple[str, ...] = ("masked_mean", "masked_normalize", "token_mean")


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


def _clipped_surrogate(
    ratio: Tensor, advantages: Tensor, low: float, high: float
) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic surrogate over the range ``[1 - low, 1 + high]``: the per-token loss
    and the detached flag of tokens whose clipped term is strictly smaller (no gradient)."""
    plain = ratio * advantages
    bounded = torch.clamp(ratio, 1.0 - low, 1.0 + high) * advantages
    return -torch.minimum(plain, bounded), (bounded < plain).detach()


def _check_clips(cliprange_low: float, cliprange_high: float) -> None:
    for name, value in (("cliprange_low", cliprange_low), ("cliprange_high", cliprange_high)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def compute_dapo_clip_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    cliprange_low: float,
    cliprange_high: float,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Per-token clipped surrogate with DAPO's decoupled clip range, "clip-higher" (Yu et
    al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", eq. 8).

    .. math::
        \ell_t = -\min\big(r_t A,\
            \mathrm{clip}(r_t, 1-\epsilon_\text{low}, 1+\epsilon_\text{high})\,A\big)

    DAPO raises :math:`\epsilon_\text{high}` (0.28 against 0.2) so that low-probability
    tokens with a positive advantage can grow more before their gradient stops, which keeps
    the policy's entropy from collapsing. With :math:`\epsilon_\text{low} =
    \epsilon_\text{high} = \epsilon` it is :func:`compute_grpo_clip_loss`. DAPO aggregates
    over all tokens of the batch (``grpo_loss(..., length_norm="token_mean")``); the per-token
    loss here does not depend on the reduction.

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (bool per token: the clipped term is
        strictly smaller, so the token gets no gradient) and ``ratio``.
    """
    _check_column("advantages", advantages, policy_log_probs)
    _check_clips(cliprange_low, cliprange_high)
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    loss, clipped = _clipped_surrogate(ratio, advantages, cliprange_low, cliprange_high)
    return loss, {"clipped": clipped, "ratio": ratio.detach()}


def compute_gspo_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"],
    cliprange_low: float,
    cliprange_high: float,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Per-token form of GSPO, the sequence-level clipped surrogate (Zheng et al. 2025, "Group
    Sequence Policy Optimization", eqs. 5-7 and the GSPO-token form, eqs. 13-14).

    The importance ratio is one per response, the geometric mean of its token ratios
    (length-normalized, so responses of any length have ratios on one scale), and the clip
    acts on whole responses:

    .. math::
        s = \exp\Big(\frac{1}{|o|}\sum_t \big(\log\pi_\theta(o_t) -
            \log\pi_{\theta_\text{old}}(o_t)\big)\Big), \qquad
        s_t = \mathrm{sg}[s]\,\frac{\pi_\theta(o_t)}{\mathrm{sg}[\pi_\theta(o_t)]}, \qquad
        \ell_t = -\min\big(s_t A,\ \mathrm{clip}(s_t, 1-\epsilon_\text{low},
            1+\epsilon_\text{high})\,A\big)

    Every token of a response has the value :math:`s` and the gradient
    :math:`s\,\nabla\log\pi_\theta(o_t)`, so the per-response mean
    (``length_norm="masked_mean"``, the paper's reduction) has exactly the gradient of the
    sequence objective :math:`-\min(sA, \mathrm{clip}(s)A)`. With one token per response
    it is :func:`compute_dapo_clip_loss` (and GRPO-Clip with equal clips). The paper's
    ranges are small (:math:`3\cdot10^{-4}` and :math:`4\cdot10^{-4}`) because ``s`` is an
    average.

    Args:
        response_mask: the tokens of each response (the mean in ``s`` runs over them; an
            empty row has ``s = 1``).

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (the row's clip, on each of its tokens)
        and ``ratio`` (``s`` on each token).
    """
    _check_column("advantages", advantages, policy_log_probs)
    _check_clips(cliprange_low, cliprange_high)
    log_ratio = policy_log_probs - old_log_probs.detach()
    seq_log_ratio = masked_mean_or_zero(log_ratio, response_mask, dim=-1).unsqueeze(-1)
    seq_ratio = torch.exp(seq_log_ratio.detach() + policy_log_probs - policy_log_probs.detach())
    loss, clipped = _clipped_surrogate(seq_ratio, advantages, cliprange_low, cliprange_high)
    return loss, {"clipped": clipped, "ratio": seq_ratio.detach()}


def compute_cispo_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    cliprange_low: float,
    cliprange_high: float,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Per-token CISPO loss: REINFORCE weighted by the clipped, detached importance ratio
    (MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
    Attention", eq. 4).

    .. math::
        \ell_t = -\mathrm{sg}\big[\mathrm{clip}(r_t, 1-\epsilon_\text{low},
            1+\epsilon_\text{high})\big]\, A \log\pi_\theta(o_t)

    PPO's clip zeroes the gradient of a token whose ratio left the range; CISPO clips the
    *weight* instead, so every token keeps a gradient (rare "fork" tokens included). The
    paper sets no lower bound (``cliprange_low >= 1``: ratios are positive). At ``r = 1`` the
    gradient is REINFORCE's, as GRPO-Clip's is; the loss *value* is ``-A log pi``, not GRPO's
    ``-r A``. MiniMax aggregates over all tokens of the batch
    (``grpo_loss(..., length_norm="token_mean")``).

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (bool per token: the weight was
        truncated; the token still has a gradient) and ``ratio``.
    """
    _check_column("advantages", advantages, policy_log_probs)
    _check_clips(cliprange_low, cliprange_high)
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    weight = torch.clamp(ratio, 1.0 - cliprange_low, 1.0 + cliprange_high).detach()
    loss = -weight * advantages * policy_log_probs
    outside = (ratio < 1.0 - cliprange_low) | (ratio > 1.0 + cliprange_high)
    metadata = {"clipped": outside.detach(), "ratio": ratio.detach()}
    return loss, metadata


def compute_sapo_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    r"""Per-token SAPO loss: a smooth, temperature-controlled gate in place of the hard clip
    (Gao et al. 2025, "Soft Adaptive Policy Optimization", eqs. 6-8).

    .. math::
        f_\tau(r) = \frac{4}{\tau}\,\sigma\big(\tau (r - 1)\big), \qquad
        \ell_t = -f_{\tau}(r_t)\,A, \qquad
        \tau = \tau_\text{pos} \text{ if } A > 0 \text{ else } \tau_\text{neg}

    The gradient is :math:`-4\sigma(x)(1-\sigma(x))\,r_t A\,\nabla\log\pi_\theta` with
    :math:`x = \tau(r_t - 1)`: exactly REINFORCE's at ``r = 1`` (the factor ``4/tau`` makes
    the gate's slope 1 there) and decaying smoothly, never to exactly 0, as the ratio moves
    away. The paper's temperatures are 1.0 and 1.05 (negative advantages decay faster).

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (all False: nothing is cut off) and
        ``ratio``.

    Raises:
        ValueError: unless both temperatures are > 0.
    """
    _check_column("advantages", advantages, policy_log_probs)
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"sapo temperatures must be > 0, got tau_pos={tau_pos}, tau_neg={tau_neg}")
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    tau = torch.where(
        advantages > 0,
        torch.full_like(advantages, tau_pos),
        torch.full_like(advantages, tau_neg),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = -gate * advantages
    metadata = {"clipped": torch.zeros_like(ratio, dtype=torch.bool), "ratio": ratio.detach()}
    return loss, metadata


def _require(loss_type: str, **arguments: object) -> None:
    for name, value in arguments.items():
        if value is None:
            raise ValueError(f"loss_type={loss_type!r} needs {name}, which is None")


def _clip_pair(
    loss_type: str,
    cliprange: float | None,
    cliprange_low: float | None,
    cliprange_high: float | None,
) -> tuple[float, float]:
    """``(low, high)``: each of ``cliprange_low``/``cliprange_high`` defaults to ``cliprange``."""
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    for name, value in (("cliprange_low", low), ("cliprange_high", high)):
        if value is None:
            raise ValueError(f"loss_type={loss_type!r} needs {name} (or cliprange), which is None")
    return low, high


def compute_policy_gradient_loss(
    policy_log_probs: Float[Tensor, "*batch seq"],
    loss_type: LossType,
    raw_rewards: Float[Tensor, "*batch 1"] | None = None,
    advantages: Float[Tensor, "*batch 1"] | None = None,
    old_log_probs: Float[Tensor, "*batch seq"] | None = None,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    response_mask: Shaped[Tensor, "*batch seq"] | None = None,
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
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
    ``"dapo"``                    ``-min(rA, clip(r, 1-lo,     ``advantages, old_log_probs``,
                                  1+hi)A)``                    both clips
    ``"gspo"``                    as dapo with the sequence    ``advantages, old_log_probs,
                                  ratio ``s``                  response_mask``, both clips
    ``"cispo"``                   ``-sg(clip(r)) A log pi``    ``advantages, old_log_probs``,
                                                               both clips
    ``"sapo"``                    ``-(4/tau) sigmoid(tau(r-1)) ``advantages, old_log_probs``
                                  A``
    ============================  ===========================  ==============================

    "Both clips" are ``cliprange_low`` and ``cliprange_high``; each defaults to
    ``cliprange`` when not given. ``sapo_tau_pos``/``sapo_tau_neg`` are SAPO's temperatures.
    The functions are :func:`compute_dapo_clip_loss`, :func:`compute_gspo_loss`,
    :func:`compute_cispo_loss` and :func:`compute_sapo_loss`.

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
    if loss_type in ("dapo", "cispo"):
        _require(loss_type, advantages=advantages, old_log_probs=old_log_probs)
        low, high = _clip_pair(loss_type, cliprange, cliprange_low, cliprange_high)
        fn = compute_dapo_clip_loss if loss_type == "dapo" else compute_cispo_loss
        return fn(advantages, policy_log_probs, old_log_probs, low, high)
    if loss_type == "gspo":
        _require(
            loss_type,
            advantages=advantages,
            old_log_probs=old_log_probs,
            response_mask=response_mask,
        )
        low, high = _clip_pair(loss_type, cliprange, cliprange_low, cliprange_high)
        return compute_gspo_loss(
            advantages, policy_log_probs, old_log_probs, response_mask, low, high
        )
    if loss_type == "sapo":
        _require(loss_type, advantages=advantages, old_log_probs=old_log_probs)
        return compute_sapo_loss(
            advantages, policy_log_probs, old_log_probs, sapo_tau_pos, sapo_tau_neg
        )
    raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {LOSS_TYPES}")


def token_mean_constant(response_mask: Shaped[Tensor, "*batch seq"]) -> Float[Tensor, ""]:
    r"""The ``normalize_constant`` of ``length_norm="token_mean"``: the mean number of
    response tokens per response over the whole batch, :math:`\max(1, \sum m) / B`.

    DAPO's token-level loss (Yu et al. 2025, eq. 8) divides the sum over every token of every
    response by the batch's token count. Written per response,

    .. math::
        \frac{1}{\sum_b |o_b|}\sum_b \sum_t \ell_{bt}
        = \frac{1}{B}\sum_b \frac{1}{\bar L}\sum_t \ell_{bt},
        \qquad \bar L = \frac{1}{B}\sum_b |o_b|,

    it is ``masked_normalize`` with the constant :math:`\bar L`. Computed once on the
    whole batch of an optimizer step (all its microbatches) and passed to every microbatch,
    it makes ``k`` accumulated microbatches of equal size equal one step over the batch; a
    microbatch's own token count would weigh tokens of short microbatches more (the bug of
    TRL #3021). ``max(1, .)`` keeps a batch without response tokens at loss 0, not 0/0.

    Args:
        response_mask: the mask of the *whole* batch, ``(B, T)``.

    >>> token_mean_constant(torch.tensor([[1, 1, 0], [1, 1, 1]]))
    tensor(2.5000)
    """
    rows = math.prod(response_mask.shape[:-1])
    tokens = (response_mask != 0).sum()
    return tokens.clamp(min=1).to(torch.get_default_dtype()) / rows


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
    normalize_constant: float | Tensor | None = None,
    token_weights: Float[Tensor, "*batch seq"] | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
    ref_log_probs: Float[Tensor, "*batch seq"] | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
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
    - ``length_norm="token_mean"`` (DAPO, Yu et al. 2025, eq. 8: every token of the batch
      weighs the same): the same sum over a constant, with ``normalize_constant`` the mean
      response length of the *whole* batch of the optimizer step
      (:func:`token_mean_constant`), which makes the loss the sum over all the batch's
      tokens divided by their count.

    ``kl_coef > 0`` adds :math:`\beta\,\mathrm{KL}_t` to each token's loss before the
    reduction (GRPO's eq. 3 puts it there), with the estimator ``kl_estimator`` of
    :func:`~reasoning_core.kl.kl_penalty` against ``ref_log_probs`` (a frozen reference
    policy's log-probs, detached). ``kl_coef = 0`` (the default) adds nothing, bit for bit.

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
            on ``length_norm="masked_normalize"`` or ``"token_mean"`` without
            ``normalize_constant``, on an unknown ``kl_estimator``, or on ``kl_coef > 0``
            without ``ref_log_probs``.
    """
    if length_norm not in LENGTH_NORMS:
        raise ValueError(f"unknown length_norm {length_norm!r}; expected one of {LENGTH_NORMS}")
    if length_norm != "masked_mean" and normalize_constant is None:
        raise ValueError(f"length_norm={length_norm!r} needs normalize_constant, which is None")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {kl_estimator!r}; expected one of {KL_ESTIMATORS}")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and ref_log_probs is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_log_probs, which is None")
    token_loss, pg_meta = compute_policy_gradient_loss(
        policy_log_probs=policy_log_probs,
        loss_type=loss_type,
        raw_rewards=raw_rewards,
        advantages=advantages,
        old_log_probs=old_log_probs,
        cliprange=cliprange,
        cliprange_low=cliprange_low,
        cliprange_high=cliprange_high,
        response_mask=response_mask,
        sapo_tau_pos=sapo_tau_pos,
        sapo_tau_neg=sapo_tau_neg,
    )
    if token_weights is not None:
        token_loss = apply_token_weights(token_loss, token_weights)
    kl = None
    if ref_log_probs is not None:
        kl = kl_penalty(policy_log_probs, ref_log_probs, kl_estimator)
        if kl_coef > 0:
            token_loss = token_loss + kl_coef * kl
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
    if kl is not None:
        metadata["kl_mean"] = masked_mean_or_zero(kl.detach(), response_mask)
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
    normalize_constant: float | Tensor | None = None,
    token_weights: Float[Tensor, "batch seq"] | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
    ref_log_probs: Float[Tensor, "batch seq"] | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """One policy-gradient microbatch: :func:`grpo_loss` divided by
    ``gradient_accumulation_steps``, then ``loss.backward()``.

    With ``k`` equal microbatches the accumulated gradient equals that of one step over the
    whole batch with ``gradient_accumulation_steps = 1`` (for ``masked_normalize`` and
    ``token_mean`` this needs the same ``normalize_constant`` in every microbatch, which is
    why it is a required constant rather than the microbatch's padded length or token
    count: for ``token_mean``, :func:`token_mean_constant` of the whole batch). That holds with empty
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
        cliprange_low=cliprange_low,
        cliprange_high=cliprange_high,
        sapo_tau_pos=sapo_tau_pos,
        sapo_tau_neg=sapo_tau_neg,
        ref_log_probs=ref_log_probs,
        kl_coef=kl_coef,
        kl_estimator=kl_estimator,
    )
    loss = loss / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), metadata


def _check_accumulation(steps: int) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be a positive int, got {steps!r}")
