"""The committed study as if its GRPO runs had stopped after fewer GRPO steps.

    python benchmarks/truncated_study.py --results results --grpo-steps 20 30 40 --study-wall 3240

A GRPO run of N steps is exactly the first N steps of a longer run with the same settings (the
learning rate is constant after warm-up, randomness is keyed by step, and the evaluation draws
apart from training), and its final evaluation is the longer run's evaluation after N GRPO
steps when ``eval_every`` divides N: so the accuracies below are measured, not modelled. For
each N it prints the GRPO and leaderboard runs' mean accuracy with the 95% interval, the
comparisons of ``ablations.tsv`` whose verdict would change, the smallest difference to
zero-shot, and the job time per family with those runs cut at N (their benchmark seconds less
the time their ``metrics.jsonl`` logged after the evaluation at N). The wall time is an
estimate from the study's own: the base, plus half of the other jobs' seconds (two at once),
plus the study's measured overhead over that ideal (``--study-wall``).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.ablations import ablation_rows, read_seed_values
from reasoning_core.runtime.report.bands import with_grpo_steps
from reasoning_core.runtime.report.seeds import SEED_METRICS, mean_std_ci95

TRUNCATED = ("grpo", "leaderboard")  # experiments whose runs are GRPO runs


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eval_at(records: list[dict[str, Any]], grpo_step: int, path: Path) -> dict[str, Any]:
    """The evaluation line logged after ``grpo_step`` GRPO steps (KeyError naming the file and
    the GRPO steps that were evaluated when there is none)."""
    evals = [r for r in with_grpo_steps(records) if r.get("split") == "eval"]
    for r in evals:
        if r.get("grpo_step") == grpo_step:
            return r
    steps = [int(r["grpo_step"]) for r in evals if "grpo_step" in r]
    raise KeyError(f"{path}: no evaluation after {grpo_step} GRPO steps (evaluated: {steps})")


def seed_folders(results: Path, experiment: str) -> list[Path]:
    return sorted(p.parent for p in (results / experiment).rglob("seed~*/metrics.jsonl"))


def run_name(results: Path, folder: Path) -> str:
    return folder.parent.relative_to(results).as_posix()


def truncated_values(results: Path, grpo_steps: int) -> dict[str, dict[str, list[float]]]:
    """``read_seed_values`` of the study with every GRPO run's final values taken at
    ``grpo_steps``."""
    values = read_seed_values(results / "summary.tsv")
    for experiment in TRUNCATED:
        runs: dict[str, dict[str, list[float]]] = {}
        for folder in seed_folders(results, experiment):
            path = folder / "metrics.jsonl"
            line = eval_at(read_records(path), grpo_steps, path)
            run = runs.setdefault(run_name(results, folder), {m: [] for m in SEED_METRICS})
            run["eval_accuracy"].append(line["accuracy"])
            run["eval_format_reward"].append(line["format_reward"])
        values.update(runs)
    return values


def benchmark_seconds(path: Path) -> float:
    with path.open(newline="") as f:
        return float(list(csv.DictReader(f, delimiter="\t"))[-1]["s"])


def job_seconds(results: Path, grpo_steps: int | None) -> dict[str, float]:
    """Summed benchmark seconds per family; with ``grpo_steps``, each GRPO run less what its
    metrics logged after the evaluation at that many GRPO steps."""
    bench = results / "benchmarks"
    totals: dict[str, float] = {}
    for path in sorted(bench.rglob("*.tsv")):
        rel = path.relative_to(bench)
        family = rel.parts[0] if len(rel.parts) > 1 else path.stem
        seconds = benchmark_seconds(path)
        if grpo_steps is not None and family in TRUNCATED:
            folder = results / rel.with_suffix("")
            metrics = folder / "metrics.jsonl"
            records = read_records(metrics)
            cut = eval_at(records, grpo_steps, metrics)["time/elapsed"]
            seconds -= records[-1]["time/elapsed"] - cut
        totals[family] = totals.get(family, 0.0) + seconds
    return totals


def wall_estimate(totals: dict[str, float], base_s: float, overhead_s: float) -> float:
    return base_s + (sum(totals.values()) - base_s) / 2 + overhead_s


def report(results: Path, grpo_steps: int, study_wall: float | None) -> list[str]:
    values = truncated_values(results, grpo_steps)
    full = {
        (r["metric"], r["run"], r["baseline"]): r["clear"]
        for r in ablation_rows(read_seed_values(results / "summary.tsv"))
    }
    rows = ablation_rows(values)
    out = [f"## GRPO runs stopped after {grpo_steps} GRPO steps"]
    for run, metrics in values.items():
        if run.split("/")[0] in TRUNCATED:
            s = mean_std_ci95(metrics["eval_accuracy"])
            half = "" if s["ci95"] is None else f" ± {100 * s['ci95']:.1f}"
            out.append(f"{run:<78} accuracy {100 * s['mean']:5.1f}{half}")
    flips = [
        r
        for r in rows
        if (r["metric"], r["run"], r["baseline"]) in full
        and full[(r["metric"], r["run"], r["baseline"])] != r["clear"]
    ]
    out.append(f"verdicts that differ from the full study's: {len(flips)} of {len(rows)}")
    for r in flips:
        out.append(
            f"  {r['metric']} {r['run']} vs {r['baseline']}: {100 * r['diff']:+.1f} "
            f"({100 * r['diff_low']:+.1f} to {100 * r['diff_high']:+.1f}), clear {r['clear']}"
        )
    zero = [r for r in rows if r["baseline"] == "zero_shot" and r["metric"] == "eval_accuracy"]
    low = min(zero, key=lambda r: r["diff_low"])
    out.append(
        f"lowest interval against zero-shot: {low['run']} {100 * low['diff']:+.1f} "
        f"({100 * low['diff_low']:+.1f} to {100 * low['diff_high']:+.1f})"
    )
    before, after = job_seconds(results, None), job_seconds(results, grpo_steps)
    for family in after:
        out.append(f"  {family:<12} {before[family]:7.0f} s -> {after[family]:7.0f} s job time")
    out.append(f"  {'all':<12} {sum(before.values()):7.0f} s -> {sum(after.values()):7.0f} s")
    if study_wall is not None:
        base = before.get("base", 0.0)
        overhead = study_wall - wall_estimate(before, base, 0.0)
        wall = wall_estimate(after, base, overhead)
        out.append(
            f"wall estimate {wall:.0f} s ({wall / 60:.1f} min) from the study's {study_wall:.0f} s "
            f"(its overhead over base + half the other jobs: {overhead:.0f} s)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--grpo-steps", type=int, nargs="+", required=True)
    parser.add_argument("--study-wall", type=float, help="the study's measured wall seconds")
    args = parser.parse_args(argv)
    try:
        for steps in args.grpo_steps:
            print("\n".join(report(args.results, steps, args.study_wall)))
    except (KeyError, OSError, ValueError) as exc:
        print(f"truncated_study: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
