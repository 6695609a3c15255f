"""Measure the spread of test_grpo_learns.py's reward rise over seeds and torch threads.

Runs the test's world and GRPO run (its settings, its stand-in reward) for each seed and each
thread count, each in a fresh temporary folder, and prints one line per run and a summary: the
head and tail means, the rise, and the worst rise against the test's MARGIN. Not a test (pytest
collects only ``test_*.py``); the numbers in the test's docstring come from its output.

    .venv/bin/python benchmarks/grpo_learns.py --seeds 0-5 --threads 1,2 \\
        | tee benchmarks/grpo_learns.txt

About 25-40 s per run on one core of the 2-core development machine.
The header names the CPU kernels in use; ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS and
ONEDNN_MAX_CPU_ISA set before the command pick another CPU's float path (docs/development.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as tests/conftest.py; threads are set per run
ROOT = Path(__file__).resolve().parents[1]
# The measured test and its helpers are plain modules of the test folders.
sys.path.insert(0, str(ROOT / "tests" / "runtime" / "trainers"))
sys.path.insert(1, str(ROOT / "tests" / "helpers"))
sys.path.insert(2, str(ROOT))

import test_grpo_learns as t  # noqa: E402

# the settings that pick other float paths on one machine (docs/development.md)
ISA_SETTINGS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def _ints(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-5", help="e.g. 0-5 or 0,3,7")
    parser.add_argument("--threads", default="1,2", help="torch threads, e.g. 1,2")
    args = parser.parse_args()
    import torch

    setattr(*t.GRADE_LOOKUP, t.digit_share_grade)
    cpu = platform.processor() or platform.machine()
    caps = " ".join(f"{k}={os.environ[k]}" for k in ISA_SETTINGS if k in os.environ)
    kernels = f"{torch.backends.cpu.get_cpu_capability()} kernels" + (f"; {caps}" if caps else "")
    machine = f"torch {torch.__version__}, {cpu} ({kernels}), {os.cpu_count()} CPUs"
    print(f"# {machine}; test MARGIN {t.MARGIN}")
    print(f"# {t.N_STEPS} GRPO steps, head/tail = mean reward of the first/last {t.STEPS_COMPARED}")
    print("seed\tthreads\thead\ttail\trise\tseconds\trewards", flush=True)
    rises = []
    for seed in _ints(args.seeds):
        for threads in _ints(args.threads):
            start = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="grpo-learns-") as tmp:
                rewards = t.train_rewards(Path(tmp), seed=seed, threads=threads)
            head, tail = t.rise(rewards)
            rises.append(tail - head)
            curve = " ".join(f"{r:.3f}" for r in rewards)
            print(
                f"{seed}\t{threads}\t{head:.3f}\t{tail:.3f}\t{tail - head:+.3f}\t"
                f"{time.perf_counter() - start:.0f}\t{curve}",
                flush=True,
            )
    worst = min(rises)
    print(
        f"# {len(rises)} runs: rise {worst:+.3f} to {max(rises):+.3f}; worst / MARGIN = "
        f"{worst / t.MARGIN:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
