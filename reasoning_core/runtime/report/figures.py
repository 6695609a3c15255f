"""``rrl plot``: PNG figures from the runs' ``metrics.jsonl`` (matplotlib, Agg): curves of
``split/key`` metrics against the step or wall-clock time, or bars of their final values."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.runs import (
    moving_average,
    read_metrics,
    run_labels,
    seed_runs,
    series,
    short_names,
    warn,
)

X_LABELS = {"step": "optimizer step", "time/elapsed": "wall-clock time (s)"}


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
    has_metrics = [(Path(r) / "metrics.jsonl").is_file() or seed_runs(r) for r in args.runs]
    missing = [r for r, found in zip(args.runs, has_metrics, strict=True) if not found]
    if missing:
        print(f"rrl plot: no metrics.jsonl in {missing}", file=sys.stderr)
        return 2
    for run in args.runs:
        if not read_metrics(run, warn=False):
            warn(f"{Path(run) / 'metrics.jsonl'} holds no records")
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
