"""Runs over several seeds: the mean and the 95% t-interval of the mean that every figure draws.

A run folder (``results/default/grpo/default``) holds either its own ``metrics.jsonl`` (one seed, the
layout of runs without a ``seeds`` setting) or one ``seed~N/`` folder per seed, each with its
``metrics.jsonl`` (see :func:`reasoning_core.runtime.report.runs.seed_folders`).

Across the ``n`` seeds that logged a point, the figures draw

    mean = (1/n) sum_i y_i,    s = sqrt(sum_i (y_i - mean)^2 / (n - 1)),
    interval = mean +- t_{0.975, n-1} * s / sqrt(n)

(the two-sided 95% Student-t interval of the mean; no interval when ``n = 1``). Points of
different seeds are joined on their step: the optimizer step (``step``) for curves against the
step or the wall clock (whose x is then the mean of the seeds' ``time/elapsed`` at that step),
the GRPO step (``grpo_step``, rollout batches done) for curves against it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reasoning_core.runtime.report.runs import is_number, moving_average

CONFIDENCE = 0.95
BAND_NOTE = "line: mean over {seeds} seeds; band: 95% t-interval of the mean"
BAR_NOTE = "bar: mean over {seeds} seeds; error bar: 95% t-interval of the mean; dots: seeds"
# Seconds per unit of the time axis (``--time-unit``).
TIME_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def t_two_sided_mass(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with ``df`` (integer >= 1) degrees of freedom, in
    closed form (Abramowitz and Stegun 26.7.3-4), with ``theta = atan(t / sqrt(df))``:

    - odd ``df``: ``(2/pi) (theta + sin(theta) sum_{k=0}^{(df-3)/2} a_k cos^{2k+1}(theta))``,
      ``a_0 = 1``, ``a_k = a_{k-1} 2k / (2k + 1)`` (only ``theta`` when ``df = 1``);
    - even ``df``: ``sin(theta) sum_{k=0}^{df/2-1} b_k cos^{2k}(theta)``, ``b_0 = 1``,
      ``b_k = b_{k-1} (2k - 1) / (2k)``."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df!r}")
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        term = total = math.cos(theta)
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        series = total if df > 1 else 0.0
        return 2.0 / math.pi * (theta + s * series)
    term = total = 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The ``t`` with ``P(|T| <= t) = confidence`` (``df`` degrees of freedom), by bisection
    on :func:`t_two_sided_mass` to 1e-12 relative: 12.706 for df 1, 4.303 for df 2."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    lo, hi = 0.0, 1.0
    while t_two_sided_mass(hi, df) < confidence:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if t_two_sided_mass(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values and its 95% t-interval ``[lo, hi]`` (``lo = hi = mean`` if n=1)."""

    mean: float
    lo: float
    hi: float
    n: int


def mean_and_std(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of one or more ``values`` and their sample standard deviation
    ``sqrt(sum((v - mean)^2) / (n - 1))`` (None for a single value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of ``values`` with ``mean +- t_{(1+confidence)/2, n-1} * s / sqrt(n)`` (``s``:
    sample standard deviation, ``n - 1`` in its denominator)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval of no values")
    mean, s = mean_and_std(values)
    if s is None:
        return Interval(mean, mean, mean, 1)
    half = t_quantile(n - 1, confidence) * s / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


@dataclass(frozen=True)
class Band:
    """A curve across seeds: at each ``x[j]``, the ``mean[j]`` of the ``n[j]`` seeds that
    logged the point and its interval ``[lo[j], hi[j]]`` (all lists of one length)."""

    x: list[float]
    mean: list[float]
    lo: list[float]
    hi: list[float]
    n: list[int]

    @property
    def seeds(self) -> int:
        """The most seeds behind any point (1: a single run's own curve)."""
        return max(self.n, default=0)


# One seed's points of one metric: (join key, x, y) in logged order.
Points = list[tuple[float, float, float]]


def with_grpo_steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` where each eval line lacking ``grpo_step`` gets the ``grpo_step`` of the
    last train line at or before its optimizer ``step`` (0 before any train line): the GRPO
    steps (rollout batches) done when it was evaluated. Unchanged when no train line carries a
    ``grpo_step`` (runs other than GRPO)."""
    marks: dict[float, float] = {}  # train step -> its grpo_step (the last logged wins)
    for r in records:
        if r.get("split") == "train" and is_number(r.get("step")):
            if is_number(r.get("grpo_step")):
                marks[float(r["step"])] = float(r["grpo_step"])
    if not marks:
        return records
    steps = sorted(marks)
    out = []
    for r in records:
        if r.get("split") == "eval" and "grpo_step" not in r and is_number(r.get("step")):
            i = bisect.bisect_right(steps, float(r["step"]))
            r = {**r, "grpo_step": marks[steps[i - 1]] if i else 0.0}
        out.append(r)
    return out


def points(
    records: list[dict[str, Any]], metric: str, x: str = "step", *, x_scale: float = 1.0
) -> Points:
    """``(key, x, y)`` of ``metric`` (``split/key``) in logged order: ``key`` is the GRPO step
    when ``x`` is ``grpo_step`` (derived for eval lines, :func:`with_grpo_steps`) and the
    optimizer step otherwise; ``x`` is divided by ``x_scale``. Records lacking a coordinate or
    holding a non-finite value are left out."""
    split, _, key = metric.partition("/")
    if not key:
        raise ValueError(f"metric {metric!r} must be split/key, e.g. eval/accuracy")
    join = "grpo_step" if x == "grpo_step" else "step"
    if x == "grpo_step":
        records = with_grpo_steps(records)
    out = []
    for r in records:
        if r.get("split") != split:
            continue
        k, xv, yv = r.get(join), r.get(x), r.get(key)
        if is_number(k) and is_number(xv) and is_number(yv):
            out.append((float(k), float(xv) / x_scale, float(yv)))
    return out


def smooth_points(pts: Points, window: int) -> Points:
    """The same points with y replaced by its trailing ``window``-point mean."""
    ys = moving_average([y for _, _, y in pts], window)
    return [(k, xv, y) for (k, xv, _), y in zip(pts, ys, strict=True)]


def aggregate(per_seed: Sequence[Points], confidence: float = CONFIDENCE) -> Band:
    """The band of one run's seeds (seeds without points are ignored).

    One seed: its points as logged (the run's own curve; ``lo = hi = mean``). Several: one
    point per join key logged by any seed, in key order, where each seed contributes its last
    logged point with that key; x is the mean of those seeds' x, then :func:`mean_interval`
    of their y (``n`` may fall below the seed count where a seed stopped early)."""
    per_seed = [p for p in per_seed if p]
    if not per_seed:
        return Band([], [], [], [], [])
    if len(per_seed) == 1:
        ys = [y for _, _, y in per_seed[0]]
        return Band([x for _, x, _ in per_seed[0]], ys, list(ys), list(ys), [1] * len(ys))
    by_key = [{k: (xv, y) for k, xv, y in pts} for pts in per_seed]
    band = Band([], [], [], [], [])
    for k in sorted(set().union(*by_key)):
        hits = [seed[k] for seed in by_key if k in seed]
        stats = mean_interval([y for _, y in hits], confidence)
        band.x.append(math.fsum(xv for xv, _ in hits) / len(hits))
        band.mean.append(stats.mean)
        band.lo.append(stats.lo)
        band.hi.append(stats.hi)
        band.n.append(stats.n)
    return band


def seed_count_text(counts: Sequence[int]) -> str:
    """``"3"`` or ``"2-3"``: the seed counts of the runs in a figure."""
    lo, hi = min(counts), max(counts)
    return str(hi) if lo == hi else f"{lo}-{hi}"
