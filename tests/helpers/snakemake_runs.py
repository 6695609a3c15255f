"""Running the repository's Snakefile from tests, and reading what it plans.

Shared by the workflow tests (tests/workflow/) and the GPU study's test
(tests/tools/test_gpu_study.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

from project_root import ROOT

BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake") if (BIN / "snakemake").exists() else "snakemake"
DEFAULT_CONFIG = str(ROOT / "workflow/config/config.yaml")

# The trainer command of each workflow settings section: (module, config dataclass).
SECTIONS = {
    "tiny-world": ("reasoning_core.runtime.tinyworld", "TinyWorldConfig"),
    "eval": ("reasoning_core.runtime.evaluation.evaluate", "EvalConfig"),
    "sft": ("reasoning_core.runtime.trainers.sft", "SFTConfig"),
    "ei": ("reasoning_core.runtime.trainers.ei", "EIConfig"),
    "grpo": ("reasoning_core.runtime.trainers.grpo", "GRPOConfig"),
    "dpo": ("reasoning_core.runtime.trainers.dpo", "DPOConfig"),
}


def snakemake(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run snakemake on the repository's Snakefile in working directory `cwd`. Outside the
    repository root the default `configfile:` is not found, so a --configfile is always given
    (the default configuration unless the caller passes one)."""
    if "--configfile" not in args:
        args = ("--configfile", DEFAULT_CONFIG, *args)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(cwd), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def planned_jobs(output: str) -> list[dict[str, str]]:
    """Jobs of a `snakemake -n` listing: rule name plus the job's `key: value` lines."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        match = re.match(r"(?:local)?rule (\w+):", block)
        if not match:
            continue
        job = {"rule": match.group(1)}
        for line in block.splitlines()[1:]:
            key, sep, value = line.strip().partition(": ")
            if sep:
                job[key] = value
        jobs.append(job)
    return jobs


def resources(job: dict[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in job.get("resources", "").split(", ") if "=" in item)


def known_settings(command: str) -> set[str]:
    """The setting names that the command of a SECTIONS key accepts."""
    module, name = SECTIONS[command]
    return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), name))}
