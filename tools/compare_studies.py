"""Two runs of the same study (another float path, another machine): do their conclusions agree?

Reads ``summary.tsv`` and ``ablations.tsv`` of two results folders and prints, for every run
both have, the mean accuracy of each with its 95% half-width and whether the means lie within
the larger of the two half-widths; then every ablation verdict (``clear``, with the sign of the
difference) that differs between them. A verdict flips when one study calls a difference clear
and the other does not, or both call it clear with opposite signs.

    PYTHONPATH=$PWD .venv/bin/python tools/compare_studies.py \\
        --a results --b /path/to/other/results [--runs grpo ei]

``--runs`` keeps the runs whose folder starts with one of the given experiment names (and the
verdicts among them and against zero-shot), for a rerun of some families only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

METRIC = "eval_accuracy"


def read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def run_means(results: Path) -> dict[str, tuple[float, float]]:
    """{run: (mean accuracy, 95% half-width)} from the ``mean`` rows of summary.tsv."""
    out = {}
    for row in read_tsv(results / "summary.tsv"):
        if row.get("seed") == "mean" and row.get(METRIC):
            out[row["run"]] = (float(row[METRIC]), float(row[f"{METRIC}_ci95"] or 0.0))
    return out


def verdicts(results: Path) -> dict[tuple[str, str, str], tuple[bool, float]]:
    """{(metric, run, baseline): (clear, diff)} from ablations.tsv."""
    return {
        (r["metric"], r["run"], r["baseline"]): (r["clear"] == "true", float(r["diff"]))
        for r in read_tsv(results / "ablations.tsv")
    }


def kept(run: str, prefixes: list[str] | None) -> bool:
    return prefixes is None or run == "zero_shot" or run.split("/")[0] in prefixes


def compare(a: Path, b: Path, prefixes: list[str] | None = None) -> dict[str, Any]:
    ma, mb = run_means(a), run_means(b)
    runs = [r for r in ma if r in mb and kept(r, prefixes)]
    bands = []
    for run in runs:
        (x, hx), (y, hy) = ma[run], mb[run]
        bands.append(
            {"run": run, "a": x, "b": y, "half": max(hx, hy), "within": abs(x - y) <= max(hx, hy)}
        )
    va, vb = verdicts(a), verdicts(b)
    keys = [k for k in va if k in vb and kept(k[1], prefixes) and kept(k[2], prefixes)]
    flips = []
    for key in keys:
        (ca, da), (cb, db) = va[key], vb[key]
        if ca != cb or (ca and cb and (da > 0) != (db > 0)):
            flips.append({"key": key, "a": (ca, da), "b": (cb, db)})
    return {"bands": bands, "verdicts": len(keys), "flips": flips}


def report(result: dict[str, Any]) -> list[str]:
    lines = [f"{'run':<76} {'a %':>6} {'b %':>6} {'diff':>6} {'band':>5} within"]
    for row in result["bands"]:
        lines.append(
            f"{row['run']:<76} {100 * row['a']:6.1f} {100 * row['b']:6.1f} "
            f"{100 * (row['b'] - row['a']):+6.1f} {100 * row['half']:5.1f} "
            f"{'yes' if row['within'] else 'NO'}"
        )
    outside = [r for r in result["bands"] if not r["within"]]
    lines.append(
        f"run means outside the larger of the two 95% half-widths: {len(outside)} of "
        f"{len(result['bands'])}"
    )
    lines.append(f"verdicts that differ: {len(result['flips'])} of {result['verdicts']}")
    for flip in result["flips"]:
        metric, run, baseline = flip["key"]
        (ca, da), (cb, db) = flip["a"], flip["b"]
        lines.append(
            f"  {metric} {run} against {baseline}: a {100 * da:+.1f} ({'clear' if ca else 'not clear'})"
            f", b {100 * db:+.1f} ({'clear' if cb else 'not clear'})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="results folder (reference)")
    parser.add_argument("--b", type=Path, required=True, help="results folder (rerun)")
    parser.add_argument("--runs", nargs="*", help="experiment names to keep (default: all)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print("\n".join(report(compare(args.a, args.b, args.runs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
