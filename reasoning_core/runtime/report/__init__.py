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

``rrl summary`` writes ``summary.tsv`` (docs/contract.md) from the committed
files of the run folders alone (``metrics.jsonl``, ``config.yaml``; never ``done.json``, which
stays local), so a fresh clone rebuilds it byte for byte. Columns: ``experiment`` (the first
folder under the results folder), ``run`` (the run's folder under the results folder, without
its seed folder), ``seed`` (when some run has ``seed~<N>`` folders), one column per setting that
some run's folder name varies (``key~value`` parts, as the workflow's Paramspace tables write
them; each cell holds that run's resolved value from its ``config.yaml``), then
``eval_accuracy``, ``eval_format_reward``, ``eval_examples`` (the last ``eval`` line),
``wall_seconds`` (the ``time/elapsed`` of the trainer's final ``done`` line, else of the last
line), SFT's example counts when some run has them (``pool_examples``, ``kept_examples``,
``train_examples``, from the ``done`` line) and, with seeds, ``n_seeds`` and
``eval_accuracy_std``, ``eval_accuracy_ci95``, ``eval_format_reward_std``,
``eval_format_reward_ci95``.

Rows: a single run (the base model; a run of the layout before seeds) gives one row with an empty ``seed``; a run
across seeds gives one row per seed (``seed`` = N), then one row with ``seed`` = ``mean``
holding the mean over the seeds of every numeric column, ``n_seeds``, and the sample standard
deviation and the 95% Student-t half-width of the final accuracy and format reward
(:mod:`reasoning_core.runtime.report.seeds`; empty for one seed). Rows are ordered by
experiment (base, zero_shot, sft, ei, grpo, leaderboard, then others), the default run first,
then by folder name, whatever the order of ``--runs``.

``rrl seeds --run RUN --out RUN/seeds.json`` writes the same statistics of one run across
seeds as JSON (the workflow's target for one run across seeds).

``rrl ablations --summary summary.tsv --out ablations.tsv`` compares each ablation with its
baseline across seeds: the mean difference and its 95% Welch interval
(:mod:`reasoning_core.runtime.report.ablations`).

``rrl tool-use RUN... --out tool_use.tsv`` says whether each multi-turn run keeps calling its
tool (the evaluations' call rate at the end against the start) and compares the tool runs
(:mod:`reasoning_core.runtime.report.tool_use`).
"""

from __future__ import annotations

import sys

from reasoning_core.runtime.report.ablations import (
    ablation_rows,
    difference,
    main_ablations,
    read_seed_values,
    write_ablations,
)
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
from reasoning_core.runtime.report.robustness import main_robustness, robustness_rows
from reasoning_core.runtime.report.runs import (
    config_file,
    find_runs,
    folder_finals,
    format_value,
    moving_average,
    read_json,
    read_metrics,
    read_seeds,
    read_yaml,
    run_labels,
    sampled_responses,
    seed_folders,
    seed_runs,
    series,
    short_names,
)
from reasoning_core.runtime.report.seeds import (
    main_seeds,
    mean_std_ci95,
    seed_summary,
    write_seed_summary,
)
from reasoning_core.runtime.report.table import (
    MEAN_ROW,
    SPREAD_COLUMNS,
    SUMMARY_COUNTS,
    SUMMARY_METRICS,
    main_summary,
    run_order,
    summary_rows,
    varied_settings,
    write_summary,
)
from reasoning_core.runtime.report.tool_use import main_tool_use, tool_use_rows


def main(argv: list[str] | None = None) -> int:
    """``python -m reasoning_core.runtime.report plot|summary|seeds|ablations ...``"""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "plot": main_plot,
        "summary": main_summary,
        "seeds": main_seeds,
        "ablations": main_ablations,
        "robustness": main_robustness,
        "tool-use": main_tool_use,
    }
    if argv and argv[0] in commands:
        return commands[argv[0]](argv[1:])
    print(
        "usage: rrl plot ... | rrl summary ... | rrl seeds ... | rrl ablations ... | "
        "rrl robustness ... | rrl tool-use ...",
        file=sys.stderr,
    )
    return 2


__all__ = [
    "main_tool_use",
    "tool_use_rows",
    "main_robustness",
    "robustness_rows",
    "ablation_rows",
    "difference",
    "main_ablations",
    "read_seed_values",
    "write_ablations",
    "MEAN_ROW",
    "SPREAD_COLUMNS",
    "SUMMARY_COUNTS",
    "SUMMARY_METRICS",
    "Band",
    "Interval",
    "aggregate",
    "config_file",
    "curve_bands",
    "final_values",
    "find_runs",
    "folder_finals",
    "format_value",
    "last_value",
    "mean_interval",
    "points",
    "read_seeds",
    "seed_folders",
    "with_grpo_steps",
    "main",
    "main_plot",
    "main_seeds",
    "main_summary",
    "mean_std_ci95",
    "moving_average",
    "plot_curves",
    "plot_final",
    "read_json",
    "read_metrics",
    "read_yaml",
    "run_labels",
    "run_order",
    "sampled_responses",
    "seed_runs",
    "seed_summary",
    "series",
    "short_names",
    "summary_rows",
    "t_quantile",
    "varied_settings",
    "write_seed_summary",
    "write_summary",
]
