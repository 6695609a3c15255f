"""A rollout worker beside the learner: GRPO's sampling in its own process, overlapped with
training (setting ``rollout_worker: true``, with ``rollout_lag`` L >= 1).

The worker (:func:`worker_main`, started by :class:`RolloutWorker` with ``torch.multiprocessing``
spawn) loads the policy from ``model_path`` into an engine of its own, one torch thread, and
produces the rollout batches of steps ``start, start + 1, ...`` in order into a bounded queue.
Batch k is sampled with policy version ``max(0, k - L)`` (the weights after that many GRPO
steps), which the learner sends after each update (:meth:`RolloutWorker.publish`); the worker
waits until it has that version, so it runs at most L steps ahead and no sample is more than L
versions old. Questions, engine seeds and reward controls are the functions of
``(seed, step)`` the in-process loop uses (the trainer hands the worker its own
:func:`~reasoning_core.runtime.trainers.grpo.sample_rollout_batch`, so this layer imports no
trainer), so a run with the worker trains on the very batches of the in-process fixed-lag
run: the same metrics apart from ``time/``.

Shutdown: :meth:`RolloutWorker.close` stops and joins the worker (the learner calls it in a
``finally``); a worker error comes back to the learner as a RuntimeError with the worker's
traceback; the worker is a daemon and also leaves by itself when its parent is gone (a learner
killed by a signal), so no process outlives the run.
"""

from __future__ import annotations

import os
import queue
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from reasoning_core.runtime.training.offpolicy import FrozenWeights

POLL_SECONDS = 1.0  # how often a waiting side checks that the other is still there


@dataclass
class WorkerTools:
    """What :func:`~reasoning_core.runtime.trainers.grpo.sample_rollout_batch` reads of a
    trainer's setup: the engine."""

    engine: Any


def _parent_alive(parent: int) -> bool:
    return os.getppid() == parent


def worker_main(
    cfg: Any,
    start: int,
    versions: dict[int, dict[str, torch.Tensor]],
    weights: Any,
    batches: Any,
    stop: Any,
    parent: int,
    make_engine: Any,
    sample: Any,
) -> None:
    """The worker process: sample steps ``start ..`` of ``cfg``'s run into ``batches`` as
    ``(step, filled)`` (``filled``: what ``sample_rollout_batch`` returns, its batch carrying
    its policy version), taking versions from ``weights`` as ``(version, state_dict)``; on an
    error, ``("error", traceback)``; ends on ``stop`` (after the last step too, since the
    batches' tensors are shared through this process until the learner has them), or when
    the learner (``parent``) is gone. ``sample(cfg, tools, rollouts, step, weights)`` samples
    a step (the trainer's ``sample_rollout_batch``)."""
    from reasoning_core.runtime.training.policy import load_policy, setup_torch
    from reasoning_core.runtime.training.rollouts import Rollouts, load_questions

    try:
        import envs

        setup_torch(cfg)
        task = envs.get_task(cfg.task)
        questions = load_questions(cfg, task, 1, "no training questions")
        rollouts = Rollouts.from_config(cfg, task, questions, sync_every=1)
        model, tokenizer = load_policy(cfg)
        tools = WorkerTools(make_engine(cfg, model, tokenizer))
        held = dict(versions)
        for step in range(start, cfg.n_grpo_steps):
            need = max(0, step - cfg.rollout_lag)
            while need not in held:  # the learner has not finished that update yet
                if stop.is_set() or not _parent_alive(parent):
                    return
                try:
                    version, state = weights.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    continue
                held[version] = state
            for old in [v for v in held if v < need]:
                del held[old]
            filled = sample(cfg, tools, rollouts, step, FrozenWeights(held[need]))
            if filled is not None:
                filled[0].versions = [need] * len(filled[0].responses)
            while True:  # the queue is bounded: wait for the learner to take a batch
                if stop.is_set() or not _parent_alive(parent):
                    return
                try:
                    batches.put((step, filled), timeout=POLL_SECONDS)
                    break
                except queue.Full:
                    continue
        # Tensors in the queue are shared through this process: it stays until told to stop.
        while not stop.wait(POLL_SECONDS):
            if not _parent_alive(parent):
                return
    except BaseException:  # noqa: BLE001 - every failure goes back to the learner
        try:
            batches.put(("error", traceback.format_exc()), timeout=POLL_SECONDS)
        except Exception:  # noqa: BLE001 - the learner is gone; nothing to tell
            print(traceback.format_exc(), file=sys.stderr)


class RolloutWorker:
    """The learner's handle on the worker process: :meth:`get` step k's batch (in order),
    :meth:`publish` the weights after each update, :meth:`close` at the end."""

    def __init__(
        self,
        cfg: Any,
        start: int,
        versions: dict[int, dict[str, torch.Tensor]],
        make_engine: Any,
        sample: Any,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.weights = ctx.Queue()
        # The worker runs at most rollout_lag steps ahead; one more batch may wait here.
        self.batches = ctx.Queue(maxsize=max(1, cfg.rollout_lag))
        self.stop = ctx.Event()
        shared = {v: _cpu_copy(state) for v, state in versions.items()}
        self.process = ctx.Process(
            target=worker_main,
            args=(
                cfg,
                start,
                shared,
                self.weights,
                self.batches,
                self.stop,
                os.getpid(),
                make_engine,
                sample,
            ),  # fmt: skip
            daemon=True,
            name="rrl-rollout-worker",
        )
        self.process.start()
        print(f"[grpo] rollout worker: pid {self.process.pid}", file=sys.stderr)

    def publish(self, version: int, model: torch.nn.Module) -> None:
        """Send the weights of ``version`` (the policy after that many GRPO steps)."""
        self.weights.put((version, _cpu_copy(model.state_dict())))

    def get(self, step: int) -> Any:
        """Step ``step``'s ``sample_rollout_batch`` result, sampled by the worker.

        Raises:
            RuntimeError: with the worker's traceback when it failed, or when it ended
                without a word (killed).
        """
        while True:
            try:
                got, filled = self.batches.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(
                        f"the rollout worker (pid {self.process.pid}) ended with exit code "
                        f"{self.process.exitcode} before sampling step {step + 1}"
                    ) from None
                continue
            if got == "error":
                raise RuntimeError(f"the rollout worker failed:\n{filled}")
            if got != step:
                raise RuntimeError(f"the rollout worker sent step {got + 1}, expected {step + 1}")
            return filled

    def close(self) -> None:
        """Stop the worker and wait for it (terminate it when it does not stop in time)."""
        self.stop.set()
        self.process.join(timeout=10 * POLL_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10 * POLL_SECONDS)
        for q in (self.weights, self.batches):
            q.cancel_join_thread()
            q.close()


def _cpu_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
