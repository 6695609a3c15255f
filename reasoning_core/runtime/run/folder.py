"""A run's output folder: config.yaml first, metrics as it goes, state to resume, done.json last.

:class:`RunContext` is what a trainer holds of its ``--out`` folder: it writes the resolved
settings (``config.yaml``), opens ``metrics.jsonl`` and the trackers, keeps the wall clock,
saves and restores the resumable state (:mod:`.resume`) and writes the final checkpoint and
``done.json``. A folder whose ``done.json`` exists holds a finished run (:func:`is_done`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from reasoning_core.runtime.run.checkpoint import save_checkpoint
from reasoning_core.runtime.run.metrics import MetricsWriter, write_json_atomic
from reasoning_core.runtime.run.resume import (
    RESUME_MAY_CHANGE,
    check_same_settings,
    find_state,
    load_state,
    save_state,
)
from reasoning_core.runtime.run.trackers import open_trackers
from reasoning_core.runtime.settings.config import save_config

ENV_EXIT_AFTER = "RRL_EXIT_AFTER_STEP"  # test hook: hard-exit right after this optimizer step


def is_done(out: str | Path) -> bool:
    """True when ``out`` holds a finished run (its ``done.json`` is written last)."""
    return (Path(out) / "done.json").is_file()


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
        self.out.mkdir(parents=True, exist_ok=True)
        self.done = (self.out / "done.json").is_file()
        self.state_dir = self.out / "state"
        self.start = time.perf_counter()
        self.prior_elapsed = 0.0
        self.last_eval: dict[str, Any] | None = None
        # When max_wall_seconds stopped the run: {"iterations_done": k, "iterations_planned": n}
        self.budget_stop: dict[str, int] | None = None
        self.engine: str | None = None  # the rollout engine that ran (`auto` resolved)
        self.metrics: MetricsWriter | None = None
        if self.done:
            return
        if find_state(self.state_dir) is not None:  # about to resume: same experiment only
            check_same_settings(
                self.out / "config.yaml",
                cfg,
                may_change=RESUME_MAY_CHANGE,
                what=str(self.state_dir),
            )
        save_config(cfg, self.out)
        trackers = open_trackers(cfg.trackers, self.out, dataclasses.asdict(cfg), method)
        self.metrics = MetricsWriter(self.out, trackers=trackers)
        exit_after = os.environ.get(ENV_EXIT_AFTER)
        self.exit_after = int(exit_after) if exit_after else None

    def elapsed(self) -> float:
        return self.prior_elapsed + time.perf_counter() - self.start

    def log(self, values: dict[str, Any], *, step: int, split: str) -> dict[str, Any]:
        """One metrics line (``time/elapsed`` added); returns the record written."""
        values = dict(values)
        values["time/elapsed"] = self.elapsed()
        return self.metrics.log(values, step=step, split=split)

    def resume(self, model, optimizer, scheduler) -> dict[str, Any] | None:
        """Restore the last saved state if there is one; else start the metrics afresh."""
        counters = load_state(self.state_dir, model=model, optimizer=optimizer, scheduler=scheduler)
        if counters is None:
            self.metrics.truncate(0)
            return None
        self.metrics.truncate(int(counters["metrics_offset"]))
        self.prior_elapsed = float(counters.get("elapsed", 0.0))
        self.last_eval = counters.get("last_eval")
        print(f"[{self.method}] resumed from {self.state_dir} at {counters}", file=sys.stderr)
        return counters

    def save_state(self, model, optimizer, scheduler, **counters: Any) -> None:
        counters = dict(counters)
        counters["metrics_offset"] = self.metrics.offset
        counters["elapsed"] = self.elapsed()
        counters["last_eval"] = self.last_eval
        save_state(
            self.state_dir, model=model, optimizer=optimizer, scheduler=scheduler, counters=counters
        )

    def maybe_exit(self, step: int) -> None:
        """Test hook: ``RRL_EXIT_AFTER_STEP=k`` kills the process (no cleanup) after step k."""
        if self.exit_after is not None and step >= self.exit_after:
            os._exit(3)

    def over_budget(self) -> bool:
        """True when ``max_wall_seconds`` is set and the run's elapsed time has passed it."""
        budget = self.cfg.max_wall_seconds
        return budget is not None and self.elapsed() >= budget

    def finish(self, model, tokenizer, *, step: int, extra: dict[str, Any] | None = None) -> dict:
        """Final checkpoint, ``done.json``; drop the resume state.

        ``done.json``: ``method``, ``step`` (optimizer steps reached), the last evaluation's
        ``eval_accuracy``/``eval_format_reward``/``eval_examples``, ``wall_seconds``,
        ``stopped_on_budget`` (True when ``max_wall_seconds`` ended the run early, with
        ``iterations_done`` of ``iterations_planned`` in the trainer's unit), ``engine`` (the
        rollout engine that ran: setting ``engine`` with ``auto`` resolved), then ``extra``.

        The same facts, less ``method``, go first into the last ``metrics.jsonl`` line (split
        ``done``, ``step``; ``wall_seconds`` as its ``time/elapsed``): ``done.json`` marks the
        run finished for the workflow and is not committed, ``metrics.jsonl`` is, and
        ``rrl summary`` reads it alone."""
        if self.cfg.save_checkpoint:
            save_checkpoint(model, tokenizer, self.out / "checkpoint")
        last = self.last_eval or {}
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
        done = {"method": self.method, "step": step, **facts}
        done["wall_seconds"] = record["time/elapsed"]
        write_json_atomic(self.out / "done.json", done)
        self.metrics.close()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        return done
