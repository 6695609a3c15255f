"""Write the results tables of README.md and docs/results.md from a study's ``results/``.

    python tools/readme_tables.py --write          # rewrite the blocks in both documents
    python tools/readme_tables.py [--results results] [--compare OLD_ABLATIONS_TSV]

Each document holds blocks between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``;
``--write`` replaces every block's body with what :data:`BLOCKS` gives for ``results/``,
leaving the prose around them as it is. Without ``--write`` the tables are printed.

The blocks: ``runs``, one row per run (the mean accuracy over seeds +- the 95% half-width,
each seed's accuracy, format reward, the responses it sampled to train on, mean wall
seconds); ``ablations`` and ``format``, each
ablation's accuracy (format-reward) difference against its baseline with its 95% interval and
whether it is clear of 0; ``zero_shot``, every run against zero-shot; ``verdicts``, the same
comparisons as sentences grouped by verdict; ``jobs``, the job time per family from the rules'
benchmark files (``results/default/job_times/``). ``--compare`` prints the (metric, run, baseline)
comparisons whose verdict differs between that older ``ablations.tsv`` and this one.
``tests/tools/test_readme_tables.py`` fails when a committed document differs from what
``--write`` would make of the committed ``results/``.
"""

from __future__ import annotations

import argparse
import csv
import re
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
    """``| run | accuracy % | per seed | format % | sampled | wall s |`` rows, in summary.tsv's
    order (``sampled``: the responses a seed sampled to train on, summary.tsv's
    ``sampled_responses``)."""
    lines = [
        "| run | accuracy % | per seed | format % | sampled | wall s |",
        "|---|---:|---|---:|---:|---:|",
    ]
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
        sampled = f"{float(row['sampled_responses']):,.0f}"
        lines.append(f"| `{row['run']}` | {acc} | {per_seed} | {fmt} | {sampled} | {wall} |")
    return lines


def ablations_table(
    ablations: list[dict[str, str]], metric: str = "eval_accuracy", zero_shot: bool = False
) -> list[str]:
    """``metric``'s differences against each run's own baseline (zero-shot comparisons left
    out), or with ``zero_shot`` only those against zero-shot."""
    lines = [
        "| run | against | difference, points | 95% interval | clear |",
        "|---|---|---:|---|---|",
    ]
    for row in ablations:
        if row["metric"] != metric or (row["baseline"] == "zero_shot") != zero_shot:
            continue
        low, high = float(row["diff_low"]), float(row["diff_high"])
        clear = "yes" if row["clear"] == "true" else "no"
        lines.append(
            f"| `{row['run']}` | `{row['baseline']}` | {signed(float(row['diff']))} | "
            f"{signed(low)} to {signed(high)} | {clear} |"
        )
    return lines


def verdicts(ablations: list[dict[str, str]]) -> list[str]:
    """The accuracy comparisons against a baseline other than zero-shot as bullet lines,
    those whose interval excludes 0 first, then those within their band."""
    groups: dict[bool, list[str]] = {True: [], False: []}
    for row in ablations:
        if row["metric"] != "eval_accuracy" or row["baseline"] == "zero_shot":
            continue
        low, high = float(row["diff_low"]), float(row["diff_high"])
        groups[row["clear"] == "true"].append(
            f"`{row['run']}` against `{row['baseline']}`: {signed(float(row['diff']))} points "
            f"({signed(low)} to {signed(high)})"
        )
    lines = ["Differences larger than their band (the 95% interval excludes 0):", ""]
    lines += [f"- {item}" for item in groups[True]] or ["- none"]
    lines += ["", "Differences within their band (these seeds cannot tell them from 0):", ""]
    lines += [f"- {item}" for item in groups[False]] or ["- none"]
    return lines


FAMILY_ORDER = ("base", "zero_shot", "sft", "ei", "grpo", "leaderboard", "dpo_pairs", "dpo")


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


def blocks(results: Path) -> dict[str, list[str]]:
    """Every block's lines for the study in ``results``."""
    summary = read_tsv(results / "summary.tsv")
    ablations = read_tsv(results / "ablations.tsv")
    return {
        "runs": runs_table(summary),
        "ablations": ablations_table(ablations),
        "format": ablations_table(ablations, metric="eval_format_reward"),
        "zero_shot": ablations_table(ablations, zero_shot=True),
        "verdicts": verdicts(ablations),
        "jobs": ["```", *family_times(results / "job_times"), "```"],
    }


DOCUMENTS = ("README.md", "docs/results.md")
BLOCK = re.compile(r"(<!-- results:(\w+) -->\n)(.*?)(<!-- /results:\2 -->)", re.DOTALL)


def render(text: str, tables: dict[str, list[str]], where: str = "document") -> str:
    """``text`` with the body of every ``results:NAME`` block replaced by ``tables[NAME]``."""

    def body(match: re.Match) -> str:
        name = match.group(2)
        if name not in tables:
            raise SystemExit(f"{where}: unknown results block {name!r} (known: {sorted(tables)})")
        return match.group(1) + "\n".join(tables[name]) + "\n" + match.group(4)

    return BLOCK.sub(body, text)


def write(root: Path, results: Path) -> list[Path]:
    """Rewrite the blocks of :data:`DOCUMENTS` under ``root``; returns the files changed."""
    tables = blocks(results)
    changed = []
    for name in DOCUMENTS:
        path = root / name
        old = path.read_text(encoding="utf-8")
        new = render(old, tables, where=str(path))
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/default"))
    parser.add_argument("--compare", type=Path, help="an older ablations.tsv")
    parser.add_argument(
        "--write", action="store_true", help="rewrite the results blocks of README.md and docs/"
    )
    args = parser.parse_args(argv)
    if args.write:
        root = Path(__file__).resolve().parent.parent
        for path in write(root, args.results):
            print(f"rewrote {path}")
        return 0
    summary = read_tsv(args.results / "summary.tsv")
    ablations = read_tsv(args.results / "ablations.tsv")
    print("\n".join(runs_table(summary)))
    print()
    print("\n".join(ablations_table(ablations)))
    print()
    print("\n".join(family_times(args.results / "job_times")))
    if args.compare:
        print()
        print("\n".join(flipped(read_tsv(args.compare), ablations)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
