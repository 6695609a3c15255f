"""Batch grading with a hard per-item time limit in worker processes.

`grade_batch(reward_fn, responses, ground_truths, timeout=5.0, num_workers=None)` returns one
result dict per pair, in input order, as a `GradeResults` list whose `.stats` says how many items
were decided in-process, sent to workers, timed out or raised.

Nothing is silent: an item that times out or raises scores 0 (reward, format and answer), and
the call counts it, names it and warns once:

    out = grade_batch(r1_zero_reward_fn, responses, truths)
    rewards = [r["reward"] for r in out]       # a plain list of dicts, input order
    out.timeouts, out.errors                   # counts of this call (ints)
    out.stats.timed_out, out.stats.failed      # input indices of those items
    metrics.update(out.metrics())              # {"grade/timeouts": n, "grade/errors": m}

`metrics()` gives these counts under the keys that train and eval metric lines and
`summary.json` use for them (`METRIC_KEYS`).
When either count is non-zero the call logs one warning (`GradeStats.warning()`, on the
`envs.grader` logger) with the counts, the limit and the first error message. Keep the returned
object (or its `.stats`) before converting it: `list(out)` and slices are plain lists.

How it works:

1. Items the reward function can decide cheaply (its optional `fast(response, ground_truth)`
   attribute returns a dict, see `envs.rewards`) are scored in-process: format failures,
   string-equal answers, unequal integers. For typical batches that is most of them.
2. The rest go, one at a time, to a persistent pool of worker processes (fresh interpreters
   started with `subprocess`: they never inherit the trainer's threads or CUDA state and never
   re-run the caller's `__main__`; a replacement starts in a fraction of a second while the
   other workers keep grading). Each item has a deadline of `timeout` seconds from dispatch; a
   worker that misses it is killed with SIGKILL and replaced, and the item scores 0 (counted in
   `stats.timeouts`). A reward function that raises, or a worker that dies, scores 0 (counted
   in `stats.errors`; the first error's message is kept in `stats.first_error`).

math-verify's own `signal.alarm` timeout is switched off in the workers: the hard kill is the
time limit, which also stops code stuck in C (huge integer powers), where an alarm cannot.

`reward_fn` must be picklable by reference from an importable module (a module-level function
or a `functools.partial` of one); one defined in the caller's `__main__` is refused.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from envs.rewards import ZERO

log = logging.getLogger(__name__)

#: the metric keys of `GradeStats.metrics()`, logged on every train and eval line
METRIC_KEYS = ("grade/timeouts", "grade/errors")

DEFAULT_TIMEOUT = 5.0
#: a worker that has not signalled readiness this long after start is treated as broken
STARTUP_TIMEOUT = 120.0


@dataclass
class GradeStats:
    """What happened in one `grade_batch` call. Latencies are per item, in seconds.

    Every item that scored 0 because grading failed is counted once, in `timeouts` or in
    `errors`, and its input index is in `timed_out` or `failed` (sorted).
    """

    n: int = 0
    fast: int = 0  # decided in-process without math-verify
    pooled: int = 0  # sent to worker processes
    timeouts: int = 0  # killed at the time limit, scored 0
    errors: int = 0  # reward_fn raised (in-process or in a worker) or the worker died, scored 0
    seconds: float = 0.0
    timeout: float | None = None  # the per-item limit of the call, in seconds
    timed_out: list[int] = field(default_factory=list)  # input indices of the timeouts
    failed: list[int] = field(default_factory=list)  # input indices of the errors
    first_error: str | None = None  # "item i: ExcType: message" of the first error
    latencies: list[float] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "fast": self.fast,
            "pooled": self.pooled,
            "timeouts": self.timeouts,
            "errors": self.errors,
            "seconds": self.seconds,
        }

    def metrics(self, prefix: str = "grade/") -> dict[str, int]:
        """`{"grade/timeouts": ..., "grade/errors": ...}` (`METRIC_KEYS`), for metric lines."""
        return {f"{prefix}timeouts": self.timeouts, f"{prefix}errors": self.errors}

    def warning(self) -> str | None:
        """A one-line warning when an item timed out or raised (None when none did)."""
        if not (self.timeouts or self.errors):
            return None
        parts = []
        if self.timeouts:
            limit = f" (limit {self.timeout:g} s)" if self.timeout is not None else ""
            parts.append(f"{self.timeouts} timed out{limit}")
        if self.errors:
            first = f" (first: {self.first_error})" if self.first_error else ""
            parts.append(f"{self.errors} raised or lost their worker{first}")
        return f"grade_batch: of {self.n} items, {' and '.join(parts)}; they scored 0"

    def _record_error(self, index: int, message: str) -> None:
        self.errors += 1
        self.failed.append(index)
        if self.first_error is None:
            self.first_error = f"item {index}: {message}"

    def _record_timeout(self, index: int) -> None:
        self.timeouts += 1
        self.timed_out.append(index)


class GradeResults(list):
    """A list of reward dicts (input order) with the call's `GradeStats` as `.stats`.

    `timeouts` and `errors` are the call's counts of items that scored 0 because grading timed
    out or raised; `metrics()` gives them under the keys `grade/timeouts`, `grade/errors`.
    """

    stats: GradeStats

    @property
    def timeouts(self) -> int:
        return self.stats.timeouts

    @property
    def errors(self) -> int:
        return self.stats.errors

    def metrics(self, prefix: str = "grade/") -> dict[str, int]:
        """See `GradeStats.metrics`."""
        return self.stats.metrics(prefix)


# ----------------------------------------------------------------------------- worker side


def _worker_main(read_fd: int, write_fd: int) -> None:
    """Entry point of a grading worker process (see `_Worker`)."""
    from multiprocessing.connection import Connection

    from envs import rewards

    rewards.MATH_VERIFY_TIMEOUT = None  # the parent's hard kill is the time limit
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Import math-verify (sympy, the LaTeX parser) and run it once before reporting ready, so
    # that the per-item limit times grading and not a fresh worker's ~0.3 s (more under load)
    # first import, which could otherwise score a correct answer 0 after each replacement.
    try:
        rewards.math_verify_match("1/2", "0.5")
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
            result = _check_result(fn(response, ground_truth))
            outbox.send(("ok", index, result))
        except Exception as e:  # a failing reward function must not take the worker down
            outbox.send(("error", index, f"{type(e).__name__}: {str(e)[:200]}"))


def _check_result(result) -> dict[str, float]:
    return {k: float(result[k]) for k in ("reward", "format_reward", "answer_reward")}


# ----------------------------------------------------------------------------- parent side

_WORKER_CODE = (
    "import json, os, sys; sys.path[:0] = json.loads(os.environ['RRL_GRADER_SYS_PATH']); "
    "from envs.grader import _worker_main; _worker_main(int(sys.argv[1]), int(sys.argv[2]))"
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


class _Pool:
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


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _shutdown() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None


atexit.register(_shutdown)


def default_num_workers() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2))


def grade_batch(
    reward_fn: Callable[[str, str], dict],
    responses: Sequence[str],
    ground_truths: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    num_workers: int | None = None,
) -> GradeResults:
    """Score `reward_fn(response, ground_truth)` for each pair; results in input order.

    Args:
        reward_fn: picklable `fn(response, ground_truth) -> {"reward","format_reward",
            "answer_reward"}`; an optional `fast` attribute decides easy items in-process.
        responses, ground_truths: equal-length sequences of strings.
        timeout: per-item limit in seconds (from dispatch to a worker); an item over it is
            killed and scores 0.
        num_workers: size of the persistent worker pool (default: min(4, usable CPUs)). The
            pool is started on first need and kept for later calls; it is resized when a
            call asks for a different size.

    Returns:
        `GradeResults`: a list of dicts of floats in input order, with `.stats` (`GradeStats`),
        `.timeouts` and `.errors` (how many items scored 0 because grading timed out or
        raised) and `.metrics()` (`{"grade/timeouts": ..., "grade/errors": ...}`). When
        either count is non-zero one warning is logged (see `GradeStats.warning`).
    """
    if len(responses) != len(ground_truths):
        raise ValueError(
            f"grade_batch: {len(responses)} responses but {len(ground_truths)} ground truths"
        )
    if timeout <= 0:
        raise ValueError("grade_batch: timeout must be positive")
    t0 = time.monotonic()
    stats = GradeStats(n=len(responses), timeout=timeout)
    out: list[dict | None] = [None] * len(responses)
    fast = getattr(reward_fn, "fast", None)
    pending: dict[int, tuple[str, str]] = {}
    for i, (response, gt) in enumerate(zip(responses, ground_truths, strict=True)):
        if fast is not None:
            t = time.monotonic()
            try:
                decided = fast(response, gt)
            except Exception as e:  # e.g. a malformed ground truth
                log.debug("grade_batch: fast path raised on item %d: %s", i, e)
                decided = dict(ZERO)
                stats._record_error(i, f"{type(e).__name__}: {str(e)[:200]}")
            if decided is not None:
                out[i] = _check_result(decided)
                stats.fast += 1
                stats.latencies.append(time.monotonic() - t)
                continue
        pending[i] = (response, gt)

    if pending:
        target = getattr(reward_fn, "func", reward_fn)  # see through functools.partial
        if getattr(target, "__module__", None) == "__main__":
            raise TypeError(
                f"grade_batch: reward_fn {reward_fn!r} is defined in __main__, which the worker "
                "processes cannot import; define it in a module"
            )
        try:
            fn_bytes = pickle.dumps(reward_fn)
        except Exception as e:
            raise TypeError(
                f"grade_batch: reward_fn {reward_fn!r} is not picklable (use a module-level "
                "function or functools.partial of one)"
            ) from e
        stats.pooled = len(pending)
        global _POOL
        with _POOL_LOCK:
            n = num_workers or default_num_workers()
            if _POOL is None or _POOL.num_workers != n:
                _shutdown()
                _POOL = _Pool(n)
            _POOL.run(fn_bytes, pending, timeout, out, stats)

    stats.seconds = time.monotonic() - t0
    stats.timed_out.sort()
    stats.failed.sort()
    message = stats.warning()
    if message:
        log.warning(message)
    results = GradeResults(out)
    results.stats = stats
    return results
