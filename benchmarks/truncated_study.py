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
import sys
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.ablations import ablation_rows, read_seed_values
from reasoning_core.runtime.report.bands import with_grpo_steps
from reasoning_core.runtime.report.runs import find_runs, read_metrics, seed_folders
from reasoning_core.runtime.report.seeds import mean_std_ci95

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from readme_tables import job_benchmarks  # noqa: E402

TRUNCATED = ("grpo", "leaderboard")  # experiments whose runs are GRPO runs


def eval_at(folder: Path, grpo_steps: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The evaluation line ``folder`` logged after ``grpo_steps`` GRPO steps, and all its
    records (KeyError naming the file and the GRPO steps that were evaluated when none was)."""
    records = read_metrics(folder)
    evals = [r for r in with_grpo_steps(records) if r.get("split") == "eval"]
    for r in evals:
        if r.get("grpo_step") == grpo_steps:
            return r, records
    steps = [int(r["grpo_step"]) for r in evals if "grpo_step" in r]
    raise KeyError(
        f"{folder / 'metrics.jsonl'}: no evaluation after {grpo_steps} GRPO steps "
        f"(evaluated: {steps})"
    )


def truncated_values(results: Path, grpo_steps: int) -> dict[str, dict[str, list[float]]]:
    """``read_seed_values`` of the study with every GRPO run's final values taken at
    ``grpo_steps``."""
    values = read_seed_values(results / "summary.tsv")
    for run in find_runs(results):
        name = run.relative_to(results).as_posix()
        if name.split("/")[0] not in TRUNCATED:
            continue
        lines = [eval_at(folder, grpo_steps)[0] for folder in seed_folders(run)]
        values[name] = {
            "eval_accuracy": [line["accuracy"] for line in lines],
            "eval_format_reward": [line["format_reward"] for line in lines],
        }
    return values


def job_seconds(results: Path, grpo_steps: int | None) -> dict[str, float]:
    """Summed benchmark seconds per family; with ``grpo_steps``, each GRPO run less what its
    metrics logged after the evaluation at that many GRPO steps."""
    totals: dict[str, float] = {}
    for family, job, seconds in job_benchmarks(results / "job_times"):
        if grpo_steps is not None and family in TRUNCATED:
            line, records = eval_at(results / job, grpo_steps)
            seconds -= records[-1]["time/elapsed"] - line["time/elapsed"]
        totals[family] = totals.get(family, 0.0) + seconds
    return totals


def wall_estimate(totals: dict[str, float], base_s: float, overhead_s: float) -> float:
    return base_s + (sum(totals.values()) - base_s) / 2 + overhead_s


def report(results: Path, grpo_steps: int, study_wall: float | None) -> list[str]:
    def key(row: dict[str, Any]) -> tuple[str, str, str]:
        return row["metric"], row["run"], row["baseline"]

    values = truncated_values(results, grpo_steps)
    full = {key(r): r["clear"] for r in ablation_rows(read_seed_values(results / "summary.tsv"))}
    rows = ablation_rows(values)
    out = [f"## GRPO runs stopped after {grpo_steps} GRPO steps"]
    for run, metrics in values.items():
        if run.split("/")[0] in TRUNCATED:
            s = mean_std_ci95(metrics["eval_accuracy"])
            half = "" if s["ci95"] is None else f" ± {100 * s['ci95']:.1f}"
            out.append(f"{run:<78} accuracy {100 * s['mean']:5.1f}{half}")
    flips = [r for r in rows if full.get(key(r), r["clear"]) != r["clear"]]
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
    parser.add_argument("--results", type=Path, default=Path("results/default"))
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
