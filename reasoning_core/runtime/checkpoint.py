"""Checkpoints (Hugging Face format) and resumable training state, both written atomically.

* ``save_checkpoint(model, tokenizer, path)``: ``save_pretrained`` (safetensors) plus the
  tokenizer into ``<path>.tmp-<pid>``, then renamed to ``path``; loadable with
  ``AutoModelForCausalLM.from_pretrained(path)``.
* ``save_state(path, ...)`` / ``load_state(path)``: everything a trainer needs to continue
  exactly where it stopped: model and optimizer and scheduler state dicts, the RNG states
  (python, numpy, torch, CUDA when present), and a small ``counters`` dict (step counters,
  data position, metrics file offset, wall seconds so far). Written to a temporary folder and
  swapped in with renames, so a process killed at any moment leaves either the old or the new
  state, never a torn one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
COUNTERS_FILE = "counters.json"


def _swap_in(tmp: Path, final: Path) -> None:
    """Replace ``final`` by ``tmp`` with renames only (old copy kept as ``final.old`` briefly)."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


def _tmp_dir(final: Path) -> Path:
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def save_checkpoint(model, tokenizer, path: str | Path) -> Path:
    """Save ``model`` (safetensors) and ``tokenizer`` in Hugging Face format, atomically."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_dir(final)
    model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    _swap_in(tmp, final)
    return final


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(
    path: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    counters: dict[str, Any],
) -> Path:
    """Write the resumable training state to folder ``path`` atomically."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_dir(final)
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(),
            "counters": counters,
        },
        tmp / STATE_FILE,
    )
    # A human-readable copy of the counters (the .pt file is authoritative).
    (tmp / COUNTERS_FILE).write_text(json.dumps(counters, indent=2, default=str) + "\n")
    _swap_in(tmp, final)
    return final


def find_state(path: str | Path) -> Path | None:
    """The state folder to resume from, or None. Falls back to ``<path>.old`` when a process
    died between the two renames of :func:`save_state`."""
    final = Path(path)
    for candidate in (final, final.with_name(final.name + ".old")):
        if (candidate / STATE_FILE).is_file():
            return candidate
    return None


def load_state(
    path: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    restore_rng: bool = True,
) -> dict[str, Any] | None:
    """Load a state saved by :func:`save_state` into the given objects; return its counters
    (None when there is no state to resume from)."""
    found = find_state(path)
    if found is None:
        return None
    data = torch.load(found / STATE_FILE, map_location="cpu", weights_only=False)
    model.load_state_dict(data["model"])
    optimizer.load_state_dict(data["optimizer"])
    if scheduler is not None and data["scheduler"] is not None:
        scheduler.load_state_dict(data["scheduler"])
    if restore_rng:
        set_rng_state(data["rng"])
    return dict(data["counters"])
