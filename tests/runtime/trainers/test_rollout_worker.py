"""The rollout worker beside the learner (``rollout_worker: true``) on the micro world.

* it samples the very batches of the in-process fixed-lag run: equal metrics apart from
  ``time/`` keys, and equal final weights;
* a failure in the worker reaches the learner as an error with the worker's traceback, and
  the worker is gone afterwards;
* a learner killed by SIGTERM leaves no worker process behind, fixed-lag or free-running;
* the worker needs a lag of at least 1.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import scripted_rollouts
import torch
import worker_hooks
from micro_world import GRPO, record_calls, run_trainer, sets, train_lines, without_time
from project_root import ROOT

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.folder import RunContext
from reasoning_core.runtime.trainers import grpo, lifecycle
from reasoning_core.runtime.training.async_rollout import POLL_SECONDS, STOP, RolloutWorker, _Link

LAGGED = {**GRPO, "rollout_lag": 1, "save_every": 0, "offpolicy_correction": "decoupled"}


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run / "checkpoint" / "model.safetensors")


def test_worker_trains_on_the_in_process_lagged_batches(world, tmp_path, monkeypatch):
    scripted_rollouts.install(monkeypatch)  # the worker process scripts its rollouts too
    inline = run_trainer(grpo, LAGGED, world, tmp_path / "inline")
    learner_evals = record_calls(monkeypatch, lifecycle.Evaluator, "__call__")
    order = _record_order(monkeypatch)
    beside = run_trainer(grpo, {**LAGGED, "rollout_worker": True}, world, tmp_path / "worker")
    assert learner_evals == []  # the worker evaluated
    # Told to end once the last evaluation was back, before the final save; joined after it.
    assert order[:2] == ["release", "finish"]
    # Every line in its place, the evaluations the worker ran (steps 0, 4, 8) included.
    assert without_time(beside) == without_time(inline)
    assert [r["step"] for r in inline if r["split"] == "eval"] == [0, 4, 8]
    for step in (0, 4, 8):
        name = f"generations/step_{step:06d}.jsonl"
        assert (tmp_path / "worker" / name).read_text() == (tmp_path / "inline" / name).read_text()
    assert [r for r in train_lines(inline) if r["grad_norm"] > 0]
    want, got = _weights(tmp_path / "inline"), _weights(tmp_path / "worker")
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert not multiprocessing.active_children()


def _record_order(monkeypatch) -> list[str]:
    """The order of the worker's releases and the run folder's finish."""
    order: list[str] = []
    release, finish = RolloutWorker.release, RunContext.finish
    monkeypatch.setattr(
        RolloutWorker, "release", lambda self: order.append("release") or release(self)
    )
    monkeypatch.setattr(
        RunContext, "finish", lambda self, *a, **k: order.append("finish") or finish(self, *a, **k)
    )
    return order


def test_the_stop_message_wakes_the_worker_and_is_never_taken_as_weights():
    link = _Link(weights=queue.Queue(), batches=queue.Queue(), stop=threading.Event(), parent=0)
    link.weights.put(STOP)
    t0 = time.perf_counter()
    assert link.receive() is None
    assert time.perf_counter() - t0 < POLL_SECONDS  # not a poll's timeout: the message itself
    link.weights.put((1, 1, {}))
    link.weights.put(STOP)
    link.weights.put((2, 2, {}))
    assert link.receive_all() == [(1, 1, {}), (2, 2, {})]


def test_a_worker_failure_reaches_the_learner(world):
    cfg = grpo.GRPOConfig(**{**LAGGED, "model_path": str(world), "rollout_worker": True})
    model = torch.nn.Linear(2, 2)
    worker = RolloutWorker(
        cfg, 0, {0: model.state_dict()}, worker_hooks.broken_engine, grpo.sample_rollout_batch
    )
    try:
        with pytest.raises(RuntimeError, match="could not start"):
            worker.get(0)
    finally:
        worker.close()
    assert not worker.process.is_alive()


def test_a_failing_run_stops_its_worker(world, tmp_path, monkeypatch):
    monkeypatch.setattr(grpo, "engine_factory", lambda: worker_hooks.broken_engine)
    with pytest.raises(RuntimeError, match="rollout worker failed"):
        grpo.train(
            grpo.GRPOConfig(**{**LAGGED, "model_path": str(world), "rollout_worker": True}),
            str(tmp_path / "run"),
        )
    assert not multiprocessing.active_children()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # exited; only its parent's reaping is left


# The free-running worker (max_staleness) instead of the fixed lag.
FREE = {**LAGGED, "rollout_lag": 0, "max_staleness": 1}


@pytest.mark.parametrize("base", [LAGGED, FREE], ids=["lagged", "free"])
def test_sigterm_leaves_no_worker_behind(world, tmp_path, base):
    cfg = {**base, "rollout_worker": True, "n_grpo_steps": 200, "model_path": str(world)}
    log = tmp_path / "stderr.txt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "reasoning_core.runtime.cli", "grpo", *sets(cfg)]
    with log.open("w") as err:
        learner = subprocess.Popen(
            [*cmd, "--out", str(tmp_path / "run")], cwd=ROOT, env=env, stderr=err
        )
        try:
            pid = None
            for _ in range(600):  # the worker starts with the first step
                text = log.read_text()
                if "rollout worker: pid " in text:
                    pid = int(text.split("rollout worker: pid ")[1].split()[0])
                    break
                assert learner.poll() is None, text[-2000:]
                time.sleep(0.5)
            assert pid is not None and not _gone(pid)
            learner.send_signal(signal.SIGTERM)
            learner.wait(timeout=60)
            for _ in range(120):  # the worker notices within a poll or a rollout
                if _gone(pid):
                    break
                time.sleep(0.5)
            assert _gone(pid), f"worker {pid} outlived its learner"
        finally:
            if learner.poll() is None:
                learner.kill()


def test_the_worker_needs_a_lag(world):
    with pytest.raises(ConfigError, match="rollout_worker"):
        grpo.GRPOConfig(
            **{**GRPO, "model_path": str(world), "rollout_worker": True, "rollout_lag": 0}
        ).validate()
