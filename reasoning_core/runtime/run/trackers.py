"""Metric trackers beside ``metrics.jsonl``: TensorBoard and Weights & Biases, on request.

``metrics.jsonl`` is always written and stays the record every figure, summary and
reproducibility check reads. Setting ``trackers`` (``[tensorboard]``, ``[wandb]`` or both)
also sends each metrics line to:

- ``tensorboard``: event files in ``<out>/tensorboard`` (``tensorboard --logdir <out>``), one
  scalar per numeric key, tagged ``<split>/<key>`` (``train/loss``, ``eval/accuracy``) at the
  line's ``step``. Needs the ``tensorboard`` package (extra ``reasoning-rl[tensorboard]``).
- ``wandb``: a W&B run in ``<out>/wandb`` with the resolved config, keys ``<split>/<key>``
  plotted against ``step``. Offline by default (``WANDB_MODE=offline``; sync later with
  ``wandb sync``); set ``WANDB_MODE=online`` and ``WANDB_PROJECT`` to stream instead. The run
  id is kept in ``<out>/wandb/run_id`` so a resumed run continues the same W&B run. Needs the
  ``wandb`` package (extra ``reasoning-rl[wandb]``).

A resumed run truncates ``metrics.jsonl`` back to its saved state and logs the later lines
again; :meth:`Tracker.rewind` tells the trackers: TensorBoard then drops its events after that
step (``purge_step``); W&B cannot drop points, so it shows the redone ones twice.

The packages are imported only when a tracker opens (the setting is checked earlier, in
:func:`reasoning_core.runtime.training.settings.check_trackers`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Protocol


class Tracker(Protocol):
    def log(self, record: dict[str, Any]) -> None:
        """One metrics line: ``{"step": int, "split": str, **values}``."""
        ...

    def rewind(self, step: int) -> None:
        """The lines after ``step`` are about to be logged again (a resumed run)."""
        ...

    def close(self) -> None: ...


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The finite numeric values of a metrics line, keyed ``<split>/<key>`` (no step/split)."""
    split = record["split"]
    out = {}
    for key, value in record.items():
        if key in ("step", "split") or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[f"{split}/{key}"] = float(value)
    return out


class TensorBoardTracker:
    """Scalars into ``<out>/tensorboard`` through ``torch.utils.tensorboard.SummaryWriter``
    (opened at the first line, so that a rewind before it sets ``purge_step``)."""

    def __init__(self, out: str | Path):
        self.log_dir = Path(out) / "tensorboard"
        self._writer = None
        self._purge_step: int | None = None

    def rewind(self, step: int) -> None:
        self._purge_step = step + 1

    def log(self, record: dict[str, Any]) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.log_dir), purge_step=self._purge_step)
        for tag, value in scalars(record).items():
            self._writer.add_scalar(tag, value, global_step=int(record["step"]))
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class WandbTracker:
    """A W&B run in ``<out>/wandb`` (offline unless ``WANDB_MODE`` says otherwise), its charts
    drawn against the metrics' own ``step`` (so redone steps after a resume are accepted)."""

    def __init__(self, out: str | Path, config: dict[str, Any], name: str):
        import wandb

        folder = Path(out) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        id_file = folder / "run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else wandb.util.generate_id()
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            dir=str(out),
            id=run_id,
            resume="allow",
            name=f"{name}:{Path(out).name}",
            project=os.environ.get("WANDB_PROJECT", "reasoning-rl"),
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=config,
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def rewind(self, step: int) -> None:
        """Nothing to drop: W&B keeps logged points; the redone lines are logged again."""

    def log(self, record: dict[str, Any]) -> None:
        self.run.log({"step": int(record["step"]), **scalars(record)})

    def close(self) -> None:
        self.run.finish()


def open_trackers(
    names: list[str], out: str | Path, config: dict[str, Any], method: str
) -> list[Tracker]:
    """The trackers of setting ``trackers`` for run folder ``out`` (``config`` is the resolved
    configuration, ``method`` the trainer's name, both shown in W&B)."""
    trackers: list[Tracker] = []
    for name in names:
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(out))
        elif name == "wandb":
            trackers.append(WandbTracker(out, config, method))
        else:
            raise ValueError(f"unknown tracker {name!r}")
    return trackers
