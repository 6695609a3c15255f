"""One run folder, one run: what ``rrl`` refuses before it writes into ``--out``.

* :func:`check_run_folder` (reads only): a folder holding a finished run is skipped only when
  that run was made by the same command with the same settings (said on stderr, exit 0);
  finished by another command or with other settings, it is refused with a message naming the
  folder and the settings that differ. A folder holding files that no run of ``rrl`` wrote
  (someone's own ``config.yaml`` or ``metrics.jsonl``) is refused, as is one holding an
  unfinished run of another command.
* :func:`lock_run_folder`: before the first write, the folder's marker file ``.rrl-run``
  (``{"command": ..., "pid": ...}``) is created and locked with ``fcntl.flock`` for the life of
  the process, so a second ``rrl`` on the same folder stops at once naming the first one's pid.
  The kernel drops the lock when the process ends, however it ends (SIGKILL included), so a
  lock is never left stale. The marker stays after the run: it says which command owns the
  folder.

A folder is ours when it holds the marker, or (written before the marker existed) a
``config.yaml`` with the code's ``provenance`` key that ``save_config`` writes, or a saved
training state (``state/trainer_state.pt``).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.resume import STATE_FILE
from reasoning_core.runtime.settings import provenance
from reasoning_core.runtime.settings.config import settings_changes

MARKER = ".rrl-run"

# Folders this process holds locked: path -> open file (closing it releases the lock).
_HELD: dict[Path, Any] = {}


def _marker(out: Path) -> dict[str, Any]:
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _written_by_rrl(out: Path) -> bool:
    if (out / MARKER).is_file() or (out / "state" / STATE_FILE).is_file():
        return True
    config = out / "config.yaml"
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and provenance.KEY in data


def _owner(out: Path) -> str | None:
    """The command that wrote ``out``: the marker's, else a finished trainer's ``method``."""
    command = _marker(out).get("command")
    if command:
        return str(command)
    try:
        done = json.loads((out / "done.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    method = done.get("method") if isinstance(done, dict) else None
    return str(method) if method else None


def check_run_folder(
    out: str | Path, command: str, cfg: Any, *, may_change: set[str] = frozenset()
) -> dict[str, Any] | None:
    """``done.json``'s data when ``out`` holds this very run finished (said on stderr; the
    caller returns at once), None when ``rrl <command>`` may write into ``out``; raise
    :class:`ConfigError` when it may not (see the module docstring). ``may_change``: settings
    that say where and how a run ran, not what it computed (threads, device, progress bars)."""
    out = Path(out)
    if not out.is_dir():
        return None
    owner = _owner(out)
    if (out / "done.json").is_file():
        if owner is not None and owner != command:
            raise ConfigError(
                f"--out {out} holds a finished `rrl {owner}` run; `rrl {command}` does not "
                "reuse it. Use another --out (or delete the folder to replace that run)"
            )
        changes = settings_changes(out / "config.yaml", cfg, may_change=may_change)
        if changes:
            raise ConfigError(
                f"--out {out} holds a run finished with other settings: {'; '.join(changes)} "
                f"(its settings: {out / 'config.yaml'}). Nothing was run: use another --out "
                "for these settings, or delete the folder to replace that run"
            )
        try:
            done = json.loads((out / "done.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{out / 'done.json'}: unreadable ({exc}); delete it to run again"
            ) from None
        print(
            f"[{command}] {out} is already complete (done.json), with the same settings: "
            "nothing to do",
            file=sys.stderr,
        )
        return done
    entries = sorted(p.name for p in out.iterdir())
    if entries and not _written_by_rrl(out):
        shown = ", ".join(entries[:5]) + (
            f" and {len(entries) - 5} more" if len(entries) > 5 else ""
        )
        raise ConfigError(
            f"--out {out} holds files that no rrl run wrote ({shown}); rrl would overwrite "
            "them. Give --out a new or empty folder"
        )
    if owner is not None and owner != command:
        raise ConfigError(
            f"--out {out} holds an unfinished `rrl {owner}` run; `rrl {command}` does not "
            "write into it. Use another --out (or delete the folder)"
        )
    return None


def lock_run_folder(out: str | Path, command: str) -> None:
    """Create ``out`` and its marker and hold the marker's lock until this process ends (or
    :func:`release_run_folder`); raise :class:`ConfigError` when the folder cannot be written
    or another process holds it."""
    out = Path(out)
    key = out.resolve()
    if key in _HELD:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = open(out / MARKER, "a+", encoding="utf-8")  # noqa: SIM115 (held open)
    except OSError as exc:
        raise ConfigError(
            f"--out {out}: cannot write there ({exc.strerror or exc}); choose a folder you "
            "can write to"
        ) from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        try:
            pid = json.loads(handle.read() or "{}").get("pid", "unknown")
        except ValueError:
            pid = "unknown"
        handle.close()
        raise ConfigError(
            f"--out {out} is being written by another rrl process (pid {pid}); wait for it "
            "to end or use another --out"
        ) from None
    if (out / "done.json").is_file():  # finished by the process that held it a moment ago
        handle.close()
        raise ConfigError(f"--out {out} was finished by another rrl process meanwhile")
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"command": command, "pid": os.getpid()}) + "\n")
    handle.flush()
    _HELD[key] = handle


def release_run_folder(out: str | Path) -> None:
    """Release this process's lock on ``out`` (the run is finished); a no-op if not held."""
    handle = _HELD.pop(Path(out).resolve(), None)
    if handle is not None:
        handle.close()


def claim_run_folder(
    out: str | Path, command: str, cfg: Any, *, may_change: set[str] = frozenset()
) -> dict[str, Any] | None:
    """:func:`check_run_folder`, then (when there is work to do) :func:`lock_run_folder`."""
    done = check_run_folder(out, command, cfg, may_change=may_change)
    if done is None:
        lock_run_folder(out, command)
    return done
