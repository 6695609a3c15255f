"""A rollout worker beside the learner: GRPO's sampling in its own process, overlapped with
training (setting ``rollout_worker: true``, with ``rollout_lag`` L >= 1 or ``max_staleness``).

The worker (:func:`worker_main`, started by :class:`RolloutWorker` with ``torch.multiprocessing``
spawn) loads the policy from ``model_path`` into an engine of its own (on ``worker_device``
when set), one torch thread, and
produces the rollout batches of steps ``start, start + 1, ...`` in order into a bounded queue.
Batch k is sampled with policy version ``max(0, k - L)`` (the weights after that many GRPO
steps), which the learner sends after each update (:meth:`RolloutWorker.publish`); the worker
waits until it has that version, so it runs at most L steps ahead and no sample is more than L
versions old. Questions, engine seeds and reward controls are the functions of
``(seed, step)`` the in-process loop uses (the trainer hands the worker its own
:func:`~reasoning_core.runtime.trainers.grpo.sample_rollout_batch`, so this layer imports no
trainer), so a run with the worker trains on the very batches of the in-process fixed-lag
run: the same metrics apart from ``time/``.

Evaluations: with the fixed lag the worker also evaluates (:class:`WorkerEvaluator`, the
learner's evaluator then): the learner sends the weights to evaluate and keeps the line's
place in the metrics; the worker runs the evaluation one engine call at a time while the
version its next batch needs has not come, and sends the result back through the batch
queue; the learner logs it in its place (lines after it wait until then), so the metrics
and generations equal the in-process run's apart from ``time/``.

Shutdown: :meth:`RolloutWorker.close` stops and joins the worker (the learner's
:class:`WorkerRollouts` calls it on leaving its ``with``); a worker error comes back to the learner as a RuntimeError with the worker's
traceback; the worker is a daemon and also leaves by itself when its parent is gone (a learner
killed by a signal), so no process outlives the run.

Free running (``max_staleness`` S >= 1, ``rollout_lag`` 0): the worker does not wait for a
given version; it samples batch after batch (batch j with the questions and seeds of
``(seed, j)``) with the newest weights it holds, and waits only when batch j would run more
than S batches ahead of the learner's next take (:func:`_ahead`). The learner checks every
batch's version at train time and drops one more than S versions old
(:meth:`RolloutWorker.next_fresh`). Which version samples which batch depends on how fast each
side runs: such a run is not reproducible.

:class:`WorkerRollouts` is the GRPO loop's handle: a context manager that starts the worker
with the first batch it is asked for and stops it on the way out.
"""

from __future__ import annotations

import collections
import copy
import os
import queue
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from reasoning_core.runtime.training.offpolicy import (
    FrozenWeights,
    PolicyVersions,
    staleness_metrics,
)

POLL_SECONDS = 1.0  # how often a waiting side checks that the other is still there
STOP = ("stop",)  # the learner's last message: the worker is to end


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
    make_evaluator: Any = None,
) -> None:
    """The worker process: sample steps ``start ..`` of ``cfg``'s run into ``batches`` as
    ``(step, filled)`` (``filled``: what ``sample_rollout_batch`` returns, its batch carrying
    its policy version), taking versions from ``weights`` as ``(version, taken, state_dict)``
    (``taken``: the batches the learner had taken when it sent them); on an
    error, ``("error", traceback)``; ends on ``stop`` (after the last step too, since the
    batches' tensors are shared through this process until the learner has them), or when
    the learner (``parent``) is gone. ``sample(cfg, tools, rollouts, step, weights)`` samples
    a step (the trainer's ``sample_rollout_batch``).

    With the fixed lag the worker also evaluates: ``("eval", state_dict)`` on ``weights``
    asks for an evaluation of those weights by ``make_evaluator(cfg, task, tokenizer)`` (the
    trainer's evaluator), run one engine call at a time whenever the next batch's version
    has not come yet; its ``(values, records)`` go back as ``("eval", (values, records))``,
    in the order asked."""
    from reasoning_core.runtime.training.policy import load_policy, setup_torch
    from reasoning_core.runtime.training.rollouts import Rollouts, load_questions

    try:
        import envs

        if cfg.worker_device is not None:  # the worker's engine on a device of its own
            cfg = copy.copy(cfg)
            cfg.device = cfg.worker_device
            device = torch.device(cfg.worker_device)
            if device.type == "cuda" and device.index is not None:
                torch.cuda.set_device(device)  # also where an engine allocates by itself
        setup_torch(cfg)
        task = envs.get_task(cfg.task)
        questions = load_questions(cfg, task, 1, "no training questions")
        rollouts = Rollouts.from_config(cfg, task, questions, sync_every=1)
        model, tokenizer = load_policy(cfg)
        tools = WorkerTools(make_engine(cfg, model, tokenizer))
        link = _Link(weights, batches, stop, parent)
        if cfg.max_staleness:
            _run_free(cfg, start, tools, rollouts, link, sample)
        else:
            evals = _Evaluations(make_evaluator(cfg, task, tokenizer), tools.engine, model)
            _run_lagged(cfg, start, versions, tools, rollouts, link, sample, evals)
        # Tensors in the queue are shared through this process: it stays until told to stop.
        while not stop.wait(POLL_SECONDS):
            if not _parent_alive(parent):
                return
    except BaseException:  # noqa: BLE001 - every failure goes back to the learner
        try:
            batches.put(("error", traceback.format_exc()), timeout=POLL_SECONDS)
        except Exception:  # noqa: BLE001 - the learner is gone; nothing to tell
            print(traceback.format_exc(), file=sys.stderr)


@dataclass
class _Link:
    """The worker's side of its queues: ``weights`` in, ``batches`` out, ``stop`` and the
    learner's pid ``parent`` to notice the end by."""

    weights: Any
    batches: Any
    stop: Any
    parent: int

    def stopped(self) -> bool:
        return self.stop.is_set() or not _parent_alive(self.parent)

    def receive(self) -> Any:
        """The next ``(version, taken, state)`` sent, or None after a poll without one or on
        the learner's :data:`STOP` (which wakes a waiting worker at once)."""
        try:
            got = self.weights.get(timeout=POLL_SECONDS)
        except queue.Empty:
            return None
        return None if got == STOP else got

    def receive_all(self) -> list[Any]:
        """Every message sent and not yet received, without waiting (less :data:`STOP`)."""
        out = []
        while True:
            try:
                got = self.weights.get_nowait()
            except queue.Empty:
                return out
            if got != STOP:
                out.append(got)

    def send_eval(self, result: tuple[dict, list]) -> bool:
        """Put an evaluation's ``(values, records)`` into the queue (as :meth:`send`)."""
        while not self.stopped():
            try:
                self.batches.put(("eval", result), timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def send(self, batch: int, filled: Any, version: int) -> bool:
        """Put batch ``batch`` (its samples marked as drawn by ``version``) into the bounded
        queue, waiting for the learner to take one; False when told to stop (or the learner is
        gone) first."""
        if filled is not None:
            filled[0].versions = [version] * len(filled[0].responses)
        while not self.stopped():
            try:
                self.batches.put((batch, filled), timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False


@dataclass
class _EvalJob:
    """One evaluation asked for: its weights, its engine calls to go (:meth:`Evaluator.steps`)
    and the seconds spent syncing the weights before them."""

    weights: FrozenWeights
    steps: Any
    sync_seconds: float = 0.0
    started: bool = False


class _Evaluations:
    """The evaluations the learner asked the worker for, oldest first."""

    def __init__(self, evaluator: Any, engine: Any, model: torch.nn.Module) -> None:
        self.evaluator = evaluator
        self.engine = engine
        self.model = model  # the entropy pass's module, when the engine returns none
        self.jobs: collections.deque[_EvalJob] = collections.deque()

    def add(self, state: dict[str, torch.Tensor]) -> None:
        self.jobs.append(
            _EvalJob(FrozenWeights(state), self.evaluator.steps(self.engine, self.model))
        )

    def advance(self) -> tuple[dict, list] | None:
        """One engine call of the oldest evaluation; its ``(values, records)`` when that was
        its last. The engine is synced to the evaluated weights before every call (sampling
        between two calls syncs others); the module, which only evaluations use, once per
        evaluation."""
        job = self.jobs[0]
        t0 = time.perf_counter()
        self.engine.sync_weights(job.weights)
        if not job.started:
            self.model.load_state_dict(job.weights.state_dict())
            job.started = True
        job.sync_seconds += time.perf_counter() - t0
        try:
            next(job.steps)
        except StopIteration as stop:
            self.jobs.popleft()
            values, records = stop.value
            values["time/sync"] = job.sync_seconds
            return values, records
        return None


def _run_lagged(
    cfg: Any,
    start: int,
    versions: dict[int, dict[str, torch.Tensor]],
    tools: WorkerTools,
    rollouts: Any,
    link: _Link,
    sample: Any,
    evals: _Evaluations,
) -> None:
    """Fixed lag: step k's batch with version ``max(0, k - rollout_lag)`` as soon as that
    version is here; while it is not, the evaluations asked for, an engine call at a time."""
    held = dict(versions)
    step = start
    while not link.stopped():
        for got in link.receive_all():
            _take(got, held, evals)
        need = max(0, step - cfg.rollout_lag)
        if step < cfg.n_grpo_steps and need in held:
            for old in [v for v in held if v < need]:
                del held[old]
            filled = sample(cfg, tools, rollouts, step, FrozenWeights(held[need]))
            if not link.send(step, filled, need):
                return
            step += 1
        elif evals.jobs:  # the learner has not finished that update yet: evaluate meanwhile
            done = evals.advance()
            if done is not None and not link.send_eval(done):
                return
        else:
            got = link.receive()
            if got is not None:
                _take(got, held, evals)


def _take(got: tuple, held: dict[int, dict[str, torch.Tensor]], evals: _Evaluations) -> None:
    """File a message from the learner: a version's weights, or an evaluation asked for."""
    if got[0] == "eval":
        evals.add(got[1])
    else:
        held[got[0]] = got[2]


def _ahead(batch: int, taken: int) -> int:
    """How many batches past the learner's next take (``taken``: the batches it had taken
    when it sent its newest weights) batch ``batch`` is: its staleness when trained, at most,
    if sampled with those weights."""
    return batch - taken


def _run_free(
    cfg: Any, start: int, tools: WorkerTools, rollouts: Any, link: _Link, sample: Any
) -> None:
    """Free running: batch ``start``, ``start + 1``, ... each with the newest weights held,
    waiting only while the next batch would be more than ``max_staleness`` ahead."""
    newest: tuple[int, int, dict[str, torch.Tensor]] | None = None
    batch = start
    while True:
        for got in link.receive_all():  # take every version sent; keep the newest
            newest = got
        while newest is None or _ahead(batch, newest[1]) > cfg.max_staleness:
            if link.stopped():
                return
            newest = link.receive() or newest
        version, _, state = newest
        filled = sample(cfg, tools, rollouts, batch, FrozenWeights(state))
        if not link.send(batch, filled, version):
            return
        batch += 1


class RolloutWorker:
    """The learner's handle on the worker process: :meth:`get` batch j (in order) or, free
    running, :meth:`next_fresh`; :meth:`publish` the weights after each update; :meth:`close`
    at the end. ``start``: the first batch the worker samples; ``dropped``: the batches a
    free-running run has dropped so far (a resumed run's count)."""

    def __init__(
        self,
        cfg: Any,
        start: int,
        versions: dict[int, dict[str, torch.Tensor]],
        make_engine: Any,
        sample: Any,
        dropped: int = 0,
        make_evaluator: Any = None,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.weights = ctx.Queue()
        # The worker runs at most rollout_lag (or max_staleness) batches ahead; one more batch
        # may wait here.
        self.batches = ctx.Queue(maxsize=max(1, cfg.rollout_lag, cfg.max_staleness))
        self.stop = ctx.Event()
        self.taken = start  # the batches the learner has taken (its next one's index)
        self.dropped = dropped
        self.on_eval: Any = None  # called with each evaluation's (values, records)
        self._early: collections.deque = collections.deque()  # batches read while waiting
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
                make_evaluator,
            ),  # fmt: skip
            daemon=True,
            name="rrl-rollout-worker",
        )
        self.process.start()
        print(
            f"[grpo] rollout worker: pid {self.process.pid} (from batch {start + 1})",
            file=sys.stderr,
        )

    def publish(self, version: int, model: torch.nn.Module) -> None:
        """Send the weights of ``version`` (the policy after that many GRPO steps)."""
        self.weights.put((version, self.taken, _cpu_copy(model.state_dict())))

    def evaluate(self, model: torch.nn.Module) -> None:
        """Ask the worker to evaluate ``model``'s weights now; the result reaches
        :attr:`on_eval` while the learner reads the queue (:meth:`get`, :meth:`next_eval`)."""
        self.weights.put(("eval", _cpu_copy(model.state_dict())))

    def _read(self, waiting_for: str) -> tuple[Any, Any]:
        """The worker's next message, ``(batch index or "eval", payload)``, waiting for it.

        Raises:
            RuntimeError: with the worker's traceback when it failed, or when it ended
                without a word (killed).
        """
        while True:
            try:
                got, payload = self.batches.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(
                        f"the rollout worker (pid {self.process.pid}) ended with exit code "
                        f"{self.process.exitcode} before {waiting_for}"
                    ) from None
                continue
            if got == "error":
                raise RuntimeError(f"the rollout worker failed:\n{payload}")
            return got, payload

    def next_eval(self) -> None:
        """Read the queue until the next evaluation comes back (handed to :attr:`on_eval`);
        the batches read meanwhile are kept, in order, for :meth:`get`."""
        while True:
            got, payload = self._read("sending an evaluation back")
            if got == "eval":
                self.on_eval(*payload)
                return
            self._early.append((got, payload))

    def get(self, batch: int) -> Any:
        """Batch ``batch``'s ``sample_rollout_batch`` result, sampled by the worker (the
        worker's batches come in order: ``batch`` is the next); an evaluation that comes back
        meanwhile goes to :attr:`on_eval`.

        Raises:
            RuntimeError: with the worker's traceback when it failed, or when it ended
                without a word (killed).
        """
        while True:
            if self._early:
                got, filled = self._early.popleft()
            else:
                got, filled = self._read(f"sampling step {batch + 1}")
            if got == "eval":
                self.on_eval(*filled)
                continue
            if got != batch:
                raise RuntimeError(f"the rollout worker sent step {got + 1}, expected {batch + 1}")
            self.taken = batch + 1
            return filled

    def next_fresh(self, step: int, max_staleness: int) -> Any:
        """Free running: the next batch no more than ``max_staleness`` versions older than
        ``step`` (the learner's version), dropping (and counting in :attr:`dropped`) every
        older one: none is ever trained on."""
        while True:
            filled = self.get(self.taken)
            if filled is None or step - filled[0].versions[0] <= max_staleness:
                return filled
            self.dropped += 1
            print(
                f"[grpo] step {step + 1}: dropped the rollout batch of version "
                f"{filled[0].versions[0]}, more than max_staleness {max_staleness} old",
                file=sys.stderr,
            )

    def release(self) -> None:
        """Tell the worker to end, without waiting for it (:meth:`close` waits)."""
        if not self.stop.is_set():
            self.stop.set()
            self.weights.put(STOP)  # a worker waiting for weights sees it now, not a poll later

    def close(self) -> None:
        """Stop the worker and wait for it (terminate it when it does not stop in time)."""
        self.release()
        self.process.join(timeout=10 * POLL_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10 * POLL_SECONDS)
        for q in (self.weights, self.batches):
            q.cancel_join_thread()
            q.close()


class WorkerRollouts:
    """Where the GRPO loop's rollout batches come from, as a context manager that stops the
    worker on the way out (an error included): :meth:`batch` samples in-process, or with
    ``rollout_worker`` asks the worker, started with the first batch asked for. ``versions``:
    the policy versions of the fixed lag; ``sample(cfg, t, rollouts, step, sampler)`` and
    ``make_engine`` are the trainer's (this layer imports none). ``extra``: a resumed run's
    saved state."""

    def __init__(
        self,
        cfg: Any,
        versions: PolicyVersions,
        sample: Any,
        make_engine: Any,
        extra: dict[str, Any] | None = None,
        make_evaluator: Any = None,
    ) -> None:
        self.cfg = cfg
        self.versions = versions
        self.sample = sample
        self.make_engine = make_engine
        self.make_evaluator = make_evaluator
        self.worker: RolloutWorker | None = None
        self.dropped = int((extra or {}).get("dropped_batches", 0))

    def __enter__(self) -> WorkerRollouts:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.worker is not None:
            self.worker.close()

    def release(self) -> None:
        """The run needs nothing more from the worker (its evaluations are all back): it ends
        while the learner saves, and :meth:`__exit__` finds it gone or nearly."""
        if self.worker is not None:
            self.worker.release()

    def _started(self, step: int) -> RolloutWorker:
        """The worker, started (from GRPO step ``step``, the loop's next) if not yet."""
        if self.worker is None:
            self.worker = RolloutWorker(
                self.cfg,
                step + self.dropped,  # free running: no batch index is sampled twice
                self.versions.versions,
                self.make_engine,
                self.sample,
                self.dropped,
                self.make_evaluator,
            )
        return self.worker

    def evaluator(self, evaluator: Any, run: Any, step: int) -> Any:
        """The evaluator a run with the fixed-lag worker uses in place of ``evaluator``: the
        worker evaluates (:class:`WorkerEvaluator`); in-process, or free running,
        ``evaluator`` itself. ``step``: the GRPO loop's next step (the worker starts there)."""
        if not self.cfg.worker_evaluates:
            return evaluator
        return WorkerEvaluator(evaluator, run, lambda: self._started(step))

    def batch(self, t: Any, rollouts: Any, step: int) -> Any:
        """Step ``step``'s ``sample_rollout_batch`` result, its batch carrying its versions."""
        cfg = self.cfg
        sampler = self.versions.sampler(step, t.model)
        if not cfg.rollout_worker:
            filled = self.sample(cfg, t, rollouts, step, sampler)
        else:  # sampled beside the learner
            self._started(step).publish(step, t.model)
            if cfg.max_staleness:
                filled = self.worker.next_fresh(step, cfg.max_staleness)
                self.dropped = self.worker.dropped
                return filled
            filled = self.worker.get(step)
        if filled is not None:
            filled[0].versions = [self.versions.version(step)] * len(filled[0].responses)
        return filled

    def metrics(self, versions: list[int], step: int) -> dict[str, float]:
        """The staleness keys of a lagged or free-running run's train line (none in the
        synchronous loop); free running also ``async/dropped_batches``, the run's count."""
        cfg = self.cfg
        out = staleness_metrics(versions, step) if cfg.rollout_lag or cfg.max_staleness else {}
        if cfg.max_staleness:
            out["async/dropped_batches"] = float(self.dropped)
        return out

    def state(self) -> dict[str, Any] | None:
        """What the resumable state keeps: the fixed lag's versions, or a free-running run's
        count of dropped batches (which with the steps gives the worker's next batch)."""
        if self.cfg.max_staleness:
            return {"dropped_batches": self.dropped}
        return self.versions.state()


class WorkerEvaluator:
    """A run's evaluator when the fixed-lag worker evaluates: called as
    :class:`~reasoning_core.runtime.trainers.lifecycle.Evaluator` is, it keeps the ``eval``
    line's place in the metrics (:meth:`RunContext.reserve`) and sends the policy's weights to
    the worker, which evaluates them with the run's own evaluator between its rollout
    batches while the learner trains on; the line, the generations and ``last_eval`` are
    written when the result comes back (:meth:`wait` waits for all). The worker's engine
    holds the very weights the learner's would, and every engine call of an evaluation is
    seeded as in-process, so the lines equal the in-process run's apart from ``time/``."""

    def __init__(self, evaluator: Any, run: Any, worker: Any) -> None:
        self.evaluator = evaluator
        self.run = run
        self.worker = worker  # the started RolloutWorker, when called
        self.pending: collections.deque = collections.deque()  # (step, slot), oldest first

    def __call__(self, engine: Any, model: torch.nn.Module, step: int, run: Any) -> None:
        worker = self.worker()
        worker.on_eval = self._back
        self.pending.append((step, run.reserve()))
        worker.evaluate(model)

    def _back(self, values: dict, records: list) -> None:
        step, slot = self.pending.popleft()
        self.evaluator.record(self.run, step, values, records, slot=slot)

    def wait(self) -> None:
        """Until every evaluation asked for is back and logged."""
        while self.pending:
            self.worker().next_eval()

    def settle(self, wait: bool = False) -> list[int] | None:
        """None while a metrics line waits for an evaluation (the state waits for a later
        iteration; ``wait``: until no line does); else the steps of the evaluations still
        out, all asked for after the last line logged: of the learner's current weights."""
        while wait and self.run.lines_waiting:
            self.worker().next_eval()
        if self.run.lines_waiting:
            return None
        return [step for step, _ in self.pending]


def _cpu_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
