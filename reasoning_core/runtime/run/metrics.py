"""Run outputs that are plain files: ``metrics.jsonl`` and ``generations/step_XXXXXX.jsonl``.

Every metrics line is one JSON object with ``step`` (optimizer steps so far) and ``split``
(``train`` or ``eval``; a finished training run's last line has split ``done`` and repeats what
its ``done.json`` says, so that the committed ``metrics.jsonl`` alone describes the finished
run: ``done.json`` is not committed). Wall-clock measurements go only under keys starting with ``time/``,
so two runs with the same seed compare equal on everything else (see ARCHITECTURE.md).

Lines are flushed as they are written. A resumed run puts the file back to exactly the records
its last saved training state had (it counts records, :meth:`MetricsWriter.restore`), so lines
logged after that state (and a half-written line from a killed process) are dropped and written
again; a file with fewer records than that, or a damaged one among them, stops the run with a
message naming the file and line.

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

from reasoning_core.runtime.errors import StateError
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
        self._records = self.path.read_bytes().count(b"\n")  # complete lines so far

    @property
    def offset(self) -> int:
        """Byte length of the file so far."""
        self._file.flush()
        return self._file.tell()

    @property
    def records(self) -> int:
        """Records (complete lines) in the file so far: what a saved training state records,
        for :meth:`restore`."""
        return self._records

    def restore(self, records: int) -> None:
        """Cut the file back to its first ``records`` lines (what it held when a training state
        was saved); the trackers rewind to the step of the last line kept.

        Raises ``ValueError`` naming the file (and line) when it holds fewer complete records
        than that or a damaged one among them: it was cut or edited after the state was saved,
        and the steps it lost would not be logged again."""
        self._file.flush()
        data = self.path.read_bytes()
        end = 0
        for lineno in range(1, records + 1):
            newline = data.find(b"\n", end)
            if newline < 0:
                raise ValueError(
                    f"{self.path} holds {lineno - 1} complete records; the saved training state "
                    f"was saved after {records}: the file was cut or replaced since"
                )
            line = data[end:newline]
            try:
                ok = isinstance(json.loads(line.decode("utf-8")), dict)
            except (UnicodeDecodeError, json.JSONDecodeError):
                ok = False
            if not ok:
                raise ValueError(
                    f"{self.path}:{lineno}: not a JSON record (torn or edited); the saved "
                    f"training state was saved after {records} records"
                )
            end = newline + 1
        self._file.truncate(end)
        self._file.seek(0, os.SEEK_END)
        self._records = records
        if self.trackers:
            kept = read_metrics(self.path, damaged="skip")
            for tracker in self.trackers:
                tracker.rewind(int(kept[-1]["step"]) if kept else -1)

    def truncate(self, offset: int) -> None:
        """Cut the file back to ``offset`` bytes: the first records that fit in them (states
        saved before records were counted say how many this way). Raises ``ValueError`` when
        the file is shorter than ``offset`` (see :meth:`restore`)."""
        self._file.flush()
        data = self.path.read_bytes()
        if len(data) < offset:
            raise ValueError(
                f"{self.path} holds {len(data)} bytes; the saved training state was saved "
                f"after {offset}: the file was cut or replaced since"
            )
        self.restore(data[:offset].count(b"\n"))

    def log(self, values: dict[str, Any], *, step: int, split: str) -> dict[str, Any]:
        """Write one line ``{"step": step, "split": split, **values}`` and flush it."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        record = {"step": int(step), "split": split}
        record.update({k: _plain(v) for k, v in values.items()})
        try:
            self._file.write(json.dumps(record, sort_keys=False) + "\n")
            self._file.flush()
        except OSError as exc:  # a full disk, say: the run cannot go on without its metrics
            try:
                self._file.close()  # closes the file even when the flush in it fails again
            except OSError:
                pass
            raise StateError(
                f"{self.path}: a metrics line could not be written ({exc.strerror or exc}). "
                "Free space (or make the folder writable) and run the same command again: it "
                "resumes from its last saved state, if it saved one (save_every), and writes "
                "the lines after it again"
            ) from None
        self._records += 1
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


def finished_run(out: str | Path, command: str, cfg: Any) -> dict[str, Any] | None:
    """``done.json``'s data (after saying so on stderr) when ``out`` holds this very run of
    ``command`` finished with the settings ``cfg``, else None; a folder finished by another
    command or with other settings, or holding files no run wrote, is refused with a
    ``ConfigError`` naming it (:func:`reasoning_core.runtime.run.ownership.check_run_folder`)."""
    from reasoning_core.runtime.run.ownership import check_run_folder
    from reasoning_core.runtime.run.resume import RESUME_MAY_CHANGE

    return check_run_folder(out, command, cfg, may_change=RESUME_MAY_CHANGE)


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as pretty JSON through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({k: _plain(v) for k, v in data.items()}, indent=2) + "\n")
    tmp.replace(path)
    return path
