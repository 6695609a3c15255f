"""Rerun finished runs from their saved config.yaml and compare metrics.jsonl, apart from time/.

A change that should not change behaviour (a refactor of the shell) is shown to be one by this
script: each run named below is trained again by the current code from the ``config.yaml`` it
saved, into ``--out``, and its ``metrics.jsonl`` is compared line by line with the saved one on
every key except those starting with ``time/`` (wall-clock measurements, docs/contract.md).

    python tools/rerun_identical.py --base results/default/base --out /tmp/rerun \
        results/default/sft/default results/default/ei/default results/default/grpo/default

``--base`` replaces the saved ``model_path`` (the committed runs name ``results/default/base``, whose
weights are not committed: build them with ``rrl tiny-world``). ``--compare-only`` skips
training and compares folders already under ``--out``. ``--ignore KEY`` (repeatable) leaves
out a key the change adds (a new metric), as ``time/`` keys are. Exit status 0 when every run
matches.

A zero-shot run (``rrl eval``, a folder under ``zero_shot/``) is rerun the same way. A setting
the code has renamed since the run was saved (the command's ``RENAMED``, old -> new, e.g.
rrl eval's ``limit`` -> ``eval_examples``) is passed under its new name: the rerun reads a copy
of the saved config.yaml with those keys renamed, one to one, values unchanged.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

METHODS = ("sft", "ei", "grpo", "dpo")
# The settings class of each command, for its renamed settings (attribute RENAMED).
SETTINGS = {
    "sft": "reasoning_core.runtime.trainers.sft:SFTConfig",
    "ei": "reasoning_core.runtime.trainers.ei:EIConfig",
    "grpo": "reasoning_core.runtime.trainers.grpo:GRPOConfig",
    "dpo": "reasoning_core.runtime.trainers.dpo:DPOConfig",
    "eval": "reasoning_core.runtime.evaluation.evaluate:EvalConfig",
}


def method_of(run: Path) -> str:
    """The trainer of a run folder: its done.json says; else the first folder under results/."""
    done = run / "done.json"
    method = json.loads(done.read_text()).get("method") if done.is_file() else None
    if method is not None:  # a trainer's (rrl eval's done.json names none)
        return method
    for part in run.parts:
        if part in METHODS:
            return part
    if run.name == "leaderboard" or "leaderboard" in run.parts:
        return "grpo"
    if "zero_shot" in run.parts:
        return "eval"
    raise SystemExit(f"{run}: cannot tell which trainer made it (no done.json, no sft/ei/grpo)")


def renamed_config(saved: Path, command: str, folder: Path) -> Path:
    """``saved`` (a config.yaml) with the settings ``command`` has renamed under their new
    names, written into ``folder``; ``saved`` itself when nothing is renamed."""
    module, _, name = SETTINGS[command].partition(":")
    renamed = getattr(getattr(importlib.import_module(module), name), "RENAMED", {})
    data = yaml.safe_load(saved.read_text())
    if not set(data) & set(renamed):
        return saved
    data = {renamed.get(key, key): value for key, value in data.items()}
    path = folder / f"{command}_config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    print(f"  renamed for the rerun: {sorted(set(data) & set(renamed.values()))}")
    return path


def strip_time(line: dict, ignore: frozenset[str] = frozenset()) -> dict:
    return {k: v for k, v in line.items() if not k.startswith("time/") and k not in ignore}


def read_lines(path: Path, ignore: frozenset[str] = frozenset()) -> list[dict]:
    lines = path.read_text().splitlines()
    return [strip_time(json.loads(s), ignore) for s in lines if s.strip()]


def compare(saved: Path, rerun: Path, ignore: frozenset[str] = frozenset()) -> list[str]:
    """Differences between two metrics.jsonl files apart from time/ keys and ``ignore``
    (empty: identical)."""
    a, b = read_lines(saved, ignore), read_lines(rerun, ignore)
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
    p.add_argument("--ignore", action="append", default=[], help="a key to leave out")
    args = p.parse_args(argv)
    ignore = frozenset(args.ignore)
    failed = 0
    scratch = Path(tempfile.mkdtemp(prefix="rerun_identical_"))
    for i, run in enumerate(args.runs):
        # An absolute run folder is mirrored under --out too (out / '/a/b' would be '/a/b').
        target = args.out / (run.relative_to(run.anchor) if run.is_absolute() else run)
        if not args.compare_only:
            command = method_of(run)
            folder = scratch / str(i)
            folder.mkdir()
            config = renamed_config(run / "config.yaml", command, folder)
            cmd = [sys.executable, "-m", "reasoning_core.runtime.cli", command]
            cmd += ["--config", str(config), "--out", str(target)]
            if command != "eval":  # rrl eval has no setting progress
                cmd += ["--set", "progress=false"]
            if args.base:
                cmd += ["--set", f"model_path={args.base}"]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        problems = compare(run / "metrics.jsonl", target / "metrics.jsonl", ignore)
        n = len(read_lines(run / "metrics.jsonl"))
        if problems:
            failed += 1
            print(f"DIFFERENT {run}: " + "; ".join(problems[:5]))
        else:
            left_out = f" and {sorted(ignore)}" if ignore else ""
            print(f"IDENTICAL {run}: {n} lines equal apart from time/ keys{left_out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
