"""``rrl summary``: ``summary.tsv``, one row per run folder (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.runs import find_runs, read_json, read_metrics, read_yaml

SUMMARY_METRICS = ("eval_accuracy", "eval_format_reward", "eval_examples", "wall_seconds")
# Optional columns: summary.tsv name -> done.json key; a column appears when any run has it
# (SFT runs do): examples read, kept by filter_correct (empty when unfiltered), trained on.
SUMMARY_COUNTS = {
    "pool_examples": "pool_examples",
    "kept_examples": "filtered_examples",
    "train_examples": "train_examples",
}


def varied_settings(relative: str) -> dict[str, str]:
    """``grpo/lr~3e-05/loss_type~x`` -> ``{"lr": "3e-05", "loss_type": "x"}``."""
    out = {}
    for part in relative.split("/"):
        if "~" in part:
            key, _, value = part.partition("~")
            out[key] = value
    return out


def summary_rows(runs: Sequence[str | Path], results: str | Path) -> list[dict[str, Any]]:
    """One dict per run with the columns of ``summary.tsv`` (see the module docstring)."""
    results = Path(results).resolve()
    rows, keys = [], []
    for run in runs:
        run = Path(run).resolve()
        try:
            relative = run.relative_to(results).as_posix()
        except ValueError as exc:
            raise ValueError(f"run {run} is not under the results folder {results}") from exc
        varied = varied_settings(relative)
        keys += [k for k in varied if k not in keys]
        done = read_json(run / "done.json")
        config = read_yaml(run / "config.yaml")
        records = read_metrics(run)
        evals = [r for r in records if r.get("split") == "eval"]
        last_eval = evals[-1] if evals else {}
        row: dict[str, Any] = {
            "experiment": relative.split("/")[0],
            "run": relative,
            "_varied": varied,
            "_config": config,
        }
        fallback = {
            "eval_accuracy": last_eval.get("accuracy"),
            "eval_format_reward": last_eval.get("format_reward"),
            "eval_examples": last_eval.get("num_examples"),
            "wall_seconds": (records[-1].get("time/elapsed") if records else None),
        }
        for name in SUMMARY_METRICS:
            value = done.get(name)
            row[name] = value if value is not None else fallback[name]
        for name, key in SUMMARY_COUNTS.items():
            row[name] = done.get(key)
        rows.append(row)
    for row in rows:
        varied, config = row.pop("_varied"), row.pop("_config")
        for key in keys:
            if key in config:
                row[key] = config[key]
            else:
                row[key] = varied.get(key)
    counts = [name for name in SUMMARY_COUNTS if any(row[name] is not None for row in rows)]
    columns = ["experiment", "run", *keys, *SUMMARY_METRICS, *counts]
    return [{c: row.get(c) for c in columns} for row in rows]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value).replace("\t", " ").replace("\n", " ")


def write_summary(rows: list[dict[str, Any]], out: str | Path) -> Path:
    """Write rows as a tab-separated table (atomically)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0]) if rows else ["experiment", "run", *SUMMARY_METRICS]
    lines = ["\t".join(columns)]
    lines += ["\t".join(_cell(row.get(c)) for c in columns) for row in rows]
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)
    return out


def main_summary(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl summary", description="Aggregate run folders into summary.tsv."
    )
    parser.add_argument("--runs", nargs="*", help="run folders (default: every done.json)")
    parser.add_argument("--results", help="results folder (default: the folder of --out)")
    parser.add_argument("--out", required=True, help="TSV file, e.g. results/summary.tsv")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = Path(args.results) if args.results else Path(args.out).parent
    runs = [Path(r) for r in args.runs] if args.runs else find_runs(results)
    try:
        rows = summary_rows(runs, results)
    except ValueError as exc:
        print(f"rrl summary: {exc}", file=sys.stderr)
        return 2
    write_summary(rows, args.out)
    print(f"rrl summary: wrote {args.out} ({len(rows)} runs)")
    return 0
