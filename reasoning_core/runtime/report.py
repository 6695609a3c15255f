"""Figures and the summary table of a study, rebuilt from run folders alone.

``rrl plot`` draws PNG figures from the runs' ``metrics.jsonl`` files (matplotlib, Agg):

- ``--kind curves`` (default): one panel per ``--metric`` (``split/key``, e.g. ``eval/accuracy``
  or ``train/entropy``) against ``--x`` (``step`` or ``time/elapsed``), one line per run,
  labelled by the settings named in ``--label-keys`` (read from each run's ``config.yaml``)
  or by ``--labels``.
- ``--kind final``: grouped bars of the last logged value of each metric per run (e.g. the
  final evaluation accuracy of each method beside zero-shot).

``rrl summary`` writes ``summary.tsv`` (``../shared/SPEC.md`` section 3): one row per run with
``experiment`` (the first folder under the results folder), ``run`` (the run's folder under the
results folder), one column per setting that some run's folder name varies (``key~value``
parts, as the workflow's Paramspace tables write them; each cell holds that run's resolved
value from its ``config.yaml``), then ``eval_accuracy``, ``eval_format_reward``,
``eval_examples`` and ``wall_seconds`` (from ``done.json``, falling back to the last eval line
of ``metrics.jsonl``), then, when some run's ``done.json`` has them (SFT runs do), the SFT data
counts ``pool_examples`` (examples read), ``kept_examples`` (those ``filter_correct`` kept: the
``filtered_examples`` of ``done.json``; empty for unfiltered runs) and ``train_examples``
(trained on, after ``max_examples``). It reads only the run folders, so it can be rebuilt at
any time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from reasoning_core.runtime import metrics as run_metrics

SUMMARY_METRICS = ("eval_accuracy", "eval_format_reward", "eval_examples", "wall_seconds")
# Optional columns: summary.tsv name -> done.json key; a column appears when any run has it.
SUMMARY_COUNTS = {
    "pool_examples": "pool_examples",
    "kept_examples": "filtered_examples",
    "train_examples": "train_examples",
}
X_LABELS = {"step": "optimizer step", "time/elapsed": "wall-clock time (s)"}


# ---- reading run folders -------------------------------------------------------------------


def read_metrics(run: str | Path, *, warn: bool = True) -> list[dict[str, Any]]:
    """The records of ``run/metrics.jsonl`` ([] when it is absent). A killed run's partial last
    line is left out silently; any other damaged line is skipped, with a warning on stderr
    naming the file and line unless ``warn`` is off (see
    :func:`reasoning_core.runtime.metrics.read_metrics`)."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        return []
    return run_metrics.read_metrics(path, damaged="warn" if warn else "skip")


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping ({} when the file is absent); ValueError naming the file if unreadable."""
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        from reasoning_core.runtime.config import yaml_problem

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
        if not _is_number(xv) or not _is_number(yv):
            continue
        xs.append(float(xv))
        ys.append(float(yv))
    return xs, ys


def _is_number(value: Any) -> bool:
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


def run_labels(runs: Sequence[str | Path], keys: Sequence[str]) -> list[str]:
    """Label each run by ``key=value`` for those of ``keys`` whose resolved values (from the
    runs' ``config.yaml``) differ between the runs; a run folder named ``default`` (the
    method's default settings) says so. Runs that still share a label get their folder name."""
    configs = [read_yaml(Path(r) / "config.yaml") for r in runs]
    values = {k: [format_value(c[k]) if k in c else "-" for c in configs] for k in keys}
    varied = [k for k in keys if len(runs) == 1 or len(set(values[k])) > 1]
    labels = []
    for i, run in enumerate(runs):
        parts = [f"{k}={values[k][i]}" for k in varied]
        label = ", ".join(parts) if parts else Path(run).name
        if Path(run).name == "default" and parts:
            label += " (default)"
        labels.append(label)
    if len(set(labels)) < len(labels):
        labels = [f"{lab} [{n}]" for lab, n in zip(labels, short_names(runs), strict=True)]
    return labels


def short_names(runs: Sequence[str | Path]) -> list[str]:
    """Run folders relative to their common parent (``results/sft/default`` -> ``sft/default``)."""
    paths = [Path(r).resolve() for r in runs]
    if len(paths) == 1:
        return [paths[0].name]
    common = Path(os.path.commonpath(paths))
    return [p.relative_to(common).as_posix() or p.name for p in paths]


# ---- figures -------------------------------------------------------------------------------


def _save(fig, out: str | Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    tmp.replace(out)


def _labels_and_records(
    runs: Sequence[str | Path], labels: Sequence[str] | None
) -> tuple[list[str], list[list[dict[str, Any]]]]:
    """One label per run (default: :func:`short_names`) and each run's metrics records."""
    labels = list(labels) if labels else short_names(runs)
    if len(labels) != len(runs):
        raise ValueError(f"{len(labels)} labels for {len(runs)} runs")
    return labels, [read_metrics(r) for r in runs]


def plot_curves(
    runs: Sequence[str | Path],
    metrics: Sequence[str],
    out: str | Path,
    *,
    labels: Sequence[str] | None = None,
    x: str = "step",
    smooth: int = 1,
    title: str = "",
) -> int:
    """One panel per metric, one line per run; returns the number of lines drawn.

    Train-split panels are smoothed with a trailing ``smooth``-point mean (raw points faint
    behind); eval panels are drawn as logged, with markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, records = _labels_and_records(runs, labels)
    ncols = len(metrics) if len(metrics) <= 3 else 2
    nrows = math.ceil(len(metrics) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False)
    axes = grid.reshape(-1)
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    for ax, metric in zip(axes, metrics, strict=False):
        split = metric.partition("/")[0]
        any_line = False
        for i, (recs, label) in enumerate(zip(records, labels, strict=True)):
            xs, ys = series(recs, metric, x)
            if not xs:
                continue
            color = colors[i % len(colors)]
            if split == "train" and smooth > 1:
                ax.plot(xs, ys, color=color, alpha=0.2, linewidth=0.8)
                ax.plot(xs, moving_average(ys, smooth), color=color, label=label)
            else:
                ax.plot(xs, ys, color=color, marker="o", markersize=3, label=label)
            any_line = True
            drawn += 1
        ax.set_xlabel(X_LABELS.get(x, x))
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if not any_line:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels(), strict=True):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        ncol = 1 if max(len(n) for n in names) > 45 else min(len(names), 3)
        fig.legend(
            handles,
            names,
            loc="upper center",
            ncol=ncol,
            fontsize="small",
            bbox_to_anchor=(0.5, 0.0),
        )
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return drawn


def last_value(records: list[dict[str, Any]], metric: str) -> float | None:
    _, ys = series(records, metric, "step")
    return ys[-1] if ys else None


def plot_final(
    runs: Sequence[str | Path],
    metrics: Sequence[str],
    out: str | Path,
    *,
    labels: Sequence[str] | None = None,
    title: str = "",
) -> int:
    """Grouped bars: the last logged value of each metric per run; returns bars drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, records = _labels_and_records(runs, labels)
    width = 0.8 / len(metrics)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(runs) + 1.5), 3.8))
    drawn = 0
    for j, metric in enumerate(metrics):
        values = [last_value(recs, metric) for recs in records]
        xs = [i + (j - (len(metrics) - 1) / 2) * width for i in range(len(runs))]
        heights = [v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width=width, label=metric)
        for bar, v in zip(bars, values, strict=True):
            text = "n/a" if v is None else f"{v:.2f}"
            ax.annotate(
                text,
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize="x-small",
            )
        drawn += sum(v is not None for v in values)
    ax.set_xticks(range(len(runs)), labels, rotation=20, ha="right")
    ax.set_ylabel("final value")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return drawn


def main_plot(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl plot", description="Plot curves (or final values) from runs' metrics.jsonl."
    )
    parser.add_argument("--runs", nargs="+", required=True, help="run folders")
    parser.add_argument("--metric", nargs="+", default=["eval/accuracy"], help="split/key panels")
    parser.add_argument("--kind", choices=["curves", "final"], default="curves")
    parser.add_argument("--x", default="step", help="x axis: step or time/elapsed")
    parser.add_argument("--labels", nargs="+", help="one label per run")
    parser.add_argument("--label-keys", nargs="+", help="label runs by these config settings")
    parser.add_argument("--smooth", type=int, default=1, help="trailing mean window (train)")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", required=True, help="PNG file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    missing = [r for r in args.runs if not (Path(r) / "metrics.jsonl").is_file()]
    if missing:
        print(f"rrl plot: no metrics.jsonl in {missing}", file=sys.stderr)
        return 2
    for run in args.runs:
        if not read_metrics(run, warn=False):
            _warn(f"{Path(run) / 'metrics.jsonl'} holds no records")
    try:
        labels = args.labels
        if labels is None and args.label_keys:
            labels = run_labels(args.runs, args.label_keys)
        if args.kind == "final":
            drawn = plot_final(args.runs, args.metric, args.out, labels=labels, title=args.title)
        else:
            drawn = plot_curves(
                args.runs,
                args.metric,
                args.out,
                labels=labels,
                x=args.x,
                smooth=args.smooth,
                title=args.title,
            )
    except ValueError as exc:
        print(f"rrl plot: {exc}", file=sys.stderr)
        return 2
    if drawn == 0:
        print(f"rrl plot: none of {args.metric} is logged in these runs", file=sys.stderr)
        return 1
    print(f"rrl plot: wrote {args.out} ({drawn} series)")
    return 0


# ---- summary table -------------------------------------------------------------------------


def find_runs(results: str | Path) -> list[Path]:
    """Run folders under ``results``: folders holding a ``done.json`` (sorted)."""
    return sorted(p.parent for p in Path(results).rglob("done.json"))


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


def main(argv: list[str] | None = None) -> int:
    """``python -m reasoning_core.runtime.report plot|summary ...``"""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in {"plot", "summary"}:
        return (main_plot if argv[0] == "plot" else main_summary)(argv[1:])
    print("usage: rrl plot ... | rrl summary ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
