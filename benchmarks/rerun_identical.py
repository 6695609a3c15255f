"""Rerun finished runs from their saved config.yaml and compare metrics.jsonl, apart from time/.

A change that should not change behaviour (a refactor of the shell) is shown to be one by this
script: each run named below is trained again by the current code from the ``config.yaml`` it
saved, into ``--out``, and its ``metrics.jsonl`` is compared line by line with the saved one on
every key except those starting with ``time/`` (wall-clock measurements, docs/contract.md).

    python benchmarks/rerun_identical.py --base results/base --out /tmp/rerun \
        results/sft/default results/ei/default results/grpo/default

``--base`` replaces the saved ``model_path`` (the committed runs name ``results/base``, whose
weights are not committed: build them with ``rrl tiny-world``). ``--compare-only`` skips
training and compares folders already under ``--out``. Exit status 0 when every run matches.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

METHODS = ("sft", "ei", "grpo")


def method_of(run: Path) -> str:
    """The trainer of a run folder: its done.json says; else the first folder under results/."""
    done = run / "done.json"
    if done.is_file():
        return json.loads(done.read_text())["method"]
    for part in run.parts:
        if part in METHODS:
            return part
    if run.name == "leaderboard" or "leaderboard" in run.parts:
        return "grpo"
    raise SystemExit(f"{run}: cannot tell which trainer made it (no done.json, no sft/ei/grpo)")


def strip_time(line: dict) -> dict:
    return {k: v for k, v in line.items() if not k.startswith("time/")}


def read_lines(path: Path) -> list[dict]:
    return [strip_time(json.loads(s)) for s in path.read_text().splitlines() if s.strip()]


def compare(saved: Path, rerun: Path) -> list[str]:
    """Differences between two metrics.jsonl files apart from time/ keys (empty: identical)."""
    a, b = read_lines(saved), read_lines(rerun)
    problems = []
    if len(a) != len(b):
        problems.append(f"{len(a)} lines saved, {len(b)} rerun")
    for i, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            detail = ", ".join(f"{k}: {x.get(k)!r} -> {y.get(k)!r}" for k in keys[:4])
            problems.append(f"line {i}: {detail}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="finished run folders (with config.yaml)")
    p.add_argument("--out", type=Path, required=True, help="where the reruns go")
    p.add_argument("--base", help="model_path to use instead of the saved one")
    p.add_argument("--compare-only", action="store_true")
    args = p.parse_args(argv)
    failed = 0
    for run in args.runs:
        # An absolute run folder is mirrored under --out too (out / '/a/b' would be '/a/b').
        target = args.out / (run.relative_to(run.anchor) if run.is_absolute() else run)
        if not args.compare_only:
            cmd = [sys.executable, "-m", "reasoning_core.runtime.cli", method_of(run)]
            cmd += ["--config", str(run / "config.yaml"), "--out", str(target)]
            cmd += ["--set", "progress=false"]
            if args.base:
                cmd += ["--set", f"model_path={args.base}"]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        problems = compare(run / "metrics.jsonl", target / "metrics.jsonl")
        n = len(read_lines(run / "metrics.jsonl"))
        if problems:
            failed += 1
            print(f"DIFFERENT {run}: " + "; ".join(problems[:5]))
        else:
            print(f"IDENTICAL {run}: {n} lines equal apart from time/ keys")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
