"""``rrl plot``: PNG figures from the runs' ``metrics.jsonl`` (matplotlib, Agg): curves of
``split/key`` metrics against the optimizer step, the GRPO step or wall-clock time, or bars of
their final values. A run with several seeds (``seed~N/`` folders) is drawn as the mean over
its seeds with a 95% t-interval of the mean (:mod:`reasoning_core.runtime.report.bands`)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.bands import (
    BAND_NOTE,
    BAR_NOTE,
    TIME_UNITS,
    Band,
    Interval,
    aggregate,
    mean_interval,
    points,
    seed_count_text,
    smooth_points,
)
from reasoning_core.runtime.report.runs import (
    read_metrics,
    read_seeds,
    run_labels,
    seed_folders,
    series,
    short_names,
    warn,
)

X_LABELS = {
    "step": "optimizer step",
    "grpo_step": "GRPO step (rollout batches)",
    "time/elapsed": "wall-clock time ({unit})",
}


def x_label(x: str, time_unit: str = "s") -> str:
    return X_LABELS.get(x, x).format(unit=time_unit)


def _save(fig, out: str | Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    tmp.replace(out)


def _labels_and_seeds(
    runs: Sequence[str | Path], labels: Sequence[str] | None
) -> tuple[list[str], list[list[list[dict[str, Any]]]]]:
    """One label per run (default: :func:`short_names`) and the metrics records of each of
    each run's seeds (``[run][seed][record]``)."""
    labels = list(labels) if labels else short_names(runs)
    if len(labels) != len(runs):
        raise ValueError(f"{len(labels)} labels for {len(runs)} runs")
    return labels, [read_seeds(r) for r in runs]


def _time_scale(x: str, time_unit: str) -> float:
    if time_unit not in TIME_UNITS:
        raise ValueError(f"time unit {time_unit!r} is not one of {sorted(TIME_UNITS)}")
    return TIME_UNITS[time_unit] if x.startswith("time/") else 1.0


def curve_bands(
    seeds: Sequence[list[dict[str, Any]]],
    metric: str,
    *,
    x: str = "step",
    smooth: int = 1,
    time_unit: str = "s",
) -> tuple[Band, Band]:
    """The curve one run draws in a panel: ``(raw, line)``, both :func:`aggregate` bands of its
    seeds' points of ``metric`` against ``x``. ``line`` is ``raw`` except on train panels with
    ``smooth > 1``, where each seed's y is first replaced by its trailing ``smooth``-point mean
    (so the band spans the seeds' smoothed curves)."""
    scale = _time_scale(x, time_unit)
    per_seed = [points(records, metric, x, x_scale=scale) for records in seeds]
    raw = aggregate(per_seed)
    if metric.partition("/")[0] == "train" and smooth > 1:
        return raw, aggregate([smooth_points(p, smooth) for p in per_seed])
    return raw, raw


def plot_curves(
    runs: Sequence[str | Path],
    metrics: Sequence[str],
    out: str | Path,
    *,
    labels: Sequence[str] | None = None,
    x: str = "step",
    smooth: int = 1,
    title: str = "",
    time_unit: str = "s",
) -> int:
    """One panel per metric logged by some run, one line per run; returns the lines drawn.

    A run with several seeds (``seed~N/`` folders) is drawn as the mean over its seeds with a
    shaded 95% t-interval of the mean (:mod:`reasoning_core.runtime.report.bands`); a run with
    one seed as its own curve. Train-split panels are smoothed with a trailing ``smooth``-point
    mean (raw points faint behind); eval panels are drawn as logged, with markers. A metric no
    run logs gets no panel (a note on stderr), so older runs still plot. ``x``: ``step``,
    ``grpo_step`` (eval lines get it from the train lines) or ``time/elapsed`` (in
    ``time_unit``: s, min or h)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, seeds = _labels_and_seeds(runs, labels)
    curves = {
        metric: [
            curve_bands(run_seeds, metric, x=x, smooth=smooth, time_unit=time_unit)
            for run_seeds in seeds
        ]
        for metric in metrics
    }
    shown = [m for m in metrics if any(line.x for _, line in curves[m])]
    for metric in metrics:
        if metric not in shown:
            warn(f"{metric} is logged in none of the runs: no panel")
    if not shown:
        return 0
    ncols = len(shown) if len(shown) <= 3 else 2 if len(shown) == 4 else 3
    nrows = math.ceil(len(shown) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False)
    axes = grid.reshape(-1)
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(labels) > len(colors):  # more curves than the cycle has colors: no two alike
        colors = [plt.get_cmap("tab20")(i % 20) for i in range(len(labels))]
    drawn = 0
    seed_counts = []
    for ax, metric in zip(axes, shown, strict=False):
        for i, ((raw, line), label) in enumerate(zip(curves[metric], labels, strict=True)):
            if not line.x:
                continue
            color = colors[i % len(colors)]
            if line is not raw:
                ax.plot(raw.x, raw.mean, color=color, alpha=0.2, linewidth=0.8)
                ax.plot(line.x, line.mean, color=color, label=label)
            else:
                ax.plot(line.x, line.mean, color=color, marker="o", markersize=3, label=label)
            if line.seeds > 1:
                ax.fill_between(line.x, line.lo, line.hi, color=color, alpha=0.18, linewidth=0)
            seed_counts.append(line.seeds)
            drawn += 1
        ax.set_xlabel(x_label(x, time_unit))
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    _figure_legend(fig, axes)
    note = BAND_NOTE.format(seeds=seed_count_text(seed_counts)) if max(seed_counts) > 1 else ""
    heading = "\n".join(part for part in (title, note) if part)
    if heading:
        fig.suptitle(heading)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return drawn


def _figure_legend(fig, axes) -> None:
    """One legend for the figure, below the panels: each run's label once."""
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


def last_value(records: list[dict[str, Any]], metric: str) -> float | None:
    _, ys = series(records, metric, "step")
    return ys[-1] if ys else None


def final_values(
    seeds: Sequence[list[dict[str, Any]]], metric: str
) -> tuple[list[float], Interval | None]:
    """The last logged value of ``metric`` in each seed that logged it, and their mean with
    its 95% t-interval (None when no seed logged it): one bar of the final figure."""
    values = [v for v in (last_value(records, metric) for records in seeds) if v is not None]
    return values, mean_interval(values) if values else None


def plot_final(
    runs: Sequence[str | Path],
    metrics: Sequence[str],
    out: str | Path,
    *,
    labels: Sequence[str] | None = None,
    title: str = "",
) -> int:
    """Grouped bars: the last logged value of each metric per run; returns bars drawn.

    A run with several seeds gets the mean over its seeds as the bar, its 95% t-interval as
    the error bar and each seed's value as a dot (:func:`final_values`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, seeds = _labels_and_seeds(runs, labels)
    width = 0.8 / len(metrics)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(runs) + 1.5), 3.8))
    drawn = 0
    seed_counts = []
    for j, metric in enumerate(metrics):
        finals = [final_values(run_seeds, metric) for run_seeds in seeds]
        xs = [i + (j - (len(metrics) - 1) / 2) * width for i in range(len(runs))]
        heights = [stats.mean if stats else 0.0 for _, stats in finals]
        bars = ax.bar(xs, heights, width=width, label=metric)
        color = bars.patches[0].get_facecolor() if bars.patches else None
        for bar, (values, stats) in zip(bars, finals, strict=True):
            center = bar.get_x() + bar.get_width() / 2
            top = bar.get_height()
            if stats is not None:
                seed_counts.append(stats.n)
            if stats is not None and stats.n > 1:
                ax.errorbar(
                    center,
                    stats.mean,
                    yerr=[[stats.mean - stats.lo], [stats.hi - stats.mean]],
                    color="black",
                    capsize=3,
                    linewidth=1,
                )
                offsets = [(k / (len(values) - 1) - 0.5) * 0.5 for k in range(len(values))]
                ax.scatter(
                    [center + o * bar.get_width() for o in offsets],
                    values,
                    s=12,
                    color="black",
                    edgecolors=color,
                    zorder=3,
                )
                top = max(stats.hi, *values)
            ax.annotate(
                "n/a" if stats is None else f"{stats.mean:.2f}",
                (center, top),
                ha="center",
                va="bottom",
                fontsize="x-small",
            )
        drawn += sum(stats is not None for _, stats in finals)
    ax.set_xticks(range(len(runs)), labels, rotation=20, ha="right")
    ax.set_ylabel("final value")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    several = seed_counts and max(seed_counts) > 1
    note = BAR_NOTE.format(seeds=seed_count_text(seed_counts)) if several else ""
    heading = "\n".join(part for part in (title, note) if part)
    if heading:
        ax.set_title(heading, **({"fontsize": "medium"} if note else {}))
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
    parser.add_argument(
        "--x", default="step", help="x axis: step (optimizer), grpo_step or time/elapsed"
    )
    parser.add_argument(
        "--time-unit", choices=sorted(TIME_UNITS), default="s", help="unit of a time x axis"
    )
    parser.add_argument("--labels", nargs="+", help="one label per run")
    parser.add_argument("--label-keys", nargs="+", help="label runs by these config settings")
    parser.add_argument("--smooth", type=int, default=1, help="trailing mean window (train)")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", required=True, help="PNG file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    missing = [r for r in args.runs if not seed_folders(r)]
    if missing:
        print(
            f"rrl plot: no metrics.jsonl (nor seed~N/metrics.jsonl) in {missing}", file=sys.stderr
        )
        return 2
    for run in args.runs:
        for folder in seed_folders(run):
            if not read_metrics(folder, warn=False):
                warn(f"{folder / 'metrics.jsonl'} holds no records")
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
                time_unit=args.time_unit,
            )
    except ValueError as exc:
        print(f"rrl plot: {exc}", file=sys.stderr)
        return 2
    if drawn == 0:
        print(f"rrl plot: none of {args.metric} is logged in these runs", file=sys.stderr)
        return 1
    print(f"rrl plot: wrote {args.out} ({drawn} series)")
    return 0
