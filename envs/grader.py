"""Batch grading with a hard per-item time limit in worker processes.

`grade_batch(reward_fn, responses, ground_truths, timeout=5.0, num_workers=None)` returns one
result dict per pair, in input order, as a `GradeResults` list whose `.stats` says how many items
were decided in-process, sent to workers, timed out or raised.

Nothing is silent: an item that times out or raises scores 0 (reward, format and answer), and
the call counts it, names it and warns once (the counts: `envs.grade_stats`; the worker
processes: `envs.grade_pool`):

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
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence

from envs.grade_pool import Pool
from envs.grade_stats import METRIC_KEYS, ZERO, GradeResults, GradeStats, check_result

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TIMEOUT",
    "METRIC_KEYS",
    "GradeResults",
    "GradeStats",
    "grade_batch",
    "grade_one",
]

DEFAULT_TIMEOUT = 5.0


_POOL: Pool | None = None
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
                out[i] = check_result(decided)
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
                _POOL = Pool(n)
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


def grade_one(
    reward_fn: Callable[[str, str], dict], response: str, ground_truth: str, *, timeout: float
) -> dict[str, float]:
    """`reward_fn(response, ground_truth)` in a grading worker, killed after `timeout` seconds
    (then 0, with `grade_batch`'s warning). Uses the pool already running, whatever its size,
    so that single calls between batches do not resize it."""
    with _POOL_LOCK:
        size = _POOL.num_workers if _POOL is not None else None
    return grade_batch(reward_fn, [response], [ground_truth], timeout=timeout, num_workers=size)[0]
