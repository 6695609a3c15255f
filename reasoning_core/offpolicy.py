r"""Off-policy corrections: per-token weights of the policy-gradient loss for samples drawn by
another policy than the one the loss takes as its sampler.

Three policies meet in an asynchronous (or merely mismatched) update:

- the **behaviour** policy :math:`\mu` drew the tokens: the rollout engine, possibly holding
  weights several updates old (its log-probs come back with the samples);
- the **proximal** policy :math:`\pi_\text{prox}`: the learner's weights at the start of the
  update, scored once per rollout batch without gradients (the ``old_log_probs`` the ratio
  losses clip against) or, when the batch takes a single optimizer step, read from that
  step's own forward, detached (the same weights);
- the **current** policy :math:`\pi_\theta`, being trained.

A correction turns :math:`r_t = \pi_\text{prox}(o_t) / \mu(o_t)`, the per-token ratio of
proximal to behaviour, into a detached weight :math:`w_t` that multiplies token ``t``'s loss
(``LossInputs.token_weights``); the loss itself (its clip on :math:`\pi_\theta /
\pi_\text{prox}`) is unchanged. A weight of 0 is a token that never trains. Where behaviour
and proximal agree, :math:`r_t = \exp(0) = 1` exactly and every correction gives
:math:`w_t = 1` exactly: the loss and its gradient are the plain ones bit for bit.

Each correction is registered in :data:`reasoning_core.registry.OFFPOLICY_CORRECTIONS`
(``offpolicy_correction`` names it) with its paper and settings; :func:`offpolicy_weights`
dispatches. All are pure and work per row, so a batch's weights are its rows' weights
whatever the rows are grouped with (micro batches).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ._typing import Float, Shaped, Tensor
from .correction import _masked_diff as _log_ratio  # log(prox / behaviour), 0 off the mask
from .correction import tis_weights
from .masked import masked_mean_or_zero
from .registry import (
    OFFPOLICY_CORRECTIONS,
    Param,
    correction_settings,
    register_offpolicy_correction,
)

__all__ = ["offpolicy_weights"]


def _metadata(weights: Tensor, keep: Tensor, masked: Tensor, truncated: Tensor) -> dict:
    dtype = weights.dtype
    return {
        "masked": masked_mean_or_zero((keep & masked).to(dtype), keep),
        "truncated": masked_mean_or_zero((keep & truncated).to(dtype), keep),
        "weight_mean": masked_mean_or_zero(weights, keep),
    }


def _dropped(values: Tensor, drop: Tensor, keep: Tensor) -> tuple[Tensor, dict]:
    """``values`` with 0 where ``drop``, and the metadata (``drop`` counted as masked)."""
    weights = torch.where(drop, torch.zeros_like(values), values)
    return weights, _metadata(weights, keep, drop, torch.zeros_like(keep))


def _band(prefix: str, low: float, high: float) -> tuple[Param, Param]:
    """The settings ``{prefix}_low`` in (0, 1) and ``{prefix}_high`` above 1 of a band of
    ratios, with their defaults."""
    return (
        Param(f"{prefix}_low", low, above=0.0, below=1.0, meaning="lower end of the band"),
        Param(f"{prefix}_high", high, above=1.0, meaning="upper end of the band"),
    )


@register_offpolicy_correction(
    "none",
    paper="—",
    formula="1",
    note="every token weighs 1: the samples are taken as the proximal policy's own",
)
def no_correction(proximal, behaviour, mask, settings):
    """No correction: every weight is 1."""
    _, keep = _log_ratio(proximal, behaviour, mask)
    weights = torch.ones_like(proximal.detach())
    none = torch.zeros_like(keep)
    return weights, _metadata(weights, keep, none, none)


@register_offpolicy_correction(
    "tis",
    paper="Yao et al. 2025, Your Efficient RL Framework Secretly Brings You Off-Policy RL Training",
    formula="min(r, tis_cap)",
    params=(Param("tis_cap", 2.0, above=1.0, meaning="the largest weight"),),
    note="truncated importance sampling: weights above the cap are cut to it",
)
def tis_correction(proximal, behaviour, mask, settings):
    r"""Truncated importance sampling, :math:`w_t = \min(r_t, C)` (Yao et al. 2025):
    :func:`reasoning_core.tis_weights` itself, its clipped share reported as truncated."""
    weights, tis = tis_weights(proximal, behaviour, mask, settings["tis_cap"])
    none = torch.zeros_like(mask, dtype=torch.bool)
    meta = _metadata(weights, mask != 0, none, none)  # the mask as _log_ratio keeps it
    return weights, {**meta, "truncated": tis["tis_clipped"]}


@register_offpolicy_correction(
    "decoupled",
    paper="Hilton et al. 2022, Batch size-invariance for policy optimization; Fu et al. 2025, "
    "AReaL",
    formula="r, or 0 where r > decoupled_cap",
    params=(
        Param(
            "decoupled_cap",
            None,
            above=1.0,
            unbounded=True,
            meaning="tokens whose weight exceeds it are masked",
        ),
    ),
    note="decoupled PPO: the loss clips current/proximal, the weight proximal/behaviour",
)
def decoupled_correction(proximal, behaviour, mask, settings):
    r"""Decoupled PPO (Hilton et al. 2022; AReaL, Fu et al. 2025): the loss's clip acts on
    :math:`\pi_\theta/\pi_\text{prox}` (the ratio losses with ``old_log_probs`` the proximal
    policy's) and each token is weighted by the behaviour importance weight
    :math:`w_t = \pi_\text{prox}(o_t)/\mu(o_t)`, untruncated; with ``decoupled_cap`` set, a
    token whose weight exceeds it gets weight 0 (AReaL's behaviour-weight cap)."""
    diff, keep = _log_ratio(proximal, behaviour, mask)
    ratio = torch.exp(diff)
    cap = settings.get("decoupled_cap")
    if cap is None:
        return ratio, _metadata(ratio, keep, torch.zeros_like(keep), torch.zeros_like(keep))
    return _dropped(ratio, ratio > cap, keep)


@register_offpolicy_correction(
    "icepop",
    paper="Ling Team 2025, Every Step Evolves (Ring-1T; IcePop)",
    formula="r if icepop_low <= r <= icepop_high, else 0",
    params=_band("icepop", 0.5, 5.0),
    note="token masking: a token whose ratio leaves the band gets no gradient",
)
def icepop_correction(proximal, behaviour, mask, settings):
    r"""IcePop's double-sided token masking: :math:`w_t = r_t` when
    :math:`\alpha \le r_t \le \beta`, else 0 (the token is left out of the gradient rather than
    clipped), with :math:`\alpha` = ``icepop_low`` and :math:`\beta` = ``icepop_high``."""
    diff, keep = _log_ratio(proximal, behaviour, mask)
    ratio = torch.exp(diff)
    return _dropped(
        ratio, (ratio < settings["icepop_low"]) | (ratio > settings["icepop_high"]), keep
    )


@register_offpolicy_correction(
    "geo_mask",
    paper="Liu, Li et al. 2025, When Speed Kills Stability (geometric-mean rejection sampling)",
    formula="1 if geo_mask_low <= exp(mean_t log r) <= geo_mask_high over the response, else 0",
    params=_band("geo_mask", 0.9, 1.1),
    note="sequence masking: a response whose geometric-mean ratio leaves the band is dropped",
)
def geo_mask_correction(proximal, behaviour, mask, settings):
    r"""Sequence-level rejection by the geometric mean of the ratios (Liu, Li et al. 2025):
    :math:`g = \exp(\frac{1}{|o|}\sum_t \log r_t)` over the response's masked tokens; every
    token of a response with :math:`g` outside ``[geo_mask_low, geo_mask_high]`` weighs 0, the
    others 1 (a length-independent test: no product of ratios over hundreds of tokens)."""
    diff, keep = _log_ratio(proximal, behaviour, mask)
    count = keep.sum(dim=-1, keepdim=True)
    mean = diff.sum(dim=-1, keepdim=True) / count.clamp(min=1).to(diff.dtype)
    geo = torch.exp(mean)
    rejected = (geo < settings["geo_mask_low"]) | (geo > settings["geo_mask_high"])
    return _dropped(torch.ones_like(diff), rejected.expand_as(diff) & keep, keep)


def offpolicy_weights(
    name: str,
    proximal_log_probs: Float[Tensor, "*batch seq"],
    behaviour_log_probs: Float[Tensor, "*batch seq"],
    mask: Shaped[Tensor, "*batch seq"],
    settings: Mapping[str, float | None] | None = None,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    """The weights of correction ``name`` (a :data:`OFFPOLICY_CORRECTIONS` entry) and its
    metadata (``masked``, ``truncated``, ``weight_mean``), its settings taken from
    ``settings`` by name (missing ones at their defaults, checked against their bounds).

    Args:
        proximal_log_probs: the learner's log-probs of the sampled tokens at the start of the
            update.
        behaviour_log_probs: the log-probs of the policy that drew them (the engine's).
        mask: non-zero on the tokens that have both (the response tokens the engine's
            log-probs align with); every other token weighs exactly 1.

    Raises:
        ValueError: on an unknown name or a setting outside its bounds.
    """
    values = correction_settings(name, settings or {})
    entry = OFFPOLICY_CORRECTIONS[name]
    weights, metadata = entry.fn(proximal_log_probs, behaviour_log_probs, mask, values)
    keep = mask != 0
    # Off the mask nothing is known about the sampler: the token weighs 1.
    weights = torch.where(keep, weights, torch.ones_like(weights)).detach()
    return weights, metadata
