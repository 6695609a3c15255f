"""A run's output folder: config.yaml first, metrics as it goes, state to resume, done.json last.

:class:`RunContext` is what a trainer holds of its ``--out`` folder: it writes the resolved
settings (``config.yaml``), opens ``metrics.jsonl`` and the trackers, keeps the wall clock,
saves and restores the resumable state (:mod:`.resume`) and writes the final checkpoint and
``done.json``. A folder whose ``done.json`` exists holds a finished run (:mod:`.ownership` decides
whether a command may reuse it).

Under ``torchrun`` only rank 0 owns the folder: it alone locks it, writes ``config.yaml``,
``metrics.jsonl``, the state, the checkpoint and ``done.json``; the other ranks log into
:class:`SilentMetrics` (the same records, never written), read a saved state to resume, and
hand their random-number states to rank 0 when it saves.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from reasoning_core.runtime.distributed.collectives import broadcast_object
from reasoning_core.runtime.distributed.world import barrier, is_main
from reasoning_core.runtime.errors import StateError
from reasoning_core.runtime.run.checkpoint import save_checkpoint
from reasoning_core.runtime.run.metrics import MetricsWriter, write_json_atomic
from reasoning_core.runtime.run.ownership import lock_run_folder, release_run_folder
from reasoning_core.runtime.run.resume import (
    EXTRA_KEY,
    RESUME_MAY_CHANGE,
    check_same_settings,
    find_state,
    load_state,
    save_state,
)
from reasoning_core.runtime.run.trackers import open_trackers
from reasoning_core.runtime.settings.config import save_config

ENV_EXIT_AFTER = "RRL_EXIT_AFTER_STEP"  # test hook: hard-exit right after this optimizer step


class SilentMetrics:
    """What a rank other than 0 logs into: the records rank 0 writes, kept nowhere."""

    records = 0

    def log(self, values: dict[str, Any], *, step: int, split: str) -> dict[str, Any]:
        return {"step": step, "split": split, **values}

    def restore(self, records: int) -> None:
        pass

    def truncate(self, offset: int) -> None:
        pass

    def close(self) -> None:
        pass


@dataclasses.dataclass
class _Slot:
    """A metrics line's place (:meth:`RunContext.reserve`): ``(values, step, split)`` once
    known, None until then."""

    line: tuple[dict[str, Any], int, str] | None


class RunContext:
    """A run's output folder, metrics and wall clock; resume bookkeeping.

    ``out/config.yaml`` is written on start; ``out/done.json`` last. If ``done.json`` exists
    the run is complete and :attr:`done` is True (the trainer returns at once). Metrics go to
    ``metrics.jsonl`` and to the trackers named by setting ``trackers``."""

    def __init__(self, cfg: Any, out: str | Path, method: str):
        # cfg: a trainer's settings (training.settings.CommonConfig or a subclass); only its
        # trackers, max_wall_seconds and save_checkpoint are read here.
        self.cfg = cfg
        self.method = method
        self.out = Path(out)
        self.main = is_main()
        self.done = (self.out / "done.json").is_file()
        if not self.done and self.main:  # one writer: held until it ends or the run finishes
            lock_run_folder(self.out, method)
        self.state_dir = self.out / "state"
        self.start = time.perf_counter()
        self.prior_elapsed = 0.0
        self.last_eval: dict[str, Any] | None = None
        self._waiting: list[_Slot] = []  # a reserved line not written yet, and those after it
        self.save_due: int | None = None  # the iteration a save not made yet fell due at
        self.resumed_extra: dict[str, Any] | None = None  # a trainer's extra state, resumed
        self.iterations: dict[str, int] | None = None  # {"iterations_done", "iterations_planned"}
        self.budget_stop: dict[str, int] | None = None  # the same, where max_wall_seconds stopped
        self.engine: str | None = None  # the rollout engine that ran (`auto` resolved)
        self.metrics: MetricsWriter | SilentMetrics | None = None
        exit_after = os.environ.get(ENV_EXIT_AFTER)
        self.exit_after = int(exit_after) if exit_after else None
        if self.done:
            return
        if not self.main:
            self.metrics = SilentMetrics()
            barrier()  # rank 0 has checked the settings and written config.yaml
            return
        if find_state(self.state_dir) is not None:  # about to resume: same experiment only
            check_same_settings(
                self.out / "config.yaml",
                cfg,
                may_change=RESUME_MAY_CHANGE,
                what=str(self.state_dir),
            )
        try:
            save_config(cfg, self.out)
            trackers = open_trackers(cfg.trackers, self.out, dataclasses.asdict(cfg), method)
            self.metrics = MetricsWriter(self.out, trackers=trackers)
        except OSError as exc:  # a full disk, say (the lock proved the folder writable)
            raise StateError(
                f"{self.out}: cannot write the run's files ({exc.strerror or exc}"
                f"{': ' + str(exc.filename) if exc.filename else ''}). Free space and run the "
                "same command again"
            ) from None
        barrier()  # a no-op in one process

    def elapsed(self) -> float:
        return self.prior_elapsed + time.perf_counter() - self.start

    def log(
        self, values: dict[str, Any], *, step: int, split: str, slot: Any = None
    ) -> dict[str, Any]:
        """One metrics line (``time/elapsed`` added); returns the record. ``slot``: the place
        :meth:`reserve` kept for this line. While a reserved place is not filled, the lines
        logged after it wait (in order, in memory) and are written once it is: the file's
        order is always the order the lines were reserved or logged in."""
        values = dict(values)
        values["time/elapsed"] = self.elapsed()
        if slot is not None:
            slot.line = (values, step, split)
        elif self._waiting:
            self._waiting.append(_Slot((values, step, split)))
        else:
            return self.metrics.log(values, step=step, split=split)
        while self._waiting and self._waiting[0].line is not None:
            values_, step_, split_ = self._waiting.pop(0).line
            self.metrics.log(values_, step=step_, split=split_)
        return {"step": int(step), "split": split, **values}

    def reserve(self) -> _Slot:
        """Keep the next line's place for a line logged later with ``slot=`` (an evaluation a
        rollout worker runs while training goes on)."""
        slot = _Slot(None)
        self._waiting.append(slot)
        return slot

    @property
    def reserved(self) -> int:
        """How many reserved places are not filled yet."""
        return sum(slot.line is None for slot in self._waiting)

    @property
    def lines_waiting(self) -> bool:
        """Whether a line logged waits for a reserved place before it to be filled."""
        return any(slot.line is not None for slot in self._waiting)

    def resume(self, model, optimizer, scheduler) -> dict[str, Any] | None:
        """Restore the last saved state if there is one; else start the metrics afresh."""
        counters = load_state(self.state_dir, model=model, optimizer=optimizer, scheduler=scheduler)
        self.resumed_extra = None if counters is None else counters.pop(EXTRA_KEY, None)
        if counters is None:
            self.metrics.restore(0)
            return None
        try:  # by counting records; a state saved before they were counted has its offset
            if "metrics_records" in counters:
                self.metrics.restore(int(counters["metrics_records"]))
            else:
                self.metrics.truncate(int(counters["metrics_offset"]))
        except ValueError as exc:
            raise StateError(
                f"cannot resume from {self.state_dir}: {exc}. Put the file back as it was, or "
                f"delete {self.state_dir} to start this run over"
            ) from None
        self.prior_elapsed = float(counters.get("elapsed", 0.0))
        self.last_eval = counters.get("last_eval")
        if self.main:
            print(f"[{self.method}] resumed from {self.state_dir} at {counters}", file=sys.stderr)
        return counters

    def save_state(
        self, model, optimizer, scheduler, extra: dict[str, Any] | None = None, **counters: Any
    ) -> None:
        """Save the resumable state (rank 0 writes it, with every rank's RNG states; each rank
        takes part in the gather, so every rank calls this); ``extra``: more a trainer keeps
        (read back as :attr:`resumed_extra`)."""
        # The state's line count must cover every line logged; a place still reserved after
        # the last of them is an evaluation the trainer asks for again on resume.
        if self.lines_waiting:
            raise RuntimeError("saving state while metrics lines wait for a reserved place")
        counters = dict(counters)
        counters["metrics_records"] = self.metrics.records
        counters["elapsed"] = broadcast_object(self.elapsed())
        counters["last_eval"] = self.last_eval
        save_state(
            self.state_dir,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            counters=counters,
            extra=extra,
        )

    def maybe_exit(self, step: int) -> None:
        """Test hook: ``RRL_EXIT_AFTER_STEP=k`` kills the process (no cleanup) after step k."""
        if self.exit_after is not None and step >= self.exit_after:
            os._exit(3)

    def over_budget(self) -> bool:
        """True when ``max_wall_seconds`` is set and the run's elapsed time has passed it."""
        budget = self.cfg.max_wall_seconds
        # Under torchrun every rank stops where rank 0's clock says (identity in one process).
        return broadcast_object(budget is not None and self.elapsed() >= budget)

    def finish(self, model, tokenizer, *, step: int, extra: dict[str, Any] | None = None) -> dict:
        """Final checkpoint, ``done.json``; drop the resume state.

        ``done.json``: ``method``, ``step`` and ``optimizer_steps`` (optimizer steps reached),
        the last evaluation's ``eval_accuracy``/``eval_format_reward``/``eval_examples``,
        ``wall_seconds``, ``stopped_on_budget`` (``max_wall_seconds`` ended the run early),
        ``iterations_done`` of ``iterations_planned`` in the trainer's unit (GRPO steps as
        ``n_grpo_steps`` counts them, EI steps, SFT optimizer steps), ``engine``, ``extra``. The
        same facts but ``method``, ``optimizer_steps`` and (unless the budget stopped it) the
        iterations go first into the last ``metrics.jsonl`` line (split ``done``; wall seconds as
        its ``time/elapsed``), which ``rrl summary`` reads alone: ``done.json`` is not committed."""
        if self._waiting:
            raise RuntimeError("finishing while metrics lines wait for a reserved place")
        if self.main and self.cfg.save_checkpoint:
            save_checkpoint(model, tokenizer, self.out / "checkpoint")
        last = broadcast_object(self.last_eval) or {}
        facts = {
            "eval_accuracy": last.get("accuracy"),
            "eval_format_reward": last.get("format_reward"),
            "eval_examples": last.get("num_examples"),
            "stopped_on_budget": self.budget_stop is not None,
            **(self.budget_stop or {}),
            "engine": self.engine,
            **(extra or {}),
        }
        record = self.log(facts, step=step, split="done")
        done = {"method": self.method, "step": step, "optimizer_steps": step, **facts}
        done.update(self.iterations if self.budget_stop is None and self.iterations else {})
        done["wall_seconds"] = record["time/elapsed"]
        if not self.main:
            barrier()  # rank 0 writes done.json and drops the state
            return done
        write_json_atomic(self.out / "done.json", done)
        self.metrics.close()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        release_run_folder(self.out)
        barrier()
        return done
