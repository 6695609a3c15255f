"""``rrl ablations``: is each ablation's difference larger than its band?

Reads the per-seed rows of ``summary.tsv`` (:mod:`reasoning_core.runtime.report.table`) and
writes ``ablations.tsv``, one row per (metric, run, baseline) comparison:

- every run of an experiment against that experiment's ``default`` run (``grpo/lr~3e-4``
  against ``grpo/default``);
- the ``leaderboard`` against ``grpo/default`` (GRPO from the SFT checkpoint against GRPO from
  the base);
- ``dpo/default`` (DPO on verified pairs from the SFT checkpoint) against ``sft/default``
  (where it starts), ``ei/default`` and ``grpo/default``; ``dpo/init~base`` (from the base)
  against ``ei/default`` and ``grpo/default``, which start there too;
- every trained run against ``zero_shot`` (its seeds; a ``zero_shot`` folder without seeds,
  one evaluation, is taken as a constant).

For a run with seeds ``x_1..x_n`` (mean ``a``, sample variance ``s_a^2``) against a baseline
with ``m`` values (mean ``b``, ``s_b^2``; ``s_b^2 / m`` is 0 for a single value)::

    diff = a - b,   se^2 = s_a^2 / n + s_b^2 / m,
    df = se^4 / ((s_a^2/n)^2 / (n-1) + (s_b^2/m)^2 / (m-1))   (Welch-Satterthwaite; a
         single-value side contributes no term), rounded down to an integer >= 1,
    diff_ci95 = t_{0.975, df} * se

(rounding ``df`` down widens the interval a little: the conservative side). ``clear`` is
true when the interval ``diff +- diff_ci95`` excludes 0, i.e. the difference is larger than its
band; with one seed on both sides there is no band and ``clear`` is empty.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.bands import mean_and_std, t_quantile
from reasoning_core.runtime.report.seeds import SEED_METRICS
from reasoning_core.runtime.report.table import write_summary

ZERO_SHOT = "zero_shot"
LEADERBOARD = ("leaderboard", "grpo/default")
# DPO on verified pairs (from the SFT checkpoint; from the base) against the other methods'
# default runs.
DPO_AGAINST = (
    ("dpo/default", "sft/default"),
    ("dpo/default", "ei/default"),
    ("dpo/default", "grpo/default"),
    ("dpo/init~base", "ei/default"),
    ("dpo/init~base", "grpo/default"),
)
COLUMNS = (
    "metric",
    "run",
    "baseline",
    "n_run",
    "n_baseline",
    "run_mean",
    "baseline_mean",
    "diff",
    "diff_ci95",
    "diff_low",
    "diff_high",
    "clear",
)


def read_seed_values(summary: str | Path) -> dict[str, dict[str, list[float]]]:
    """``{run: {metric: [value per seed]}}`` from ``summary.tsv``: the rows whose ``seed`` is a
    number, or the one row of a run without seeds; ``mean`` rows are skipped. ValueError
    naming the file and line for a missing column or a value that is not a number."""
    summary = Path(summary)
    with summary.open(newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        missing = [c for c in ("run", *SEED_METRICS) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{summary}: missing column(s) {missing}")
        values: dict[str, dict[str, list[float]]] = {}
        for line, row in enumerate(reader, start=2):
            if row.get("seed", "") == "mean":
                continue
            run = values.setdefault(row["run"], {m: [] for m in SEED_METRICS})
            for metric in SEED_METRICS:
                cell = row[metric]
                if cell == "":
                    continue  # a seed without a final evaluation
                try:
                    run[metric].append(float(cell))
                except ValueError:
                    raise ValueError(
                        f"{summary} line {line}: {metric} {cell!r} is not a number"
                    ) from None
    return values


def difference(run: Sequence[float], baseline: Sequence[float]) -> dict[str, Any]:
    """Mean difference ``run - baseline`` and its Welch 95% half-width (module docstring);
    ``diff_ci95`` is None when neither side has two values."""
    a, sa = mean_and_std(run)
    b, sb = mean_and_std(baseline)
    terms = [(s * s / len(v), len(v)) for s, v in ((sa, run), (sb, baseline)) if s is not None]
    out: dict[str, Any] = {"run_mean": a, "baseline_mean": b, "diff": a - b}
    if not terms:
        return {**out, "diff_ci95": None}
    var = sum(t for t, _ in terms)
    if var == 0.0:
        return {**out, "diff_ci95": 0.0}
    df = var * var / sum(t * t / (k - 1) for t, k in terms)
    return {**out, "diff_ci95": t_quantile(max(1, math.floor(df + 1e-9))) * math.sqrt(var)}


def comparisons(runs: Sequence[str]) -> list[tuple[str, str]]:
    """The (run, baseline) pairs of the module docstring among ``runs`` (in their order)."""
    present = set(runs)
    pairs = []
    for run in runs:
        experiment, _, rest = run.partition("/")
        default = f"{experiment}/default"
        if rest and rest != "default" and default in present:
            pairs.append((run, default))
    if set(LEADERBOARD) <= present:
        pairs.append(LEADERBOARD)
    pairs += [pair for pair in DPO_AGAINST if set(pair) <= present]
    if ZERO_SHOT in present:
        pairs += [(run, ZERO_SHOT) for run in runs if run not in (ZERO_SHOT, "base")]
    return pairs


def compared(
    metric: str, run: str, baseline: str, x: Sequence[float], y: Sequence[float]
) -> dict[str, Any]:
    """One comparison row: the seed counts, :func:`difference`, its interval's ends and
    ``clear`` (None without a band)."""
    d = difference(x, y)
    h = d["diff_ci95"]
    return {
        "metric": metric,
        "run": run,
        "baseline": baseline,
        "n_run": len(x),
        "n_baseline": len(y),
        **d,
        "diff_low": None if h is None else d["diff"] - h,
        "diff_high": None if h is None else d["diff"] + h,
        "clear": None if h is None else abs(d["diff"]) > h,
    }


def ablation_rows(values: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    """The rows of ``ablations.tsv`` (columns :data:`COLUMNS`) for the runs of ``values``."""
    rows = []
    for metric in SEED_METRICS:
        for run, baseline in comparisons(list(values)):
            x, y = values[run][metric], values[baseline][metric]
            if x and y:
                rows.append(compared(metric, run, baseline, x, y))
    return rows


def write_ablations(rows: list[dict[str, Any]], out: str | Path) -> Path:
    """Write ``rows`` as a tab-separated table with :data:`COLUMNS` (atomically)."""
    return write_summary(rows, out, columns=COLUMNS)


def main_ablations(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl ablations",
        description="Each ablation against its baseline across seeds: mean difference and "
        "its 95% Welch interval, from summary.tsv.",
    )
    parser.add_argument("--summary", required=True, help="summary.tsv (rrl summary)")
    parser.add_argument("--out", required=True, help="TSV file, e.g. results/default/ablations.tsv")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        rows = ablation_rows(read_seed_values(args.summary))
    except (OSError, ValueError) as exc:
        print(f"rrl ablations: {exc}", file=sys.stderr)
        return 2
    write_ablations(rows, args.out)
    clear = sum(1 for r in rows if r["clear"])
    print(f"rrl ablations: wrote {args.out} ({len(rows)} comparisons, {clear} clear of 0)")
    return 0
