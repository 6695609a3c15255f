"""Wall time of one GRPO run alone and on 2 ranks under torchrun (gloo, CPU), in one invocation.

The same run three ways, the same global batch (rollout batch, train batch, micro batches):

- ``1 process, batch seeding``: a plain run as the study makes it (one engine call per step);
- ``1 process, group seeding``: ``rollout_seeding: group``, one engine call per group: the
  rollouts a run on any number of ranks draws;
- ``2 ranks, group seeding``: ``torchrun --standalone --nproc_per_node 2``; each rank samples,
  grades and scores half of the groups and trains on half of each train batch.

Each run's wall time is the launch's (start-up, model loading and the process group included)
and ``done.json``'s ``wall_seconds`` (the run itself). Rounds rotate over the three so that a
slow spell of the machine hits all of them. On a machine whose cores are busy with other work
the 2-rank figure says more about the machine than about the split: the script prints the
machine's core count and load beside the ratios.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/distributed_speedup.py --model results/default/base
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

SETTINGS = {
    "task": "arithmetic",
    "n_grpo_steps": 5,
    "rollout_batch_size": 32,
    "group_size": 8,
    "train_batch_size": 32,
    "gradient_accumulation_steps": 4,
    "sampling_max_tokens": 48,
    "train_examples": 256,
    "lr": 1e-5,
    "eval_at_start": False,
    "eval_every": 0,
    "eval_examples": 8,
    "eval_max_tokens": 16,
    "save_every": 0,
    "save_checkpoint": False,
    "progress": False,
    "engine": "hf",
    "seed": 0,
}

WAYS = {
    "1 process, batch seeding": (1, "batch"),
    "1 process, group seeding": (1, "group"),
    "2 ranks, group seeding": (2, "group"),
}


def launch(model: str, out: Path, nproc: int, seeding: str) -> tuple[float, float]:
    """(launch wall seconds, done.json's wall_seconds) of one run."""
    cfg = {**SETTINGS, "model_path": model, "rollout_seeding": seeding}
    sets = [a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    argv = ["-m", "reasoning_core.runtime.cli", "grpo", *sets, "--out", str(out)]
    if nproc > 1:
        argv = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"run failed ({nproc} processes):\n{done.stderr[-3000:]}")
    return wall, json.loads((out / "done.json").read_text())["wall_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder (the tiny world's base)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, (way, (nproc, seeding)) in enumerate(WAYS.items()):
                times[way].append(launch(args.model, Path(tmp) / f"{r}_{i}", nproc, seeding))
    print(" ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}; cores: {os.cpu_count()}, load average (1, 5, 15 min): {os.getloadavg()}, "
        f"rounds: {args.rounds}, one torch thread per process"
    )
    print(f"{'run':28s} {'launch s':>9s} {'run s':>9s}  (medians)")
    medians = {}
    for way, pairs in times.items():
        medians[way] = tuple(statistics.median(x) for x in zip(*pairs, strict=True))
        print(f"{way:28s} {medians[way][0]:9.1f} {medians[way][1]:9.1f}")
    one, two = medians["1 process, group seeding"], medians["2 ranks, group seeding"]
    plain = medians["1 process, batch seeding"]
    print(f"speed-up of 2 ranks over 1 process (group seeding, run): {one[1] / two[1]:.2f}x")
    print(f"speed-up of 2 ranks over 1 process (group seeding, launch): {one[0] / two[0]:.2f}x")
    print(f"group seeding's cost in 1 process (run, group / batch): {one[1] / plain[1]:.2f}x")


if __name__ == "__main__":
    main()
