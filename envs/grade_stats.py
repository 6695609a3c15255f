"""What one `grade_batch` call reports: `GradeStats` (counts, indices, latencies) and
`GradeResults` (the reward dicts in input order, with the stats), and `METRIC_KEYS`, the keys
under which train and eval metric lines and `summary.json` carry the counts
(`envs.grader` re-exports all three); and one item's result: `ZERO`, the score of a failed
item, and `check_result`, a reward function's dict as plain floats.

The bottom of the grading modules: it imports none of them. Above it `envs.grade_pool` (the
worker processes), then `envs.grader` (`grade_batch`), then `envs.rewards` (the reward
functions, which call `envs.grader` for the hard time limit)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: the metric keys of `GradeStats.metrics()`, logged on every train and eval line
METRIC_KEYS = ("grade/timeouts", "grade/errors")

#: the keys of every reward function's result
RESULT_KEYS = ("reward", "format_reward", "answer_reward")

#: the result of an item that scores nothing (bad format, or grading failed)
ZERO = dict.fromkeys(RESULT_KEYS, 0.0)


def check_result(result) -> dict[str, float]:
    """A reward function's result as a dict of exactly `RESULT_KEYS`, as floats (KeyError when
    one is missing)."""
    return {k: float(result[k]) for k in RESULT_KEYS}


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
