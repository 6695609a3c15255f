"""The grading worker processes of `envs.grader.grade_batch`: a worker is a fresh interpreter
started with `subprocess` that scores one item at a time (`_worker_main`); the pool
(`Pool`) dispatches items, enforces each one's deadline by killing and replacing the worker
that misses it, and scores 0 what timed out, raised or lost its worker (counted in the call's
`GradeStats`).

Imports only `envs.grade_stats` of the grading modules: the reward functions reach a worker
pickled by reference, and ask `in_worker()` whether they run in one (there the kill is the
time limit, so math-verify runs in-process and without its own alarm)."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import time
from collections import deque
from multiprocessing.connection import Connection, wait

from envs.grade_stats import ZERO, check_result

# The pool's messages go to the logger of the module users call (`envs.grader`).
log = logging.getLogger("envs.grader")

#: a worker that has not signalled readiness this long after start is treated as broken
STARTUP_TIMEOUT = 120.0

# Set in a worker process by `_worker_main`.
_IN_WORKER = False


def in_worker() -> bool:
    """Does this process grade items for a pool (see the module docstring)?"""
    return _IN_WORKER


# ----------------------------------------------------------------------------- worker side


def _worker_main(read_fd: int, write_fd: int) -> None:
    """Entry point of a grading worker process (see `_Worker`)."""
    global _IN_WORKER
    _IN_WORKER = True  # the parent's hard kill is the time limit: no alarm, no further worker
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Import math-verify (sympy, the LaTeX parser) and run it once before reporting ready, so
    # that the per-item limit times grading and not a fresh worker's ~0.3 s (more under load)
    # first import, which could otherwise score a correct answer 0 after each replacement.
    try:
        from math_verify import parse, verify

        verify(
            parse("\\boxed{0.5}", parsing_timeout=None),
            parse("\\boxed{1/2}", parsing_timeout=None),
            timeout_seconds=None,
        )
    except Exception:  # grading a math item will report the problem
        pass
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    outbox.send(("ready", None, None))
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, fn_bytes, response, ground_truth = msg
        try:
            fn = pickle.loads(fn_bytes)
            result = check_result(fn(response, ground_truth))
            outbox.send(("ok", index, result))
        except Exception as e:  # a failing reward function must not take the worker down
            outbox.send(("error", index, f"{type(e).__name__}: {str(e)[:200]}"))


# ----------------------------------------------------------------------------- parent side

_WORKER_CODE = (
    "import json, os, sys; sys.path[:0] = json.loads(os.environ['RRL_GRADER_SYS_PATH']); "
    "from envs.grade_pool import _worker_main; _worker_main(int(sys.argv[1]), int(sys.argv[2]))"
)


class _Worker:
    """A grading process started with `subprocess` (a fresh interpreter: it neither inherits
    the trainer's threads or CUDA state, as `fork` would, nor re-runs the caller's `__main__`,
    as `spawn`/`forkserver` do), talking over two pipes."""

    def __init__(self):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        env["RRL_GRADER_SYS_PATH"] = json.dumps([p for p in sys.path if p])
        env.setdefault("OMP_NUM_THREADS", "1")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.outbox = Connection(to_child_w, readable=False)
        self.conn = Connection(from_child_r, writable=False)
        self.started = time.monotonic()
        self.ready = False
        self.job: tuple[int, float] | None = None  # (item index, dispatch time)

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # already gone
            pass
        self._close()

    def _close(self) -> None:
        for c in (self.outbox, self.conn):
            try:
                c.close()
            except OSError:
                pass

    def stop(self) -> None:
        try:
            self.outbox.send(None)
            self.proc.wait(timeout=1)
            self._close()
        except Exception:
            self.kill()


class Pool:
    """A fixed number of single-item workers that can be killed and replaced one by one."""

    #: this many workers in a row dying before they are ready means the pool cannot start
    MAX_START_FAILURES = 3

    def __init__(self, num_workers: int):
        self.num_workers = num_workers
        self.start_failures = 0
        self.workers = [_Worker() for _ in range(num_workers)]

    def replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        new = _Worker()
        self.workers[self.workers.index(worker)] = new
        return new

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def broken(self) -> bool:
        if self.start_failures >= self.MAX_START_FAILURES:
            return True
        now = time.monotonic()
        return not any(w.ready for w in self.workers) and all(
            now - w.started > STARTUP_TIMEOUT for w in self.workers
        )

    def run(self, fn_bytes: bytes, items: dict[int, tuple[str, str]], timeout: float, out, stats):
        """Score `items` (index -> (response, ground_truth)) into `out[index]`."""
        # A previous call interrupted mid-batch (e.g. KeyboardInterrupt) can leave workers busy
        # with items of that call; their answers must not land in this call's results.
        for w in list(self.workers):
            if w.job is not None:
                self.replace(w)
        queue = deque(items)
        while queue or any(w.job for w in self.workers):
            for w in self.workers:
                if w.ready and w.job is None and queue:
                    index = queue.popleft()
                    try:
                        w.outbox.send((index, fn_bytes, *items[index]))
                        w.job = (index, time.monotonic())
                    except (OSError, ValueError):  # broken pipe: the worker died while idle
                        queue.appendleft(index)
                        self.replace(w)
            if queue and self.broken():
                log.error(
                    "grade_batch: grading workers fail to start (exit codes %s); scoring %d "
                    "items as 0",
                    [w.proc.poll() for w in self.workers],
                    len(queue),
                )
                for index in queue:
                    out[index] = dict(ZERO)
                    stats._record_error(index, "the grading workers failed to start")
                queue.clear()
                continue
            now = time.monotonic()
            deadlines = [w.job[1] + timeout for w in self.workers if w.job]
            wait_for = min(deadlines) - now if deadlines else 0.5
            ready = wait([w.conn for w in self.workers], timeout=max(0.0, min(wait_for, 0.5)))
            for w in list(self.workers):
                if w.conn in ready:
                    self._receive(w, out, stats)
            now = time.monotonic()
            for w in list(self.workers):
                if w.job and now - w.job[1] > timeout:
                    index, started = w.job
                    out[index] = dict(ZERO)
                    stats._record_timeout(index)
                    stats.latencies.append(now - started)
                    self.replace(w)

    def _receive(self, w: _Worker, out, stats) -> None:
        try:
            kind, index, payload = w.conn.recv()
        except (EOFError, OSError):  # the worker died (crash, OOM kill, failed start)
            if w.job:
                out[w.job[0]] = dict(ZERO)
                try:
                    code = w.proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:  # its pipe closed but it still runs
                    code = None
                stats._record_error(w.job[0], f"the grading worker died (exit code {code})")
                stats.latencies.append(time.monotonic() - w.job[1])
            if not w.ready:
                self.start_failures += 1
            self.replace(w)
            return
        if kind == "ready":
            w.ready = True
            self.start_failures = 0
            return
        if w.job is None or w.job[0] != index:  # not the item this worker was given
            log.warning("grade_batch: ignoring a stale answer for item %s", index)
            return
        latency = time.monotonic() - w.job[1]
        w.job = None
        stats.latencies.append(latency)
        if kind == "ok":
            out[index] = payload
        else:
            out[index] = dict(ZERO)
            stats._record_error(index, payload)
            log.debug("grade_batch: reward_fn raised on item %d: %s", index, payload)
