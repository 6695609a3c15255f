"""The free-running rollout worker (``max_staleness`` S >= 1) on the micro world.

Which version samples which batch depends on timing, so these tests assert only what holds
whatever the timing:

* the run trains the requested number of steps, every train line records a staleness of at
  most S and the count of dropped batches, and no process outlives it;
* a batch more than S versions old is dropped and never trained on (the learner's check, fed
  a stale batch on purpose), the next fresh one is;
* a worker failure reaches the learner with the worker's traceback;
* bad combinations of settings are ConfigErrors naming the setting.
(SIGTERM: tests/runtime/trainers/test_rollout_worker.py; a killed free-running run resumed:
tests/runtime/run/test_resume.py.)
"""

from __future__ import annotations

import collections
import multiprocessing
import queue
from types import SimpleNamespace

import pytest
import scripted_rollouts
import torch
import worker_hooks
from micro_world import GRPO, run_trainer, train_lines

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.trainers import grpo
from reasoning_core.runtime.training.async_rollout import RolloutWorker

FREE = {
    **GRPO,
    "rollout_worker": True,
    "max_staleness": 1,
    "save_every": 0,
    "offpolicy_correction": "decoupled",
}


def _steps(lines: list[dict]) -> list[int]:
    return [r["grpo_step"] for r in lines]


def test_free_run_trains_every_step_within_the_bound(world, tmp_path, monkeypatch):
    scripted_rollouts.install(monkeypatch)
    cfg = {**FREE, "worker_device": "cpu"}  # the worker's device given: the same CPU here
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / "free"))
    per_step = GRPO["rollout_batch_size"] // GRPO["train_batch_size"]
    assert _steps(lines) == [s for s in range(1, GRPO["n_grpo_steps"] + 1) for _ in range(per_step)]
    assert all(0 <= r["async/staleness_max"] <= FREE["max_staleness"] for r in lines)
    assert all(r["async/staleness_gt_8"] == 0 for r in lines)
    # The worker waits rather than run ahead of the bound, so nothing is ever dropped.
    assert all(r["async/dropped_batches"] == 0 for r in lines)
    assert [r for r in lines if r["grad_norm"] > 0]
    assert not multiprocessing.active_children()


def _filled(version: int) -> tuple:
    batch = SimpleNamespace(versions=[version] * 4, responses=["r"] * 4)
    return (batch, None, batch, {})


class _Alive:
    pid = 0
    exitcode = None

    def is_alive(self) -> bool:
        return True


def test_next_fresh_drops_the_stale_batches_only():
    worker = RolloutWorker.__new__(RolloutWorker)  # the learner's side, fed by hand
    worker.batches, worker.process, worker.taken, worker.dropped = queue.Queue(), _Alive(), 5, 2
    worker._early = collections.deque()
    for index, version in ((5, 1), (6, 2), (7, 3), (8, 1)):
        worker.batches.put((index, _filled(version)))
    got = worker.next_fresh(step=4, max_staleness=1)
    assert got[0].versions == [3] * 4  # versions 1 and 2 are 3 and 2 steps old: dropped
    assert (worker.taken, worker.dropped) == (8, 4)
    worker.batches.put((9, None))  # dynamic sampling kept nothing: no version to check
    assert worker.next_fresh(step=9, max_staleness=1) is None  # after dropping batch 8
    assert (worker.taken, worker.dropped) == (10, 5)


def test_a_dropped_batch_is_never_trained_on(world, tmp_path, monkeypatch):
    """The learner is handed batch 2 marked as sampled by a version far older than the bound:
    it drops it, counts it on the later lines, trains on the next batch instead and still
    trains every step."""
    scripted_rollouts.install(monkeypatch)
    real_get = RolloutWorker.get

    def get(self, batch):
        filled = real_get(self, batch)
        if batch == 2:
            filled[0].versions = [-10] * len(filled[0].versions)
        return filled

    monkeypatch.setattr(RolloutWorker, "get", get)
    trained = []
    real_tokens = grpo.rollout_tokens
    monkeypatch.setattr(
        grpo,
        "rollout_tokens",
        lambda ro, tok: trained.append(list(ro.versions)) or real_tokens(ro, tok),
    )
    lines = train_lines(run_trainer(grpo, FREE, world, tmp_path / "free"))
    assert len(trained) == GRPO["n_grpo_steps"]
    assert all(min(v) >= 0 for v in trained)
    assert sorted({r["grpo_step"] for r in lines}) == list(range(1, GRPO["n_grpo_steps"] + 1))
    dropped = [r["async/dropped_batches"] for r in lines]
    assert dropped == sorted(dropped) and dropped[0] == 0 and dropped[-1] == 1
    assert all(r["async/staleness_max"] <= FREE["max_staleness"] for r in lines)
    assert not multiprocessing.active_children()


def test_a_free_worker_failure_reaches_the_learner(world, tmp_path, monkeypatch):
    monkeypatch.setattr(grpo, "engine_factory", lambda: worker_hooks.broken_engine)
    with pytest.raises(RuntimeError, match="(?s)rollout worker failed.*Traceback.*could not start"):
        grpo.train(grpo.GRPOConfig(**{**FREE, "model_path": str(world)}), str(tmp_path / "run"))
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_staleness": -1}, "max_staleness"),
        ({"rollout_worker": False}, "max_staleness.*rollout_worker"),
        ({"rollout_lag": 1}, "rollout_lag"),
        ({"sync_every": 2}, "sync_every"),
        ({"rollout_worker": False, "max_staleness": 0, "worker_device": "cpu"}, "worker_device"),
        ({"worker_device": "abacus:0"}, "worker_device"),
    ],
)
def test_bad_free_settings_are_named(world, change, message):
    with pytest.raises(ConfigError, match=message):
        grpo.GRPOConfig(**{**FREE, "model_path": str(world), **change}).validate()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is of a CPU-only machine's")
def test_a_cuda_worker_device_is_refused_without_a_gpu(world):
    with pytest.raises(ConfigError, match="worker_device.*no CUDA GPU"):
        grpo.GRPOConfig(**{**FREE, "model_path": str(world), "worker_device": "cuda:1"}).validate()


def test_free_running_is_refused_under_torchrun(world):
    cfg = grpo.GRPOConfig(**{**FREE, "model_path": str(world), "rollout_seeding": "group"})
    cfg.validate()
    with pytest.raises(ConfigError, match="max_staleness.*torchrun"):
        cfg.check_world(2)
