"""The rollout engine's log-probs of its sampled tokens, placed on the training batch's grid.

The trainers score the re-tokenized response text (:func:`~reasoning_core.runtime.training.batching.
tokenize_pairs`), not the engine's sampled ids. The two are the same tokens wherever the sampled
ids are the text's own tokenization, which is the usual case for a trained model and not always
for a random one (a byte piece, an odd split), and the text drops a trailing EOS and anything
past a stop string left out. So the engine's ``Completion.logprobs`` line up with the policy's
log-probs only on the leading response positions whose labels equal the sampled ids, one for
one: after the first difference the contexts differ too. :func:`engine_log_probs` returns the
engine's log-probs there and the mask of those positions, for
:func:`reasoning_core.logprob_mismatch` and :func:`reasoning_core.tis_weights`.

The trainers measure the difference on every rollout batch against a policy pass that already
runs where there is one (:class:`MismatchSums` adds it up over micro batches): GRPO's old
log-probs when it computes them, else the first update's own forward (:class:`EngineCheck`),
whose weights are still the sampling policy's. :class:`MismatchWarner` says so on stderr, once
per run, when the mean difference passes setting ``logprob_diff_warn``. :class:`RolloutCheck`
is the whole check as one object a trainer's loop calls: once per rollout batch
(:meth:`RolloutCheck.start`), and after that batch's first update
(:meth:`RolloutCheck.after_update`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch

from reasoning_core import logprob_mismatch, mismatch_warning, tis_weights
from reasoning_core.runtime.engines.rollout import Completion

# The keys a rollout batch's check adds to its train lines (the last two with TIS only).
MISMATCH_KEYS = (
    "rollout/logprob_diff_mean",
    "rollout/logprob_diff_max",
    "rollout/ratio_outside",
    "rollout/logprob_aligned",
)
TIS_KEYS = ("rollout/tis_weight_mean", "rollout/tis_clipped")
# The keys of an off-policy correction (``offpolicy_correction``) on a rollout batch's lines.
OFFPOLICY_KEYS = ("offpolicy/masked", "offpolicy/truncated", "offpolicy/weight_mean")

# An off-policy correction's weights: (proximal, behaviour, mask) -> (weights, metadata), the
# metadata means over the mask (:func:`reasoning_core.offpolicy_weights`, name and settings
# bound).
Correction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict]]


def engine_log_probs(
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    completions: list[Completion],
    field: str = "logprobs",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log_probs, aligned)``, both (rows, seq) like ``labels``.

    Args:
        labels, response_mask: of a tokenized batch, one row per completion in the same order
            (the ``TokenBatch`` of ``tokenize_pairs(prompts, [c.text ...], tokenizer)``).
        completions: the engine's completions of those rows.
        field: ``"logprobs"`` (the raw policy's, what the training forward computes) or
            ``"sampling_logprobs"`` (under the distribution sampled from).

    Returns:
        float32 log-probs at the aligned positions (0 elsewhere) and the bool mask of the
        aligned positions: the leading response positions whose labels are the completion's
        sampled ids, one for one (a row whose text re-tokenizes differently from its first
        response token on has none), less any position whose engine log-prob is not finite
        (a completion the engine did not sample carries NaN: there is nothing to compare).

    Raises:
        ValueError: when the rows and completions differ in number, or a completion has no
            ``field`` (vLLM gives ``sampling_logprobs`` only where they follow from the raw ones).
    """
    mask = response_mask.bool()
    if len(completions) != labels.shape[0]:
        raise ValueError(f"{labels.shape[0]} token rows but {len(completions)} completions")
    values = torch.zeros(labels.shape, dtype=torch.float32)
    aligned = torch.zeros(labels.shape, dtype=torch.bool)
    for row, completion in enumerate(completions):
        scores = getattr(completion, field)
        if scores is None:
            raise ValueError(f"completion {row} has no {field} (the engine did not return them)")
        positions = mask[row].nonzero().squeeze(-1)
        ids = labels[row, positions].tolist()
        k, sampled = 0, completion.token_ids
        while k < min(len(ids), len(sampled)) and ids[k] == sampled[k]:
            k += 1
        given = torch.tensor(scores[:k], dtype=torch.float32)
        finite = torch.isfinite(given)
        values[row, positions[:k]] = torch.where(finite, given, torch.zeros_like(given))
        aligned[row, positions[:k]] = finite
    return values, aligned


@dataclass
class MismatchSums:
    """The check of one rollout batch, added up over the pieces (micro batches) it is scored
    in: sums over the compared tokens, so that :meth:`metrics` is the whole batch's."""

    diff: float = 0.0  # sum of |policy - engine|
    diff_max: float = 0.0
    outside: float = 0.0  # tokens whose ratio lies outside RATIO_BAND
    aligned: int = 0  # tokens compared
    responses: int = 0  # response tokens
    weight: float = 0.0  # sum of the TIS weights
    clipped: float = 0.0  # tokens whose ratio passed the cap
    tis: bool = False
    masked: float = 0.0  # an off-policy correction's masked tokens
    truncated: float = 0.0  # ... its truncated tokens
    correction_weight: float = 0.0  # ... the sum of its weights
    corrected: bool = False

    def add(
        self,
        policy_log_probs: torch.Tensor,
        values: torch.Tensor,
        aligned: torch.Tensor,
        response_mask: torch.Tensor,
        tis_cap: float | None = None,
        correction: Correction | None = None,
    ) -> torch.Tensor | None:
        """Count one piece: the policy's log-probs (detached here) against the engine's
        ``values`` on the ``aligned`` positions, all of one shape. With ``tis_cap``, return
        the piece's TIS weights (:func:`reasoning_core.tis_weights`, 1 off the aligned
        positions); with ``correction``, its off-policy weights, the policy's log-probs taken
        as the proximal policy's and the engine's as the behaviour policy's; else None."""
        policy = policy_log_probs.detach().float()
        stats = logprob_mismatch(policy, values, aligned)
        n = int(aligned.sum())
        self.diff += float(stats["logprob_diff_mean"]) * n
        self.diff_max = max(self.diff_max, float(stats["logprob_diff_max"]))
        self.outside += float(stats["ratio_outside"]) * n
        self.aligned += n
        self.responses += int(response_mask.sum())
        if correction is not None:
            weights, meta = correction(policy, values, aligned)
            self.corrected = True
            self.masked += float(meta["masked"]) * n
            self.truncated += float(meta["truncated"]) * n
            self.correction_weight += float(meta["weight_mean"]) * n
            return weights
        if tis_cap is None:
            return None
        weights, meta = tis_weights(policy, values, aligned, cap=tis_cap)
        self.tis = True
        self.weight += float(meta["tis_weight_mean"]) * n
        self.clipped += float(meta["tis_clipped"]) * n
        return weights

    def sums(self) -> dict[str, float]:
        """The fields that add up over pieces and ranks (all but ``diff_max``), as floats."""
        return {f.name: float(getattr(self, f.name)) for f in fields(self) if f.name != "diff_max"}

    def with_sums(self, sums: dict[str, float], diff_max: float) -> MismatchSums:
        """A copy holding ``sums`` (:meth:`sums`' fields, added up elsewhere) and ``diff_max``,
        each field back in its own type (a flag: set when its sum is not 0)."""
        values = {name: type(getattr(self, name))(value) for name, value in sums.items()}
        return replace(self, **values, diff_max=diff_max)

    def metrics(self) -> dict[str, float]:
        """:data:`MISMATCH_KEYS` (and :data:`TIS_KEYS` after a TIS piece,
        :data:`OFFPOLICY_KEYS` after a corrected one): means over the compared tokens, 0 when
        there was none; ``rollout/logprob_aligned`` is their share of the response tokens.
        With no token compared, the TIS weight mean is 1 (no token was weighted), and the
        correction's weight mean 0 (as :func:`reasoning_core.offpolicy_weights` says)."""
        n = max(1, self.aligned)
        out = {
            "rollout/logprob_diff_mean": self.diff / n,
            "rollout/logprob_diff_max": self.diff_max,
            "rollout/ratio_outside": self.outside / n,
            "rollout/logprob_aligned": self.aligned / self.responses if self.responses else 0.0,
        }
        if self.tis:
            out["rollout/tis_weight_mean"] = self.weight / n if self.aligned else 1.0
            out["rollout/tis_clipped"] = self.clipped / n
        if self.corrected:
            out["offpolicy/masked"] = self.masked / n
            out["offpolicy/truncated"] = self.truncated / n
            out["offpolicy/weight_mean"] = self.correction_weight / n
        return out


class EngineCheck(NamedTuple):
    """The engine's side of a rollout batch (:func:`engine_log_probs`), for an update that
    measures the difference on its own forward (its weights still the sampling policy's, or
    with a rollout lag the proximal policy's) and, with ``tis_cap`` or ``correction``,
    weights the loss by TIS or by the off-policy correction from it."""

    values: torch.Tensor
    aligned: torch.Tensor
    tis_cap: float | None = None
    correction: Correction | None = None

    def measure(
        self,
        sums: MismatchSums,
        rows: torch.Tensor,
        policy_log_probs: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> torch.Tensor | None:
        """Add a micro batch (``rows`` of the rollout batch, its log-probs and mask on the
        update's device, as wide as its longest row) to ``sums``; its TIS or correction
        weights, or None."""
        width, device = policy_log_probs.shape[-1], policy_log_probs.device
        values = self.values[rows, :width].to(device)
        aligned = self.aligned[rows, :width].to(device)
        return sums.add(
            policy_log_probs, values, aligned, response_mask, self.tis_cap, self.correction
        )


def check_rollouts(
    engine: tuple[torch.Tensor, torch.Tensor],
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor | None,
    tis_cap: float | None,
    correction: Correction | None = None,
) -> tuple[dict[str, float], torch.Tensor | None, EngineCheck | None]:
    """A rollout batch's check against the sampling policy: ``(metrics, weights, live)``.

    With ``old_log_probs`` (the sampling or proximal policy's, scored for the whole batch)
    the metrics and, with ``tis_cap`` or ``correction``, the weights (rollouts, seq) come from
    them now, at no further cost; ``live`` is None. Without, they come from the first update's
    forward: the metrics are empty, the weights None, and ``live`` the :class:`EngineCheck`
    to give that update."""
    values, aligned = engine
    if old_log_probs is None:
        return {}, None, EngineCheck(values, aligned, tis_cap, correction)
    sums = MismatchSums()
    weights = sums.add(old_log_probs, values, aligned, response_mask, tis_cap, correction)
    return sums.metrics(), weights, None


class MismatchWarner:
    """Prints :func:`reasoning_core.mismatch_warning` on stderr the first time a rollout
    batch's mean difference exceeds ``threshold`` (None: never), then stays quiet: one line
    per run, not one per step."""

    def __init__(self, threshold: float | None, method: str) -> None:
        self.threshold, self.method, self.warned = threshold, method, False

    def __call__(self, metrics: dict[str, float]) -> None:
        if self.warned or "rollout/logprob_diff_mean" not in metrics:
            return
        message = mismatch_warning(metrics["rollout/logprob_diff_mean"], self.threshold)
        if message is not None:
            self.warned = True
            print(f"[{self.method}] warning: {message}", file=sys.stderr)


class RolloutCheck:
    """A run's engine check, as the GRPO loop calls it.

    Per rollout batch, :meth:`start` places the engine's log-probs of the sampled tokens on the
    batch's grid and checks them against ``old_log_probs`` when the run scores those (the
    metrics and the TIS or ``correction`` weights come at once), else leaves :attr:`pending`
    for the batch's first update to measure on its own forward (:func:`check_rollouts`);
    :meth:`after_update` keeps that update's ``rollout/`` (and ``offpolicy/``) measurement.
    :attr:`metrics` is the batch's check, for every train line of the batch; the warning goes
    to stderr once a run (:class:`MismatchWarner`).
    """

    def __init__(
        self,
        *,
        warn_threshold: float | None,
        method: str,
        tis_cap: float | None,
        correction: Correction | None = None,
    ):
        self.warn = MismatchWarner(warn_threshold, method)
        self.tis_cap, self.correction = tis_cap, correction
        self.metrics: dict[str, float] = {}
        self.pending: EngineCheck | None = None

    def start(
        self,
        labels: torch.Tensor,
        response_mask: torch.Tensor,
        completions: list[Completion],
        old_log_probs: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """Check a new rollout batch; its TIS or off-policy weights (rollouts, seq) when they
        come from ``old_log_probs``, else None (from the first update, or no weighting)."""
        sampled = engine_log_probs(labels, response_mask, completions)
        self.metrics, weights, self.pending = check_rollouts(
            sampled, response_mask, old_log_probs, self.tis_cap, self.correction
        )
        self.warn(self.metrics)
        return weights

    def after_update(self, checked: dict[str, float]) -> None:
        """After an update given :attr:`pending`: its measurement (``checked``, the ``rollout/``
        keys :func:`~reasoning_core.runtime.training.updates.grpo_update` returns beside its
        stats) becomes :attr:`metrics`, and the batch's later updates get none."""
        if self.pending is None:
            return
        keys = (*MISMATCH_KEYS, *TIS_KEYS, *OFFPOLICY_KEYS)
        self.metrics = {k: checked[k] for k in keys if k in checked}
        self.warn(self.metrics)
        self.pending = None
