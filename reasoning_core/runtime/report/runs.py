"""Reading run folders for figures and tables: metrics and config.yaml (the committed files;
``done.json`` is not committed and not read), the seed folders of a run across seeds, the
series of one metric, and the labels that tell runs apart."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from reasoning_core.runtime.run import metrics as run_metrics
from reasoning_core.runtime.settings.config import yaml_problem


def read_metrics(run: str | Path, *, warn: bool = True) -> list[dict[str, Any]]:
    """The records of ``run/metrics.jsonl`` ([] when it is absent). A killed run's partial last
    line is left out silently; any other damaged line is skipped, with a warning on stderr
    naming the file and line unless ``warn`` is off (see
    :func:`reasoning_core.runtime.run.metrics.read_metrics`). A run across seeds keeps its records
    in its seed folders: :func:`read_seeds`."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        return []
    return run_metrics.read_metrics(path, damaged="warn" if warn else "skip")


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping ({} when the file is absent); ValueError naming the file if unreadable."""
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}:{yaml_problem(exc)}") from None
    return data if isinstance(data, dict) else {}


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object ({} when the file is absent); ValueError naming the file if unreadable."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def series(
    records: list[dict[str, Any]], metric: str, x: str = "step"
) -> tuple[list[float], list[float]]:
    """Points (x, y) of ``metric`` (``split/key``) in logged order; records lacking either
    coordinate, or holding a non-finite value, are left out."""
    split, _, key = metric.partition("/")
    if not key:
        raise ValueError(f"metric {metric!r} must be split/key, e.g. eval/accuracy")
    xs: list[float] = []
    ys: list[float] = []
    for record in records:
        if record.get("split") != split:
            continue
        xv, yv = record.get(x), record.get(key)
        if not is_number(xv) or not is_number(yv):
            continue
        xs.append(float(xv))
        ys.append(float(yv))
    return xs, ys


def is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (shorter at the start)."""
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if value is None:
        return "null"
    return str(value)


def folder_settings(run: str | Path) -> dict[str, str]:
    """The ``key~value`` parts of a run's folder path (``dpo/init~base`` -> ``{"init": "base"}``),
    seed folders left out."""
    parts = [p for p in Path(run).parts if "~" in p and not p.startswith("seed~")]
    return dict(p.split("~", 1) for p in parts)


def run_labels(runs: Sequence[str | Path], keys: Sequence[str]) -> list[str]:
    """Label each run by ``key=value`` for those of ``keys`` whose resolved values (from the
    runs' ``config.yaml``, :func:`config_file`; for a key the configuration lacks, such as a
    setting the workflow reads itself, the run folder's ``key~value``, else ``-``) differ
    between the runs; a run folder named ``default`` (the method's default settings) says so.
    Runs that still share a label get their folder name."""
    configs = [read_yaml(config_file(r)) for r in runs]
    folders = [folder_settings(r) for r in runs]
    pairs = list(zip(configs, folders, strict=True))
    values = {k: [format_value(c[k]) if k in c else f.get(k, "-") for c, f in pairs] for k in keys}
    varied = [k for k in keys if len(runs) == 1 or len(set(values[k])) > 1]
    names = [Path(r).name for r in runs]
    # With the default run among them, each other run names only what it changes from it, and
    # the default names its values only while they are few enough to read.
    base = names.index("default") if "default" in names else None
    labels = []
    for i, name in enumerate(names):
        shown = varied
        if base is not None and i != base:
            shown = [k for k in varied if values[k][i] != values[k][base]] or varied
        parts = [f"{k}={values[k][i]}" for k in shown]
        label = ", ".join(parts) if parts else name
        if i == base and parts:
            label = "default" if len(parts) > 3 else label + " (default)"
        labels.append(label)
    if len(set(labels)) < len(labels):
        labels = [f"{lab} [{n}]" for lab, n in zip(labels, short_names(runs), strict=True)]
    return labels


def short_names(runs: Sequence[str | Path]) -> list[str]:
    """Run folders relative to their common parent (``results/default/sft/default`` -> ``sft/default``)."""
    paths = [Path(r).resolve() for r in runs]
    if len(paths) == 1:
        return [paths[0].name]
    common = Path(os.path.commonpath(paths))
    return [p.relative_to(common).as_posix() or p.name for p in paths]


SEED_FOLDER = re.compile(r"seed~(0|[1-9][0-9]*)")


def seed_runs(run: str | Path, seeds: Sequence[int] | None = None) -> list[tuple[int, Path]]:
    """``(seed, folder)`` of every ``run/seed~<N>`` folder, by seed ([] for a folder that is a
    single run, such as the base model or a run of the layout before seeds; where seed
    folders exist they stand for the run, and a metrics.jsonl beside them is not read).

    ``seeds``: only these (the study's ``seeds`` setting, so that folders of seeds a study no
    longer runs are left out); ValueError naming the folder when one of them is missing."""
    run = Path(run)
    found = sorted(
        (int(match.group(1)), child)
        for child in (run.iterdir() if run.is_dir() else ())
        if child.is_dir() and (match := SEED_FOLDER.fullmatch(child.name))
    )
    if seeds is None:
        return found
    folders = dict(found)
    missing = [seed for seed in seeds if seed not in folders]
    if missing and folders:
        raise ValueError(f"{run}: no folder for seed {missing[0]} (seed~{missing[0]})")
    return [(seed, folders[seed]) for seed in sorted(seeds) if seed in folders]


def folder_finals(folder: str | Path) -> dict[str, Any]:
    """What one trained or evaluated folder ended with, from its ``metrics.jsonl`` alone:
    ``eval_accuracy``, ``eval_format_reward``, ``eval_examples`` (its last ``eval`` line),
    ``wall_seconds`` (the ``time/elapsed`` of the ``done`` line a finished trainer writes last,
    else of the last line), and the other facts of the ``done`` line (``stopped_on_budget``;
    SFT's ``pool_examples``, ``filtered_examples``, ``train_examples``). Absent values: None."""
    records = read_metrics(folder)
    done = next((r for r in reversed(records) if r.get("split") == "done"), {})
    evals = [r for r in records if r.get("split") == "eval"]
    last_eval = evals[-1] if evals else {}
    out = {
        k: v for k, v in done.items() if k not in ("step", "split") and not k.startswith("time/")
    }
    out["eval_accuracy"] = last_eval.get("accuracy")
    out["eval_format_reward"] = last_eval.get("format_reward")
    out["eval_examples"] = last_eval.get("num_examples")
    out["wall_seconds"] = (done or (records[-1] if records else {})).get("time/elapsed")
    return out


def sampled_responses(folder: str | Path) -> int | None:
    """How many responses a run sampled to train on, from its committed files: DPO's count
    (``sampled_responses`` of its ``done`` line); EI's rollouts, ``ei_batch_size`` questions
    times ``group_size`` per iteration (its train lines with ``kept``); GRPO's,
    ``rollout_batch_size`` per rollout batch (its distinct ``grpo_step`` values); 0 for a run
    that samples none (SFT trains on its data; a zero-shot evaluation). None without a
    ``metrics.jsonl``. The evaluations' samples are not counted: every run has the same."""
    folder = Path(folder)
    records = read_metrics(folder)
    if not records:
        return None
    done = next((r for r in reversed(records) if r.get("split") == "done"), {})
    if "sampled_responses" in done:
        return int(done["sampled_responses"])
    train = [r for r in records if r.get("split") == "train"]
    config = read_yaml(folder / "config.yaml")
    iterations = sum(1 for r in train if "kept" in r)
    if iterations:
        return iterations * int(config["ei_batch_size"]) * int(config["group_size"])
    batches = len({r["grpo_step"] for r in train if "grpo_step" in r})
    if batches:
        return batches * int(config["rollout_batch_size"])
    return 0


# Folders that never hold a run's metrics.jsonl: not searched by find_runs.
NOT_RUNS = {
    "checkpoint",
    "state",
    "generations",
    "plots",
    "logs",
    "job_times",
    "benchmarks",
    "sft_data",
}


def find_runs(results: str | Path) -> list[Path]:
    """Run folders under ``results``, found from the committed files: folders holding a
    ``metrics.jsonl``, except that a ``seed~<N>`` folder stands for its parent (the run across
    seeds, listed once). A subfolder holding its own ``summary.tsv`` is another study's
    results folder (``results/smoke``) and is not searched. Sorted by path."""
    results = Path(results)
    found: set[Path] = set()
    for folder, subfolders, files in os.walk(results):
        here = Path(folder)
        subfolders[:] = sorted(
            d for d in subfolders if d not in NOT_RUNS and not (here / d / "summary.tsv").is_file()
        )
        if "metrics.jsonl" in files:
            found.add(here.parent if SEED_FOLDER.fullmatch(here.name) else here)
    return sorted(found)


def seed_folders(run: str | Path) -> list[Path]:
    """The folders holding a run's ``metrics.jsonl``: its ``seed~N`` subfolders that hold one,
    by N; else ``[run]`` when ``run/metrics.jsonl`` exists (one seed); [] when none do. Seed
    folders win, as in the summary (:func:`seed_runs`): a ``metrics.jsonl`` left beside them
    by the layout before seeds (zero-shot's, before it had seeds) is not read."""
    run = Path(run)
    seeds = [folder for _, folder in seed_runs(run) if (folder / "metrics.jsonl").is_file()]
    if seeds:
        return seeds
    return [run] if (run / "metrics.jsonl").is_file() else []


def read_seeds(run: str | Path, *, warn: bool = True) -> list[list[dict[str, Any]]]:
    """The metrics records of each of a run's seeds (:func:`seed_folders`, :func:`read_metrics`)."""
    return [read_metrics(folder, warn=warn) for folder in seed_folders(run)]


def config_file(run: str | Path) -> Path:
    """A run's ``config.yaml``: its first seed's when it has seed folders (the seeds'
    configurations differ only in ``seed``), else its own."""
    run = Path(run)
    folders = seed_folders(run)
    if folders and folders[0] != run:
        return folders[0] / "config.yaml"
    return run / "config.yaml"
