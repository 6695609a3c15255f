"""``rrl robustness``: which conclusions of the study hold on every base model?

The seeded study's bands hold what the training seeds vary on one base. A base pretrained
from another seed (or on another CPU, which rounds differently) is another model, and a
conclusion drawn on one base can fail on the next. This report takes the ``summary.tsv`` of
one study per base (the default study on the shipped base, and the same runs on bases of other
pretraining seeds: ``workflow/config/robustness.yaml``) and compares, on each base, every
method's default run against ``zero_shot`` and against ``grpo/default`` with the difference
and Welch interval of :func:`reasoning_core.runtime.report.ablations.difference`.

It writes one tidy table, one row per (metric, run, baseline, base) plus one row per (metric,
run, baseline) with ``base`` = ``all``: ``holds`` there is true when the comparison is clear
with the same sign on every base it was made on (a conclusion), false when it is not (it
depends on the base), and the ``diff`` of that row is the smallest difference in size across
those bases. Not every base need run every ablation (a robustness study runs only each
method's default run): the ``all`` row counts the bases a comparison was made on in
``n_bases``, and a comparison made on one base only gets none.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.ablations import compared, read_seed_values
from reasoning_core.runtime.report.seeds import SEED_METRICS
from reasoning_core.runtime.report.table import write_summary

ZERO_SHOT = "zero_shot"
GRPO = "grpo/default"
ALL = "all"
COLUMNS = (
    "metric",
    "run",
    "baseline",
    "base",
    "n_run",
    "n_baseline",
    "run_mean",
    "baseline_mean",
    "diff",
    "diff_ci95",
    "clear",
    "holds",
    "n_bases",
)


def parse_base(text: str) -> tuple[str, Path]:
    """``NAME=summary.tsv`` -> (NAME, path); a bare path is named after its folder."""
    name, sep, path = text.partition("=")
    if not sep:
        path, name = text, Path(text).parent.name or text
    if not name or not path:
        raise ValueError(f"--base {text!r}: expected NAME=path/to/summary.tsv")
    return name, Path(path)


def base_rows(
    name: str, values: dict[str, dict[str, list[float]]], runs: Sequence[str]
) -> list[dict[str, Any]]:
    """Rows of one base: each of ``runs`` against zero-shot and against GRPO's default run."""
    rows = []
    for metric in SEED_METRICS:
        for run in runs:
            for baseline in (ZERO_SHOT, GRPO):
                if run == baseline or run == ZERO_SHOT or run not in values:
                    continue
                if baseline not in values:
                    continue
                x, y = values[run][metric], values[baseline][metric]
                if x and y:
                    rows.append(
                        {
                            **compared(metric, run, baseline, x, y),
                            "base": name,
                            "holds": None,
                            "n_bases": None,
                        }
                    )
    return rows


def across_bases(rows: list[dict[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """One ``base = all`` row per (metric, run, baseline) compared on two or more bases."""
    grouped: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["metric"], row["run"], row["baseline"]), {})[row["base"]] = row
    out = []
    for (metric, run, baseline), by_base in grouped.items():
        bases = [b for b in names if b in by_base]
        if len(bases) < 2:
            continue  # made on one base only: no verdict across bases
        diffs = [by_base[b]["diff"] for b in bases]
        same_sign = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
        holds = same_sign and all(by_base[b]["clear"] is True for b in bases)
        out.append(
            {
                "metric": metric,
                "run": run,
                "baseline": baseline,
                "base": ALL,
                "n_run": sum(by_base[b]["n_run"] for b in bases),
                "n_baseline": sum(by_base[b]["n_baseline"] for b in bases),
                "run_mean": sum(by_base[b]["run_mean"] for b in bases) / len(bases),
                "baseline_mean": sum(by_base[b]["baseline_mean"] for b in bases) / len(bases),
                "diff": min(diffs, key=abs),
                "diff_ci95": None,
                "clear": None,
                "holds": holds,
                "n_bases": len(bases),
            }
        )
    return out


def robustness_rows(bases: Sequence[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Every row of the report (module docstring) for the named summaries, in their order.
    The runs compared are those of the first base, in its order."""
    if len(bases) < 2:
        raise ValueError("rrl robustness: give at least two --base summaries")
    names = [name for name, _ in bases]
    if len(set(names)) != len(names):
        raise ValueError(f"rrl robustness: base names repeat: {names}")
    values = {name: read_seed_values(path) for name, path in bases}
    runs = list(values[names[0]])
    rows = [row for name in names for row in base_rows(name, values[name], runs)]
    return rows + across_bases(rows, names)


def main_robustness(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl robustness",
        description="Each method against zero-shot and against GRPO on several base models: "
        "which differences are clear, with the same sign, on every base.",
    )
    parser.add_argument(
        "--base",
        action="append",
        required=True,
        metavar="NAME=SUMMARY",
        help="a base's summary.tsv (repeat: two or more), e.g. base~0=results/default/summary.tsv",
    )
    parser.add_argument("--out", required=True, help="TSV file, e.g. results/robustness.tsv")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        rows = robustness_rows([parse_base(text) for text in args.base])
    except (OSError, ValueError) as exc:
        print(f"rrl robustness: {exc}", file=sys.stderr)
        return 2
    write_summary(rows, args.out, columns=COLUMNS)
    held = [r for r in rows if r["base"] == ALL]
    for n in sorted({r["n_bases"] for r in held}, reverse=True):
        made = [r for r in held if r["n_bases"] == n]
        print(
            f"[robustness] {sum(bool(r['holds']) for r in made)} of {len(made)} comparisons "
            f"made on {n} bases hold on all {n}",
            file=sys.stderr,
        )
    print(f"[robustness] -> {args.out}", file=sys.stderr)
    return 0
