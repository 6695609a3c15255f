"""``rrl summary``: ``summary.tsv``, rows per seed and per run across seeds (see the package
docstring), from the committed files of the run folders alone."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.report.runs import (
    find_runs,
    folder_finals,
    read_yaml,
    sampled_responses,
    seed_runs,
)
from reasoning_core.runtime.report.seeds import SEED_METRICS, mean_std_ci95

SUMMARY_METRICS = ("eval_accuracy", "eval_format_reward", "eval_examples", "wall_seconds")
# Optional columns: summary.tsv name -> key of the run's `done` metrics line; a column appears
# when any run has it (SFT runs do): examples read, kept by filter_correct (empty when
# unfiltered), trained on.
SUMMARY_COUNTS = {
    "pool_examples": "pool_examples",
    "kept_examples": "filtered_examples",
    "train_examples": "train_examples",
}
# Every row's count of the responses its run sampled to train on (runs.sampled_responses:
# EI's and GRPO's rollouts, DPO's pair sampling, 0 for SFT and zero-shot), so that methods are
# compared at the sampling budget they spent.
SAMPLED = "sampled_responses"
# Columns of the runs across seeds (present when any run has seed~<N> folders): the spread of
# the final values on the row whose `seed` is MEAN_ROW, and how many seeds it spans.
SPREAD_COLUMNS = tuple(f"{m}_{stat}" for m in SEED_METRICS for stat in ("std", "ci95"))
MEAN_ROW = "mean"
# Rows come in this order of experiments (then any other, by name); within one, the default
# run first, then by folder name; a run's seeds in order, then its mean row.
EXPERIMENT_ORDER = ("base", "zero_shot", "sft", "ei", "grpo", "leaderboard", "dpo")


def varied_settings(relative: str) -> dict[str, str]:
    """``grpo/lr~3e-05/loss_type~x`` -> ``{"lr": "3e-05", "loss_type": "x"}``."""
    out = {}
    for part in relative.split("/"):
        if "~" in part:
            key, _, value = part.partition("~")
            out[key] = value
    return out


def run_order(relative: str) -> tuple:
    """Sort key of a run (its folder under the results folder) in ``summary.tsv``."""
    experiment, _, rest = relative.partition("/")
    rank = EXPERIMENT_ORDER.index(experiment) if experiment in EXPERIMENT_ORDER else 99
    return (rank, experiment, rest != "default", rest)


def _row_values(folder: Path) -> dict[str, Any]:
    final = folder_finals(folder)
    values = {name: final.get(name) for name in SUMMARY_METRICS}
    values.update({name: final.get(key) for name, key in SUMMARY_COUNTS.items()})
    values[SAMPLED] = sampled_responses(folder)
    return values


def _mean_row(seed_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of a run across seeds: the mean of every numeric column over the seeds that
    have it, the std and 95% half-width of the final accuracy and format reward."""
    row: dict[str, Any] = {"seed": MEAN_ROW, "n_seeds": len(seed_rows)}
    for name in (*SUMMARY_METRICS, *SUMMARY_COUNTS, SAMPLED):
        stats = mean_std_ci95([r[name] for r in seed_rows if r[name] is not None])
        row[name] = stats["mean"]
        if name in SEED_METRICS:
            row[f"{name}_std"], row[f"{name}_ci95"] = stats["std"], stats["ci95"]
    return row


def summary_rows(
    runs: Sequence[str | Path], results: str | Path, seeds: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """The rows of ``summary.tsv`` for ``runs`` (folders under ``results``), in the order of
    :func:`run_order`: a single run (no ``seed~<N>`` folders) gives one row; a run across
    seeds one row per seed (only ``seeds`` when given), then its mean row (see the package
    docstring)."""
    results = Path(results).resolve()
    entries = []
    for run in runs:
        run = Path(run).resolve()
        try:
            relative = run.relative_to(results).as_posix()
        except ValueError as exc:
            raise ValueError(f"run {run} is not under the results folder {results}") from exc
        entries.append((relative, run))
    entries.sort(key=lambda entry: run_order(entry[0]))
    rows, keys, seeded = [], [], False
    for relative, run in entries:
        varied = varied_settings(relative)
        keys += [k for k in varied if k not in keys]
        base = {"experiment": relative.split("/")[0], "run": relative}
        folders = seed_runs(run, seeds)
        if not folders:
            if not (run / "metrics.jsonl").is_file():
                raise ValueError(f"{run}: neither a metrics.jsonl nor seed~<N> folders")
            config = read_yaml(run / "config.yaml")
            rows.append({**base, "_varied": varied, "_config": config, **_row_values(run)})
            continue
        seeded = True
        seed_rows = []
        for seed, folder in folders:
            config = read_yaml(folder / "config.yaml")
            values = _row_values(folder)
            rows.append({**base, "seed": seed, "_varied": varied, "_config": config, **values})
            seed_rows.append(values)
        config = read_yaml(folders[0][1] / "config.yaml")
        rows.append({**base, "_varied": varied, "_config": config, **_mean_row(seed_rows)})
    for row in rows:  # each varied setting: the resolved value, else the folder name's
        varied, config = row.pop("_varied"), row.pop("_config")
        row.update({key: config[key] if key in config else varied.get(key) for key in keys})
    counts = [name for name in SUMMARY_COUNTS if any(row[name] is not None for row in rows)]
    spread = ["n_seeds", *SPREAD_COLUMNS] if seeded else []
    columns = [
        "experiment",
        "run",
        *(["seed"] if seeded else []),
        *keys,
        *SUMMARY_METRICS,
        SAMPLED,
        *counts,
        *spread,
    ]
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


def write_summary(
    rows: list[dict[str, Any]], out: str | Path, columns: Sequence[str] | None = None
) -> Path:
    """Write rows as a tab-separated table (atomically); ``columns`` default to the first
    row's keys."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if columns is None:
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
    parser.add_argument(
        "--runs",
        nargs="*",
        help="run folders (default: every folder under --results holding a metrics.jsonl, "
        "a seed~N folder standing for its run)",
    )
    parser.add_argument("--results", help="results folder (default: the folder of --out)")
    parser.add_argument("--out", required=True, help="TSV file, e.g. results/default/summary.tsv")
    parser.add_argument("--seeds", nargs="+", type=int, help="only these seeds (default: all)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = Path(args.results) if args.results else Path(args.out).parent
    if not args.runs and not results.is_dir():
        raise ConfigError(f"--results {results}: no such folder (nothing to summarize)")
    runs = [Path(r) for r in args.runs] if args.runs else find_runs(results)
    if not runs:  # an empty table would pass for a study that ran nothing
        raise ConfigError(
            f"--results {results}: no run folders in it (none holds a metrics.jsonl); give "
            "the results folder of a study, or --runs"
        )
    try:
        rows = summary_rows(runs, results, args.seeds)
    except ValueError as exc:
        print(f"rrl summary: {exc}", file=sys.stderr)
        return 2
    try:
        write_summary(rows, args.out)
    except OSError as exc:
        raise ConfigError(
            f"--out {args.out}: cannot write there ({exc.strerror or exc}); choose a file in a "
            "folder you can write to"
        ) from None
    print(f"rrl summary: wrote {args.out} ({len(rows)} rows, {len(runs)} runs)")
    return 0
