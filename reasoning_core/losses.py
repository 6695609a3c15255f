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

import torch

from ._typing import Float, Shaped, Tensor
from .correction import apply_token_weights
from .kl import kl_penalty
from .masked import masked_mean_or_zero, masked_normalize
from .registry import (
    LossInputs,
    LossSettings,
    Param,
    policy_loss,
    register_policy_loss,
)

__all__ = [
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
    log_ratio = policy_log_probs - old_log_probs.detach()
    seq_log_ratio = masked_mean_or_zero(log_ratio, response_mask, dim=-1).unsqueeze(-1)
    seq_ratio = torch.exp(seq_log_ratio.detach() + policy_log_probs - policy_log_probs.detach())
    loss, clipped = _clipped_surrogate(seq_ratio, advantages, cliprange_low, cliprange_high)
    return loss, {"clipped": clipped, "ratio": seq_ratio.detach()}


def compute_cispo_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    cliprange_low: float | None,
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
    paper sets no lower bound: ``cliprange_low=None`` (the registered loss's default) clips
    only from above. At ``r = 1`` the
    gradient is REINFORCE's, as GRPO-Clip's is; the loss *value* is ``-A log pi``, not GRPO's
    ``-r A``. MiniMax aggregates over all tokens of the batch
    (``grpo_loss(..., length_norm="token_mean")``).

    Returns:
        ``(loss (B, T), metadata)`` with ``clipped`` (bool per token: the weight was
        truncated; the token still has a gradient) and ``ratio``.
    """
    _check_column("advantages", advantages, policy_log_probs)
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    floor = None if cliprange_low is None else 1.0 - cliprange_low
    weight = torch.clamp(ratio, floor, 1.0 + cliprange_high).detach()
    loss = -weight * advantages * policy_log_probs
    outside = ratio > 1.0 + cliprange_high
    if floor is not None:
        outside = outside | (ratio < floor)
    metadata = {"clipped": outside.detach(), "ratio": ratio.detach()}
    return loss, metadata


def compute_sapo_loss(
    advantages: Float[Tensor, "*batch 1"],
    policy_log_probs: Float[Tensor, "*batch seq"],
    old_log_probs: Float[Tensor, "*batch seq"],
    tau_pos: float,
    tau_neg: float,
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
    """
    _check_column("advantages", advantages, policy_log_probs)
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


# The settings of the registered losses. A Param is written once and shared by the losses that
# take it, so a default or a bound has one home.
CLIPRANGE = Param("cliprange", meaning="epsilon: the ratio is clipped to [1 - eps, 1 + eps]")
CLIPRANGE_LOW = Param(
    "cliprange_low", default="cliprange", below=1.0, meaning="the ratio's lower clip, 1 - low"
)
CLIPRANGE_HIGH = Param(
    "cliprange_high", default="cliprange", meaning="the ratio's upper clip, 1 + high"
)
# MiniMax-M1 sets no lower bound on CISPO's importance weight.
CISPO_LOW = Param(
    "cliprange_low", unbounded=True, meaning="the weight's lower clip, 1 - low (none by default)"
)
SAPO_TAU_POS = Param("sapo_tau_pos", default=1.0, meaning="gate temperature where A > 0")
SAPO_TAU_NEG = Param("sapo_tau_neg", default=1.05, meaning="gate temperature where A <= 0")


def _with_clip_pair(fn, policy_log_probs, inputs, settings):
    """``fn`` (DAPO's or CISPO's per-token loss) of the inputs with the settings' clip pair."""
    low, high = settings.cliprange_low, settings.cliprange_high
    return fn(inputs.advantages, policy_log_probs, inputs.old_log_probs, low, high)


@register_policy_loss(
    "no_baseline",
    paper="Williams 1992 (REINFORCE)",
    formula="-R log pi",
    inputs=("raw_rewards",),
    note="the raw reward as the weight: no baseline",
)
def _no_baseline(policy_log_probs, response_mask, inputs, settings):
    return compute_naive_policy_gradient_loss(inputs.raw_rewards, policy_log_probs), {}


@register_policy_loss(
    "reinforce_with_baseline",
    paper="Williams 1992, with the group's mean as baseline (Shao et al. 2024)",
    formula="-A log pi",
    inputs=("advantages",),
    note="the advantage as the weight; on-policy it is GRPO's gradient without a ratio",
)
def _reinforce_with_baseline(policy_log_probs, response_mask, inputs, settings):
    return compute_naive_policy_gradient_loss(inputs.advantages, policy_log_probs), {}


@register_policy_loss(
    "grpo_clip",
    paper="Schulman et al. 2017 (PPO, eq. 7); Shao et al. 2024 (GRPO, eq. 3)",
    formula="-min(r A, clip(r, 1-eps, 1+eps) A)",
    inputs=("advantages", "old_log_probs"),
    params=(CLIPRANGE,),
    paper_settings={"cliprange": 0.2},
    note="PPO's trust region: a token whose ratio left the range stops its gradient",
)
def _grpo_clip(policy_log_probs, response_mask, inputs, settings):
    return compute_grpo_clip_loss(
        inputs.advantages, policy_log_probs, inputs.old_log_probs, settings.cliprange
    )


@register_policy_loss(
    "grpo_no_clip",
    paper="the unclipped importance-weighted policy gradient (the handout's GRPO-No-Clip)",
    formula="-r A",
    inputs=("advantages", "old_log_probs"),
    note="the importance-weighted gradient without a trust region",
)
def _grpo_no_clip(policy_log_probs, response_mask, inputs, settings):
    return compute_grpo_no_clip_loss(inputs.advantages, policy_log_probs, inputs.old_log_probs)


@register_policy_loss(
    "dapo",
    paper="Yu et al. 2025, DAPO (eq. 8, clip-higher)",
    formula="-min(r A, clip(r, 1-low, 1+high) A)",
    inputs=("advantages", "old_log_probs"),
    params=(CLIPRANGE_LOW, CLIPRANGE_HIGH),
    aggregation="token_mean",
    paper_settings={"cliprange_low": 0.2, "cliprange_high": 0.28},
    note="clip-higher: a higher upper clip lets unlikely tokens with a positive advantage "
    "grow, against entropy collapse",
)
def _dapo(policy_log_probs, response_mask, inputs, settings):
    return _with_clip_pair(compute_dapo_clip_loss, policy_log_probs, inputs, settings)


@register_policy_loss(
    "gspo",
    paper="Zheng et al. 2025, GSPO (eqs. 5-7, 13-14)",
    formula="-min(s A, clip(s, 1-low, 1+high) A), s = exp(mean_t log r_t) per response",
    inputs=("advantages", "old_log_probs", "response_mask"),
    params=(CLIPRANGE_LOW, CLIPRANGE_HIGH),
    paper_settings={"cliprange_low": 3e-4, "cliprange_high": 4e-4},
    note="one length-normalized ratio per response, clipped per response (the paper's "
    "ranges are 3e-4 and 4e-4)",
)
def _gspo(policy_log_probs, response_mask, inputs, settings):
    return compute_gspo_loss(
        inputs.advantages,
        policy_log_probs,
        inputs.old_log_probs,
        response_mask,
        settings.cliprange_low,
        settings.cliprange_high,
    )


@register_policy_loss(
    "cispo",
    paper="MiniMax 2025, MiniMax-M1 (eq. 4)",
    formula="-sg(clip(r, 1-low, 1+high)) A log pi",
    inputs=("advantages", "old_log_probs"),
    params=(CISPO_LOW, CLIPRANGE_HIGH),
    aggregation="token_mean",
    note="the importance weight is clipped (from above only, by default) and detached, so "
    "no token loses its gradient",
)
def _cispo(policy_log_probs, response_mask, inputs, settings):
    return _with_clip_pair(compute_cispo_loss, policy_log_probs, inputs, settings)


@register_policy_loss(
    "sapo",
    paper="Gao et al. 2025, SAPO (eqs. 6-8)",
    formula="-(4/tau) sigmoid(tau (r-1)) A, tau = tau_pos if A > 0 else tau_neg",
    inputs=("advantages", "old_log_probs"),
    params=(SAPO_TAU_POS, SAPO_TAU_NEG),
    note="a smooth gate instead of a hard clip; negative advantages decay faster",
)
def _sapo(policy_log_probs, response_mask, inputs, settings):
    return compute_sapo_loss(
        inputs.advantages,
        policy_log_probs,
        inputs.old_log_probs,
        settings.sapo_tau_pos,
        settings.sapo_tau_neg,
    )


def compute_policy_gradient_loss(
    policy_log_probs: Float[Tensor, "*batch seq"],
    loss_type: str,
    raw_rewards: Float[Tensor, "*batch 1"] | None = None,
    advantages: Float[Tensor, "*batch 1"] | None = None,
    old_log_probs: Float[Tensor, "*batch seq"] | None = None,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    response_mask: Shaped[Tensor, "*batch seq"] | None = None,
    sapo_tau_pos: float | None = None,
    sapo_tau_neg: float | None = None,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    """The per-token loss named by ``loss_type``, a :data:`~reasoning_core.POLICY_LOSSES`
    entry (docs/algorithms.md's table lists each one's formula, paper, inputs and settings).

    The handout's keywords, with the settings of the variants: ``cliprange`` (grpo_clip, and
    the default of the clip pair), ``cliprange_low``/``cliprange_high`` (dapo, gspo, cispo),
    ``sapo_tau_pos``/``sapo_tau_neg`` (sapo); None takes the entry's default. They are
    validated once, as a :class:`~reasoning_core.LossSettings`.

    Returns:
        ``(loss (B, T), metadata)``; every loss type reports ``clipped`` (bool per token,
        all False where nothing clips) so callers can log a clip fraction uniformly.

    Raises:
        ValueError: on an unknown ``loss_type``, a setting outside its bounds, or a missing
            argument it needs (named).
    """
    settings = LossSettings(
        loss_type,
        cliprange=cliprange,
        cliprange_low=cliprange_low,
        cliprange_high=cliprange_high,
        sapo_tau_pos=sapo_tau_pos,
        sapo_tau_neg=sapo_tau_neg,
    )
    inputs = LossInputs(raw_rewards=raw_rewards, advantages=advantages, old_log_probs=old_log_probs)
    return policy_loss(policy_log_probs, response_mask, inputs, settings)


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
    inputs: LossInputs,
    settings: LossSettings,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    r"""Pure policy-gradient objective of one batch of responses.

    The per-token loss of ``settings.loss_type`` (:func:`~reasoning_core.registry.policy_loss`
    of the rollout's ``inputs``) is reduced per response, then averaged over responses, as
    ``settings.length_normalization`` says:

    - ``"masked_mean"`` (GRPO as in Shao et al. 2024, eq. 3):
      :math:`\frac{1}{|o_b|}\sum_t \ell_{bt}`. Each response weighs the same, so a token of
      a short response weighs more than one of a long response.
    - ``"masked_normalize"`` (Dr. GRPO, Liu et al. 2025):
      :math:`\frac{1}{c}\sum_t \ell_{bt}` with a constant ``c`` (``normalize_constant``,
      e.g. the maximum generation length), so every token weighs the same.
    - ``"token_mean"`` (DAPO, Yu et al. 2025, eq. 8: every token of the batch
      weighs the same): the same sum over a constant, with ``normalize_constant`` the mean
      response length of the *whole* batch of the optimizer step
      (:func:`token_mean_constant`), which makes the loss the sum over all the batch's
      tokens divided by their count.

    ``settings.kl_coef > 0`` adds :math:`\beta\,\mathrm{KL}_t` to each token's loss before the
    reduction (GRPO's eq. 3 puts it there), with the estimator ``settings.kl_estimator`` of
    :func:`~reasoning_core.kl.kl_penalty` against ``inputs.ref_log_probs`` (a frozen reference
    policy's log-probs, detached). ``kl_coef = 0`` (the default) adds nothing, bit for bit.

    The loss is :math:`L = \frac{1}{B}\sum_b L_b` over all ``B`` rows. A row with no response
    token (``|o_b| = 0``) has :math:`L_b = 0` and no gradient under both norms: the per-response
    mean goes through :func:`~reasoning_core.masked.masked_mean_or_zero` (guarded, 0 on an
    empty row), not the handout's ``masked_mean`` (NaN there). On non-empty rows the two are
    bitwise equal, so batches without empty rows get exactly the handout's loss. Because empty
    rows still count in ``B``, the gradient with ``n`` empty rows of ``B`` is
    :math:`\frac{B-n}{B}` times that of the batch with those rows dropped.

    ``inputs.token_weights`` (e.g. :func:`~reasoning_core.correction.tis_weights`), when given,
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
            ``normalize_constant``, on an unknown ``kl_estimator``, or on ``settings.kl_coef > 0``
            without ``ref_log_probs``.
    """
    norm, constant = settings.length_normalization, settings.normalize_constant
    if norm != "masked_mean" and constant is None:
        raise ValueError(f"length_normalization={norm!r} needs normalize_constant, which is None")
    if settings.kl_coef > 0 and inputs.ref_log_probs is None:
        raise ValueError(f"kl_coef={settings.kl_coef} needs ref_log_probs, which is None")
    token_loss, pg_meta = policy_loss(policy_log_probs, response_mask, inputs, settings)
    if inputs.token_weights is not None:
        token_loss = apply_token_weights(token_loss, inputs.token_weights)
    kl = None
    if inputs.ref_log_probs is not None:
        kl = kl_penalty(policy_log_probs, inputs.ref_log_probs, settings.kl_estimator)
        if settings.kl_coef > 0:
            token_loss = token_loss + settings.kl_coef * kl
    if norm == "masked_mean":
        # Guarded: an empty row gives 0 and no gradient where masked_mean would give NaN.
        per_example = masked_mean_or_zero(token_loss, response_mask, dim=-1)
    else:
        per_example = masked_normalize(token_loss, response_mask, constant, dim=-1)
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
    loss_type: str | None = None,
    raw_rewards: Float[Tensor, "batch 1"] | None = None,
    advantages: Float[Tensor, "batch 1"] | None = None,
    old_log_probs: Float[Tensor, "batch seq"] | None = None,
    cliprange: float | None = None,
    length_norm: str = "masked_mean",
    normalize_constant: float | Tensor | None = None,
    *,
    inputs: LossInputs | None = None,
    settings: LossSettings | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """One policy-gradient microbatch: :func:`grpo_loss` divided by
    ``gradient_accumulation_steps``, then ``loss.backward()``.

    The objective is given either by the handout's keywords (``loss_type``, ``raw_rewards``,
    ``advantages``, ``old_log_probs``, ``cliprange``, ``length_norm``, ``normalize_constant``)
    or whole, as ``inputs`` (:class:`~reasoning_core.LossInputs`) and ``settings``
    (:class:`~reasoning_core.LossSettings`, which also carry the variants' settings, token
    weights and the KL penalty); not both.

    With ``k`` equal microbatches the accumulated gradient equals that of one step over the
    whole batch with ``gradient_accumulation_steps = 1`` (for ``masked_normalize`` and
    ``token_mean`` this needs the same ``normalize_constant`` in every microbatch, which is
    why it is a required constant rather than the microbatch's padded length or token
    count: for ``token_mean``, :func:`token_mean_constant` of the whole batch). That holds with empty
    response rows too: each contributes 0 and no gradient (never NaN) and counts in its
    microbatch's size, as :func:`grpo_loss` describes.

    Returns:
        ``(loss, metadata)``: the detached scaled loss and :func:`grpo_loss`'s metadata.

    Raises:
        ValueError: on both ways at once, or neither ``loss_type`` nor ``settings``.
    """
    _check_accumulation(gradient_accumulation_steps)
    handout = (raw_rewards, advantages, old_log_probs, cliprange, normalize_constant)
    if settings is None:
        if loss_type is None:
            raise ValueError("grpo_microbatch_train_step needs loss_type (or settings)")
        settings = LossSettings(
            loss_type,
            cliprange=cliprange,
            length_normalization=length_norm,
            normalize_constant=normalize_constant,
        )
    elif (
        loss_type is not None
        or length_norm != "masked_mean"
        or any(x is not None for x in handout[3:])
    ):
        raise ValueError("give settings or loss_type and its keywords, not both")
    if inputs is None:
        inputs = LossInputs(*handout[:3])
    elif any(x is not None for x in handout[:3]):
        raise ValueError("give inputs or raw_rewards/advantages/old_log_probs, not both")
    loss, metadata = grpo_loss(policy_log_probs, response_mask, inputs, settings)
    loss = loss / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), metadata


def _check_accumulation(steps: int) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be a positive int, got {steps!r}")
