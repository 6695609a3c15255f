"""How a run resumes: its saved state, and the settings it may resume under.

A trainer saves its state every ``save_every`` iterations (:func:`save_state`: model,
optimizer, scheduler, RNG states and the counters, among them the number of metrics records
written) into ``<out>/state``. Started again on the same ``--out``, it finds that state
(:func:`find_state`), checks that the run's settings are the saved ``config.yaml``'s apart from
those that only place the work (:data:`RESUME_MAY_CHANGE`, :func:`check_same_settings`), loads
it (:func:`load_state`) and cuts ``metrics.jsonl`` back to the saved position
(:meth:`reasoning_core.runtime.run.metrics.MetricsWriter.truncate`); the run folder
(:class:`reasoning_core.runtime.run.folder.RunContext`) drives these steps.

Under ``torchrun`` rank 0 writes the state (the policy and optimizer, the same on every rank)
with the RNG states of every rank (``rng_ranks``); every rank loads it, each taking its own RNG
state back at the same world size, and rank 0's at another.

Writes are atomic (a temporary folder swapped in with renames, :mod:`.checkpoint`), so a
process killed at any moment leaves either the old or the new state, never a torn one.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_core.runtime.distributed.collectives import gather_objects
from reasoning_core.runtime.distributed.sharding import full_state, is_sharded, load_full_state
from reasoning_core.runtime.distributed.world import is_main, rank, world_size
from reasoning_core.runtime.errors import ConfigError, StateError
from reasoning_core.runtime.run.checkpoint import replace_atomically, temporary_folder
from reasoning_core.runtime.settings.config import settings_changes

STATE_FILE = "trainer_state.pt"
COUNTERS_FILE = "counters.json"
EXTRA_KEY = "state_extra"  # where load_state returns a trainer's extra state among the counters

RESUME_MAY_CHANGE = {
    "device", "num_threads", "progress", "oom_backoff", "gradient_checkpointing",
    "attn_implementation", "engine_kwargs", "save_every", "compile", "trackers",
    "max_wall_seconds", "logprob_diff_warn",
}  # fmt: skip


def check_same_settings(saved: str | Path, cfg: Any, *, may_change: set[str], what: str) -> None:
    """Raise :class:`ConfigError` when the resolved ``cfg`` differs from the ``config.yaml`` at
    ``saved`` in a setting outside ``may_change`` (:func:`settings_changes`).

    Used before resuming a run: ``what`` (e.g. the state folder) was saved under ``saved``'s
    settings, and continuing it under others would mix two experiments in one run folder."""
    try:
        changes = settings_changes(saved, cfg, may_change=may_change)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; it describes {what}") from None
    if changes:
        raise ConfigError(
            f"{what} was saved by a run with other settings: {'; '.join(changes)} "
            f"(saved ones in {saved}). Rerun with those settings to resume it, delete {what} "
            "to start this run over with the new ones, or use another --out"
        )


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
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write the resumable training state to folder ``path`` atomically (under ``torchrun``:
    every rank hands over its RNG states, rank 0 writes); ``extra`` (not None): more a trainer
    keeps, which :func:`load_state` returns among the counters under :data:`EXTRA_KEY`."""
    final = Path(path)
    rngs = gather_objects(rng_state())  # [this process's] in one process
    if is_sharded(model):  # FSDP2: the shards gathered whole onto rank 0 (every rank calls)
        model_state, optim_state = full_state(model, optimizer)
    else:
        model_state, optim_state = model.state_dict(), optimizer.state_dict()
    if not is_main():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_folder(final)
    state = {
        "model": model_state,
        "optimizer": optim_state,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": rngs[0],
        "counters": counters,
    }
    if len(rngs) > 1:
        state["rng_ranks"] = rngs
    if extra is not None:
        state["extra"] = extra
    try:
        torch.save(state, tmp / STATE_FILE)
        # A human-readable copy of the counters (the .pt file is authoritative).
        (tmp / COUNTERS_FILE).write_text(json.dumps(counters, indent=2, default=str) + "\n")
    except (OSError, RuntimeError) as exc:
        # torch reports a full disk as "RuntimeError: [enforce fail at inline_container.cc]
        # ... unexpected pos"; the partial copy (possibly gigabytes) must not stay behind.
        shutil.rmtree(tmp, ignore_errors=True)
        kept = f"the state saved before stays in {final}" if final.exists() else "none was kept"
        raise StateError(
            f"saving the training state to {final} failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else exc!r}); {kept}. Is the disk full? "
            "Free space, then run the same command to go on from the last saved state"
        ) from None
    replace_atomically(tmp, final)
    return final


def _state_candidates(path: str | Path) -> list[Path]:
    """The state folders present, in the order to try: ``path``, then ``<path>.old`` (left
    when a process died between the two renames of :func:`save_state`)."""
    final = Path(path)
    candidates = (final, final.with_name(final.name + ".old"))
    return [c for c in candidates if (c / STATE_FILE).is_file()]


def find_state(path: str | Path) -> Path | None:
    """The state folder to resume from, or None (see :func:`_state_candidates`)."""
    candidates = _state_candidates(path)
    return candidates[0] if candidates else None


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
    final = Path(path)
    candidates = _state_candidates(final)
    if not candidates:
        return None
    data, errors = None, []
    for candidate in candidates:
        try:
            data = torch.load(candidate / STATE_FILE, map_location="cpu", weights_only=False)
            break
        except Exception as exc:  # torch raises RuntimeError, OSError, EOFError, pickle errors
            errors.append(f"{candidate / STATE_FILE}: unreadable ({type(exc).__name__}: {exc})")
            if candidate is not candidates[-1]:
                print(f"warning: {errors[-1]}; trying {candidates[-1]}", file=sys.stderr)
    if data is None:
        raise StateError(
            "; ".join(errors) + ". Saves are atomic, so a killed run does not leave this (look "
            f"for a full disk or a copy cut short); delete {final} to start this run over"
        )
    if is_sharded(model):
        load_full_state(model, optimizer, data["model"], data["optimizer"])
    else:
        model.load_state_dict(data["model"])
        optimizer.load_state_dict(data["optimizer"])
    if scheduler is not None and data["scheduler"] is not None:
        scheduler.load_state_dict(data["scheduler"])
    if restore_rng:
        ranks = data.get("rng_ranks")
        same_world = ranks is not None and len(ranks) == world_size()
        set_rng_state(ranks[rank()] if same_world else data["rng"])
    counters = dict(data["counters"])
    if "extra" in data:
        counters[EXTRA_KEY] = data["extra"]
    return counters
