"""A run across seeds: its seed folders, the final values of each, and their mean, standard
deviation and 95% interval (``rrl seeds``, the workflow's ``seeds.json``).

The study trains every run once per seed into ``<run>/seed~<N>/``. For ``n`` seeds with final
values ``x_1 .. x_n``:

- ``mean = sum(x_i) / n``;
- ``std``: the sample standard deviation, ``sqrt(sum((x_i - mean)^2) / (n - 1))``;
- ``ci95``: the half-width of the two-sided 95% Student-t interval of the mean,
  ``t_{0.975, n-1} * std / sqrt(n)`` (so the interval is ``mean +- ci95``).

``std`` and ``ci95`` are None (null) for a single seed. Everything is read from the seed
folders' ``metrics.jsonl`` (the committed files), never from ``done.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_core.runtime.report.bands import mean_and_std, t_quantile
from reasoning_core.runtime.report.runs import folder_finals, seed_runs

SEED_METRICS = ("eval_accuracy", "eval_format_reward")


def mean_std_ci95(values: Sequence[float]) -> dict[str, float | None]:
    """``{"mean", "std", "ci95"}`` of ``values`` (see the module docstring); std and ci95 are
    None for fewer than two values, everything None for none."""
    n = len(values)
    if n == 0:
        return {"mean": None, "std": None, "ci95": None}
    mean, std = mean_and_std(values)
    if std is None:
        return {"mean": mean, "std": None, "ci95": None}
    return {"mean": mean, "std": std, "ci95": t_quantile(n - 1) * std / math.sqrt(n)}


def seed_summary(run: str | Path, seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """What ``seeds.json`` holds for ``run`` (a folder of ``seed~<N>`` folders)::

        {"seeds": [0, 1, 2],
         "eval_accuracy": {"per_seed": [a0, a1, a2], "mean": m, "std": s, "ci95": h},
         "eval_format_reward": {...}}

    ``per_seed`` follows ``seeds``; a seed without a final evaluation gives None there and is
    left out of the statistics. ``seeds``: only these (all seed folders when None). ValueError
    naming the folder when it has no seed folders or lacks one of ``seeds``."""
    seeds = seed_runs(run, seeds)
    if not seeds:
        raise ValueError(f"{run}: no seed~<N> folders (a run across seeds holds one per seed)")
    finals = [folder_finals(folder) for _, folder in seeds]
    out: dict[str, Any] = {"seeds": [seed for seed, _ in seeds]}
    for name in SEED_METRICS:
        per_seed = [f.get(name) for f in finals]
        stats = mean_std_ci95([v for v in per_seed if v is not None])
        out[name] = {"per_seed": per_seed, **stats}
    return out


def write_seed_summary(
    run: str | Path, out: str | Path, seeds: Sequence[int] | None = None
) -> dict[str, Any]:
    """Write :func:`seed_summary` of ``run`` to ``out`` as indented JSON (atomically)."""
    data = seed_summary(run, seeds)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(out)
    return data


def main_seeds(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl seeds",
        description="Final accuracy and format reward of a run across its seed~N folders: "
        "per seed, mean, sample std and 95% t-interval half-width, as JSON.",
    )
    parser.add_argument("--run", required=True, help="run folder holding seed~N folders")
    parser.add_argument("--out", required=True, help="JSON file, e.g. <run>/seeds.json")
    parser.add_argument("--seeds", nargs="+", type=int, help="only these seeds (default: all)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        data = write_seed_summary(args.run, args.out, args.seeds)
    except ValueError as exc:
        print(f"rrl seeds: {exc}", file=sys.stderr)
        return 2
    acc = data["eval_accuracy"]
    spread = f" +- {acc['ci95']:.4f}" if acc["ci95"] is not None else ""
    mean = "none" if acc["mean"] is None else f"{acc['mean']:.4f}"
    print(f"rrl seeds: wrote {args.out} (seeds {data['seeds']}: accuracy {mean}{spread})")
    return 0
