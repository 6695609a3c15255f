"""Wall time and final accuracy of tiny-world GRPO, synchronous against a rollout worker.

The same run two (or more) ways, per seed:

- ``sync``: ``rrl grpo`` as the study runs it: sample, train, sync, in one process;
- ``worker``: ``rollout_lag: 1`` and ``rollout_worker: true``: a second process samples step
  k + 1 with the weights of step k while the learner trains on step k (docs/async.md);
- ``free``: ``rollout_worker: true`` and ``max_staleness: 1``: the worker samples with the
  newest weights it holds, at most one version behind (not reproducible);
- ``worker_decoupled``: ``worker`` with ``offpolicy_correction: decoupled`` (the learner
  also scores the batch's proximal log-probs, one no-gradient forward a step).

``--ways`` picks them (default ``sync worker``); every way is compared with ``sync``.

Each process has one torch thread, so on a 2-core machine the worker and the learner each have
a core. A run's time is its launch's (start-up and model loading included) and ``done.json``'s
``wall_seconds``; its accuracy is ``done.json``'s ``eval_accuracy`` (the final evaluation).
The ways alternate, their order reversed every seed, so a slow spell of the machine hits
each. Printed: per seed the times and accuracies; the speed-up (sync time over worker time)
per seed, its median and mean with a 95% interval; each way's mean accuracy with its 95%
interval (reasoning_core/runtime/report/bands.py) and whether the worker's mean lies inside
the synchronous interval; the machine's core count and load average before and after.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/async_speedup.py \\
        --model workflow/resources/tiny_world --seeds 0 1 2

``--config``: a saved run's ``config.yaml`` (the default study's GRPO run,
``results/default/grpo/default/seed~0/config.yaml``: 50 steps, an evaluation of 512 problems
every 10 and at the start, state saved every 5) run as it is, the seed set per run.

With the fixed lag the worker also runs the evaluations (docs/async.md), so a run with
evaluations overlaps them with training too.

``--tiny``: a few seconds per run (a plumbing check, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reasoning_core.runtime.report.bands import mean_interval

SETTINGS = {
    "task": "arithmetic",
    "n_grpo_steps": 20,
    "rollout_batch_size": 64,
    "group_size": 8,
    "train_batch_size": 64,
    "gradient_accumulation_steps": 8,
    "sampling_max_tokens": 48,
    "lr": 1e-4,
    "eval_at_start": False,
    "eval_every": 0,
    "eval_examples": 256,
    "save_every": 0,
    "save_checkpoint": False,
    "progress": False,
    "num_threads": 1,
}
TINY = {
    "n_grpo_steps": 3,
    "rollout_batch_size": 8,
    "group_size": 4,
    "train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "sampling_max_tokens": 16,
    "eval_examples": 4,
    "eval_max_tokens": 16,
    "train_examples": 32,
}
WAYS = {
    "sync": {},
    "worker": {"rollout_lag": 1, "rollout_worker": True},
    "free": {"rollout_worker": True, "max_staleness": 1},
    "worker_decoupled": {
        "rollout_lag": 1,
        "rollout_worker": True,
        "offpolicy_correction": "decoupled",
    },
}


def launch(model: str, out: Path, settings: dict, config: str | None = None) -> dict:
    """One run into ``out`` (from the settings file ``config`` when given, ``settings`` over
    it): its launch wall seconds, ``wall_seconds`` and ``eval_accuracy``."""
    cfg = {**settings, "model_path": model}
    sets = [a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    argv = [sys.executable, "-m", "reasoning_core.runtime.cli", "grpo"]
    if config is not None:
        argv += ["--config", config]
    argv += [*sets, "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"run failed ({out.name}):\n{done.stderr[-3000:]}")
    record = json.loads((out / "done.json").read_text())
    return {"launch": wall, "run": record["wall_seconds"], "accuracy": record["eval_accuracy"]}


def interval_text(values: list[float]) -> str:
    i = mean_interval(values)
    return f"{i.mean:.4f} [{i.lo:.4f}, {i.hi:.4f}] (n={i.n})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder (the tiny world's base)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tiny", action="store_true", help="toy sizes: a plumbing check")
    parser.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    parser.add_argument(
        "--config",
        help="a run's config.yaml to run as it is (its evaluations and saves included; seed, "
        "one thread and no progress bar set here) instead of the short run above",
    )
    parser.add_argument(
        "--ways", nargs="+", choices=list(WAYS), default=["sync", "worker"], help="sync first"
    )
    args = parser.parse_args(argv)
    if args.ways[0] != "sync" or len(args.ways) < 2:
        parser.error("--ways: sync first, then at least one other way")
    settings = {**SETTINGS, **(TINY if args.tiny else {})}
    if args.config:
        settings = {"progress": False, "num_threads": 1, **(TINY if args.tiny else {})}
    print(f"cores {os.cpu_count()}, load average before {os.getloadavg()}")
    results: dict[str, list[dict]] = {way: [] for way in args.ways}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        for i, seed in enumerate(args.seeds):
            order = list(args.ways) if i % 2 == 0 else list(reversed(args.ways))
            for way in order:
                out = root / f"{way}_seed{seed}"
                got = launch(args.model, out, {**settings, **WAYS[way], "seed": seed}, args.config)
                results[way].append(got)
                print(
                    f"seed {seed} {way:6s} launch {got['launch']:.1f} s, run {got['run']:.1f} s, "
                    f"accuracy {got['accuracy']:.4f}",
                    flush=True,
                )
    print(f"load average after {os.getloadavg()}")
    sync_acc = [r["accuracy"] for r in results["sync"]]
    band = mean_interval(sync_acc)
    print(f"accuracy sync {interval_text(sync_acc)}")
    for way in args.ways[1:]:
        for key in ("launch", "run"):
            ratios = [s[key] / w[key] for s, w in zip(results["sync"], results[way], strict=True)]
            print(
                f"speed-up ({key} time, sync / {way}) per seed "
                + ", ".join(f"{r:.3f}" for r in ratios)
                + f"; median {statistics.median(ratios):.3f}; mean {interval_text(ratios)}"
            )
        way_acc = [r["accuracy"] for r in results[way]]
        inside = band.lo <= statistics.fmean(way_acc) <= band.hi
        print(f"accuracy {way} {interval_text(way_acc)}")
        print(f"{way} mean accuracy inside the sync interval: {inside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
