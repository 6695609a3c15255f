"""Figures and the summary table of a study, rebuilt from run folders alone.

``rrl plot`` draws PNG figures from the runs' ``metrics.jsonl`` files (matplotlib, Agg):

- ``--kind curves`` (default): one panel per ``--metric`` (``split/key``, e.g. ``eval/accuracy``
  or ``train/entropy``) against ``--x`` (``step``: the optimizer step; ``grpo_step``: GRPO
  steps, i.e. rollout batches, done; ``time/elapsed`` in ``--time-unit`` s, min or h), one
  line per run, labelled by the settings named in ``--label-keys`` (read from each run's
  ``config.yaml``) or by ``--labels``. A metric no run logs gets no panel.
- ``--kind final``: grouped bars of the last logged value of each metric per run (e.g. the
  final evaluation accuracy of each method beside zero-shot).

A run folder holds its ``metrics.jsonl`` (one seed) or ``seed~N/`` folders each holding one;
a run with several seeds is drawn as the mean over its seeds with the 95% t-interval of the
mean as a shaded band (curves) or an error bar with a dot per seed (final bars).

``rrl summary`` writes ``summary.tsv`` (``../shared/SPEC.md`` section 3): one row per run with
``experiment`` (the first folder under the results folder), ``run`` (the run's folder under the
results folder), one column per setting that some run's folder name varies (``key~value``
parts, as the workflow's Paramspace tables write them; each cell holds that run's resolved
value from its ``config.yaml``), then ``eval_accuracy``, ``eval_format_reward``,
``eval_examples`` and ``wall_seconds`` (from ``done.json``, falling back to the last eval line
of ``metrics.jsonl``). It reads only the run folders, so it can be rebuilt at any time.
"""

from __future__ import annotations

import sys

from reasoning_core.runtime.report.bands import (
    Band,
    Interval,
    aggregate,
    mean_interval,
    points,
    t_quantile,
    with_grpo_steps,
)
from reasoning_core.runtime.report.figures import (
    curve_bands,
    final_values,
    last_value,
    main_plot,
    plot_curves,
    plot_final,
)
from reasoning_core.runtime.report.runs import (
    config_file,
    find_runs,
    format_value,
    moving_average,
    read_json,
    read_metrics,
    read_seeds,
    read_yaml,
    run_labels,
    seed_folders,
    series,
    short_names,
)
from reasoning_core.runtime.report.table import (
    SUMMARY_COUNTS,
    SUMMARY_METRICS,
    main_summary,
    summary_rows,
    varied_settings,
    write_summary,
)


def main(argv: list[str] | None = None) -> int:
    """``python -m reasoning_core.runtime.report plot|summary ...``"""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in {"plot", "summary"}:
        return (main_plot if argv[0] == "plot" else main_summary)(argv[1:])
    print("usage: rrl plot ... | rrl summary ...", file=sys.stderr)
    return 2


__all__ = [
    "SUMMARY_COUNTS",
    "SUMMARY_METRICS",
    "Band",
    "Interval",
    "aggregate",
    "config_file",
    "curve_bands",
    "final_values",
    "find_runs",
    "format_value",
    "last_value",
    "mean_interval",
    "points",
    "read_seeds",
    "seed_folders",
    "t_quantile",
    "with_grpo_steps",
    "main",
    "main_plot",
    "main_summary",
    "moving_average",
    "plot_curves",
    "plot_final",
    "read_json",
    "read_metrics",
    "read_yaml",
    "run_labels",
    "series",
    "short_names",
    "summary_rows",
    "varied_settings",
    "write_summary",
]
