"""Print the README's two results tables from a study's ``summary.tsv`` and ``ablations.tsv``.

    python benchmarks/readme_tables.py --results results [--compare OLD_ABLATIONS_TSV]

The first table: one row per run, the mean accuracy over seeds +- the 95% half-width, each
seed's accuracy, format reward and the mean wall seconds. The second: each ablation's accuracy
difference against its baseline (not against zero-shot), its 95% interval and whether it is
clear of 0. Then the job time per family from the rules' benchmark files
(``results/benchmarks/``). ``--compare`` prints the (metric, run, baseline) comparisons whose verdict differs
between that older ``ablations.tsv`` and this one. ``tests/benchmarks/test_readme_tables.py``
checks that every row it prints for the committed ``results/`` is in README.md.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def pct(value: str, digits: int = 1) -> str:
    return f"{100 * float(value):.{digits}f}"


def signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def runs_table(summary: list[dict[str, str]]) -> list[str]:
    """``| run | accuracy % | per seed | format % | wall s |`` rows, in summary.tsv's order."""
    lines = ["| run | accuracy % | per seed | format % | wall s |", "|---|---:|---|---:|---:|"]
    seeds: dict[str, list[str]] = {}
    for row in summary:
        if row["seed"] not in ("", "mean"):
            seeds.setdefault(row["run"], []).append(pct(row["eval_accuracy"]))
    for row in summary:
        if row["run"] == "base" or row["seed"] not in ("", "mean"):
            continue
        acc, fmt = pct(row["eval_accuracy"]), pct(row["eval_format_reward"])
        if row["seed"] == "mean" and row["eval_accuracy_ci95"]:
            acc += f" ± {pct(row['eval_accuracy_ci95'])}"
            fmt += f" ± {pct(row['eval_format_reward_ci95'])}"
        per_seed = " / ".join(seeds.get(row["run"], [])) or "(one evaluation)"
        wall = f"{float(row['wall_seconds']):.0f}"
        lines.append(f"| `{row['run']}` | {acc} | {per_seed} | {fmt} | {wall} |")
    return lines


def ablations_table(ablations: list[dict[str, str]]) -> list[str]:
    """Accuracy differences against each run's own baseline (zero-shot comparisons left out)."""
    lines = [
        "| run | against | difference, points | 95% interval | clear |",
        "|---|---|---:|---|---|",
    ]
    for row in ablations:
        if row["metric"] != "eval_accuracy" or row["baseline"] == "zero_shot":
            continue
        low, high = float(row["diff_low"]), float(row["diff_high"])
        clear = "yes" if row["clear"] == "true" else "no"
        lines.append(
            f"| `{row['run']}` | `{row['baseline']}` | {signed(float(row['diff']))} | "
            f"{signed(low)} to {signed(high)} | {clear} |"
        )
    return lines


FAMILY_ORDER = ("base", "zero_shot", "sft", "ei", "grpo", "leaderboard")


def job_benchmarks(benchmarks: Path) -> list[tuple[str, Path, float]]:
    """``(family, job, seconds)`` of every rule's benchmark file under ``benchmarks``: the
    family is the first folder (``base.tsv``: the base model), the job the file's path without
    ``.tsv`` relative to ``benchmarks`` (``grpo/default/seed~0``: the run's folder under the
    results), the seconds its column ``s``."""
    jobs = []
    for path in sorted(benchmarks.rglob("*.tsv")):
        rel = path.relative_to(benchmarks)
        family = rel.parts[0] if len(rel.parts) > 1 else path.stem
        [row] = read_tsv(path)[-1:]
        jobs.append((family, rel.with_suffix(""), float(row["s"])))
    return jobs


def family_times(benchmarks: Path) -> list[str]:
    """Jobs and summed seconds per family (:func:`job_benchmarks`), then the total."""
    totals: dict[str, list[float]] = {}
    for family, _, seconds in job_benchmarks(benchmarks):
        totals.setdefault(family, []).append(seconds)
    order = [f for f in FAMILY_ORDER if f in totals] + sorted(set(totals) - set(FAMILY_ORDER))
    lines = []
    for family in order:
        jobs, seconds = len(totals[family]), sum(totals[family])
        lines.append(f"{family:<14}{jobs:>2} jobs {seconds:>8.0f} s ({seconds / 60:5.1f} min)")
    total = sum(sum(v) for v in totals.values())
    lines.append(f"{'all':<22}{total:.0f} s ({total / 60:5.1f} min) of job time")
    return lines


def flipped(old: list[dict[str, str]], new: list[dict[str, str]]) -> list[str]:
    """Comparisons present in both tables whose ``clear`` verdict differs."""
    key = lambda r: (r["metric"], r["run"], r["baseline"])  # noqa: E731
    before = {key(r): r for r in old}
    out = []
    for row in new:
        was = before.get(key(row))
        if was is not None and was["clear"] != row["clear"]:
            out.append(
                f"{row['metric']} {row['run']} vs {row['baseline']}: "
                f"{signed(float(was['diff']))} ({was['clear']}) -> "
                f"{signed(float(row['diff']))} ({row['clear']})"
            )
    common = len(set(map(key, old)) & set(map(key, new)))
    return [f"{len(out)} of {common} verdicts flipped", *out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--compare", type=Path, help="an older ablations.tsv")
    args = parser.parse_args(argv)
    summary = read_tsv(args.results / "summary.tsv")
    ablations = read_tsv(args.results / "ablations.tsv")
    print("\n".join(runs_table(summary)))
    print()
    print("\n".join(ablations_table(ablations)))
    print()
    print("\n".join(family_times(args.results / "benchmarks")))
    if args.compare:
        print()
        print("\n".join(flipped(read_tsv(args.compare), ablations)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
