"""``rrl tool-use``: does a policy keep calling its tool, across seeds?

For every run whose evaluation lines carry ``tool/call_rate`` (a multi-turn ``env``; see
docs/tools.md), the evaluations' share of episodes with a tool call is read at the start
(the first ``eval`` line: the starting model) and at the end (the last one) of each seed.
Rows, in the columns of ``ablations.tsv``:

- ``eval_tool_call_rate``, the run at its end against itself at its start (``baseline`` is
  the run's name with ``@start``): the call rate rose or fell beyond its band, or neither;
- ``eval_accuracy`` (the last evaluation) of the run against each run given without the tool
  (a single-turn control: the same recipe without the calculator), whether the tool pays;
- the same two metrics for each later tool run against each earlier one (a bonus for calling
  against none, say).

The difference and its 95% Welch interval are :func:`~reasoning_core.runtime.report.ablations.
compared`'s: ``clear`` when the interval excludes 0. The start and the end of one seed are
treated as independent samples, the conservative side for a paired comparison.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.ablations import compared, write_ablations
from reasoning_core.runtime.report.runs import read_metrics, seed_runs

CALL_RATE = "tool/call_rate"


def tool_values(run: str | Path) -> dict[str, list[float]]:
    """``{"start": [...], "end": [...], "accuracy": [...]}`` per seed of ``run`` (a folder of
    ``seed~N`` folders): the first and last evaluations' call rates and the last accuracy;
    the call rates are empty when no evaluation of the run has ``tool/call_rate`` (a
    single-turn run)."""
    out: dict[str, list[float]] = {"start": [], "end": [], "accuracy": []}
    for _, folder in seed_runs(run, None):
        evals = [r for r in read_metrics(folder) if r.get("split") == "eval"]
        if not evals:
            continue
        out["accuracy"].append(float(evals[-1]["accuracy"]))
        if CALL_RATE in evals[-1]:
            out["start"].append(float(evals[0][CALL_RATE]))
            out["end"].append(float(evals[-1][CALL_RATE]))
    return out


def tool_use_rows(runs: Sequence[tuple[str, str | Path]]) -> list[dict[str, Any]]:
    """The rows of the module docstring for ``runs``, ``(name, folder)`` pairs in order."""
    values = [(name, tool_values(folder)) for name, folder in runs]
    found = [(name, v) for name, v in values if v["end"]]
    controls = [(name, v) for name, v in values if not v["end"] and v["accuracy"]]
    rows = []
    for name, v in found:
        rows.append(compared("eval_tool_call_rate", name, f"{name}@start", v["end"], v["start"]))
        for control, w in controls:
            rows.append(compared("eval_accuracy", name, control, v["accuracy"], w["accuracy"]))
    for i, (name, v) in enumerate(found):
        for earlier, w in found[:i]:
            rows.append(compared("eval_tool_call_rate", name, earlier, v["end"], w["end"]))
            rows.append(compared("eval_accuracy", name, earlier, v["accuracy"], w["accuracy"]))
    return rows


def main_tool_use(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl tool-use",
        description="Whether each multi-turn run keeps calling its tool (the evaluations' call "
        "rate at the end against the start) and how the tool runs compare, with 95% bands.",
    )
    parser.add_argument(
        "runs",
        nargs="+",
        help="run folders (each holding seed~N folders), e.g. results/tools/grpo/*; a run "
        "without the tool's keys is a control whose accuracy each tool run is compared with",
    )
    parser.add_argument("--root", default=None, help="name runs by their path below this folder")
    parser.add_argument("--out", required=True, help="TSV file, e.g. results/tools/tool_use.tsv")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    named = []
    root = Path(args.root).resolve() if args.root else None
    for run in args.runs:
        path = Path(run)
        # A control from another study (its committed runs) keeps its path.
        under = root is not None and path.resolve().is_relative_to(root)
        name = path.resolve().relative_to(root).as_posix() if under else path.as_posix()
        named.append((name, path))
    try:
        rows = tool_use_rows(named)
    except (OSError, ValueError) as exc:
        print(f"rrl tool-use: {exc}", file=sys.stderr)
        return 2
    if not any(r["metric"] == "eval_tool_call_rate" for r in rows):
        print(
            f"rrl tool-use: no evaluation line of {args.runs} has {CALL_RATE!r} (runs with a "
            "multi-turn env write it)",
            file=sys.stderr,
        )
        return 2
    write_ablations(rows, args.out)
    clear = sum(1 for r in rows if r["clear"])
    print(f"rrl tool-use: wrote {args.out} ({len(rows)} comparisons, {clear} clear of 0)")
    return 0
