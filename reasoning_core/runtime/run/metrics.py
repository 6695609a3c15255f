"""Run outputs that are plain files: ``metrics.jsonl`` and ``generations/step_XXXXXX.jsonl``.

Every metrics line is one JSON object with ``step`` (optimizer steps so far) and ``split``
(``train`` or ``eval``; a finished training run's last line has split ``done`` and repeats what
its ``done.json`` says, so that the committed ``metrics.jsonl`` alone describes the finished
run: ``done.json`` is not committed). Wall-clock measurements go only under keys starting with ``time/``,
so two runs with the same seed compare equal on everything else (see ARCHITECTURE.md).

Lines are flushed as they are written. A resumed run truncates the file back to the byte
offset recorded with its last saved training state, so lines logged after that state (and a
half-written line from a killed process) are dropped and written again.

:class:`MetricsWriter` is the one writer of a run's metrics: it also hands every line to the
trackers it was given (TensorBoard, W&B: :mod:`reasoning_core.runtime.run.trackers`).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from reasoning_core.runtime.run.trackers import Tracker

SPLITS = ("train", "eval", "done")


def _plain(value: Any) -> Any:
    """JSON-friendly scalars: tensors and numpy numbers become floats/ints; NaN/inf become None."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    """Append-only writer of ``metrics.jsonl``, also feeding ``trackers`` each line.

    >>> w = MetricsWriter("/tmp/run")                         # doctest: +SKIP
    >>> w.log({"loss": 0.5, "time/train": 1.2}, step=3, split="train")  # doctest: +SKIP
    """

    def __init__(
        self, out_dir: str | Path, name: str = "metrics.jsonl", trackers: list[Tracker] = ()
    ):
        self.path = Path(out_dir) / name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self.trackers = list(trackers)

    @property
    def offset(self) -> int:
        """Byte length of the file so far (recorded with a training state for resume)."""
        self._file.flush()
        return self._file.tell()

    def truncate(self, offset: int) -> None:
        """Cut the file back to ``offset`` bytes (what it held when a state was saved); the
        trackers rewind to the step of the last line kept."""
        self._file.flush()
        self._file.truncate(min(offset, self._file.tell()))
        self._file.seek(0, os.SEEK_END)
        if self.trackers:
            kept = read_metrics(self.path, damaged="skip")
            for tracker in self.trackers:
                tracker.rewind(int(kept[-1]["step"]) if kept else -1)

    def log(self, values: dict[str, Any], *, step: int, split: str) -> dict[str, Any]:
        """Write one line ``{"step": step, "split": split, **values}`` and flush it."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        record = {"step": int(step), "split": split}
        record.update({k: _plain(v) for k, v in values.items()})
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()
        for tracker in self.trackers:
            tracker.log(record)
        return record

    def close(self) -> None:
        self._file.close()
        for tracker in self.trackers:
            tracker.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_metrics(path: str | Path, *, damaged: str = "raise") -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (or of ``<run>/metrics.jsonl``).

    The part after the last newline is never a record: it is what a process killed mid-write
    leaves (a resumed run truncates it away), so it is left out silently. Any other line that
    is not a UTF-8 JSON object is damage, named ``FILE:LINE`` and handled by ``damaged``:
    ``"raise"`` raises ``ValueError``, ``"warn"`` skips it with a warning on stderr (the
    figures and the summary keep going over one bad line), ``"skip"`` skips it silently."""
    if damaged not in ("raise", "warn", "skip"):
        raise ValueError(f"damaged must be 'raise', 'warn' or 'skip', got {damaged!r}")
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1]
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
            problem, detail = (None, "") if isinstance(record, dict) else ("not a JSON object", "")
        except UnicodeDecodeError:
            problem, detail = "not UTF-8 text", ""
        except json.JSONDecodeError as exc:
            problem, detail = "not valid JSON", f" ({exc.msg})"
        if problem is None:
            records.append(record)
        elif damaged == "raise":
            raise ValueError(f"{path}:{lineno}: {problem}{detail}")
        elif damaged == "warn":
            print(f"warning: {path}:{lineno}: skipped ({problem})", file=sys.stderr)
    return records


def without_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with every ``time/...`` key removed (for reproducibility comparisons)."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def generations_path(out_dir: str | Path, step: int) -> Path:
    return Path(out_dir) / "generations" / f"step_{int(step):06d}.jsonl"


def write_generations(out_dir: str | Path, step: int, records: list[dict[str, Any]]) -> Path:
    """Write one JSON object per example to ``generations/step_XXXXXX.jsonl`` (atomically)."""
    path = generations_path(out_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps({k: _plain(v) for k, v in record.items()}) + "\n")
    tmp.replace(path)
    return path


def finished_run(out: str | Path, command: str) -> dict[str, Any] | None:
    """``done.json``'s data (after saying so on stderr) when ``out`` is a finished run of
    ``command``, else None: every command returns at once on a folder it already completed."""
    done = Path(out) / "done.json"
    if not done.is_file():
        return None
    print(f"[{command}] {out} is already complete (done.json)", file=sys.stderr)
    return json.loads(done.read_text())


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as pretty JSON through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({k: _plain(v) for k, v in data.items()}, indent=2) + "\n")
    tmp.replace(path)
    return path
