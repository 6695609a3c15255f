"""grade_batch: input order, per-item time limit, failures scored 0 and counted."""

from __future__ import annotations

import logging
import os
import time

import pytest

import envs
from envs import grade_batch, grader, r1_zero_reward_fn

LIMIT = 2.0


def _sleepy(response: str, ground_truth: str) -> dict:
    """Sleeps `response` seconds, then echoes the ground truth as the reward."""
    time.sleep(float(response))
    v = float(ground_truth)
    return {"reward": v, "format_reward": 1.0, "answer_reward": v}


def _raises(response: str, ground_truth: str) -> dict:
    if response == "boom":
        raise RuntimeError("reward function failed")
    return {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}


def _sleeps_or_raises(response: str, ground_truth: str) -> dict:
    """Raises on "boom", else sleeps `response` seconds and scores 1."""
    if response == "boom":
        raise ValueError("malformed answer")
    time.sleep(float(response))
    return {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}


def _dies(response: str, ground_truth: str) -> dict:
    if response == "die":
        os._exit(3)
    return {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}


def _math_verify_loaded(response: str, ground_truth: str) -> dict:
    """Reward 1 iff math-verify was already imported in this worker when the item arrived."""
    import sys

    v = float("math_verify" in sys.modules)
    return {"reward": v, "format_reward": 1.0, "answer_reward": v}


def R(answer: str) -> str:
    return f"x </think> <answer> {answer} </answer>"


def _nested_fractions(depth: int) -> str:
    s = "1"
    for _ in range(depth):
        s = "\\frac{1}{1+" + s + "}"
    return s


PATHOLOGICAL = [
    pytest.param(R("1" * 10_000), "\\frac{1}{2}", id="10000-digit-number"),
    pytest.param(R("10^{10^{10}}"), "10", id="tower-power"),
    pytest.param(R(_nested_fractions(200)), "2", id="200-nested-fractions"),
]


@pytest.mark.parametrize(("response", "gt"), PATHOLOGICAL)
def test_pathological_answer_returns_within_limit(response, gt):
    grade_batch(r1_zero_reward_fn, [R("\\frac12")], ["0.5"], timeout=LIMIT)  # warm the pool
    t0 = time.monotonic()
    out = grade_batch(r1_zero_reward_fn, [response], [gt], timeout=LIMIT)
    elapsed = time.monotonic() - t0
    assert elapsed <= LIMIT + 1.0, f"took {elapsed:.2f}s"
    assert out[0]["reward"] == 0.0
    assert out.stats.n == 1 and out.stats.pooled == 1


def test_pathological_batch_keeps_order_and_counts_timeouts():
    responses = [R("\\frac12"), R("10^{10^{10}}"), R("0.5"), "no tags", R("\\dfrac{1}{2}")]
    gts = ["0.5", "10", "1/2", "1", "0.5"]
    out = grade_batch(r1_zero_reward_fn, responses, gts, timeout=LIMIT, num_workers=2)
    assert [r["reward"] for r in out] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert out.stats.timeouts == 1
    assert out.stats.fast == 1  # "no tags" is a format failure, decided in-process


def test_results_come_back_in_input_order():
    delays = [0.3, 0.0, 0.2, 0.0, 0.1, 0.05, 0.0, 0.25]
    gts = [str(i) for i in range(len(delays))]
    out = grade_batch(_sleepy, [str(d) for d in delays], gts, timeout=5, num_workers=2)
    assert [r["reward"] for r in out] == [float(i) for i in range(len(delays))]
    assert out.stats.pooled == len(delays)  # no `fast` attribute: everything in workers


def _grader_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "envs.grader" and r.levelno == logging.WARNING
    ]


def test_hung_item_is_killed_and_the_pool_recovers(caplog):
    """An item that would sleep 60 s is killed at its 1 s limit. The bound on the call's wall
    time is far below 60 s but leaves room for starting workers on a loaded machine (1 + 2 s
    failed there, at load 8)."""
    caplog.set_level(logging.WARNING, logger="envs.grader")
    t0 = time.monotonic()
    out = grade_batch(_sleepy, ["60", "0", "0"], ["1", "1", "1"], timeout=1.0, num_workers=2)
    assert time.monotonic() - t0 < 30.0
    assert [r["reward"] for r in out] == [0.0, 1.0, 1.0]
    assert out.stats.timeouts == 1
    assert (out.timeouts, out.errors) == (1, 0)
    assert out.stats.timed_out == [0] and out.stats.failed == []
    assert out.metrics() == {"grade/timeouts": 1, "grade/errors": 0}
    assert _grader_warnings(caplog) == [
        "grade_batch: of 3 items, 1 timed out (limit 1 s); they scored 0"
    ]
    again = grade_batch(_sleepy, ["0"] * 4, ["1"] * 4, timeout=5, num_workers=2)
    assert [r["reward"] for r in again] == [1.0] * 4


def test_raising_reward_fn_scores_zero_and_counts_an_error(caplog):
    caplog.set_level(logging.WARNING, logger="envs.grader")
    out = grade_batch(_raises, ["ok", "boom", "ok"], ["1", "1", "1"], timeout=5)
    assert [r["reward"] for r in out] == [1.0, 0.0, 1.0]
    assert out.stats.errors == 1
    assert (out.timeouts, out.errors) == (0, 1) and out.stats.failed == [1]
    assert out.stats.first_error == "item 1: RuntimeError: reward function failed"
    assert out.metrics() == {"grade/timeouts": 0, "grade/errors": 1}
    (warning,) = _grader_warnings(caplog)  # one warning per call, naming the first error
    assert "1 raised" in warning and "RuntimeError: reward function failed" in warning


def test_timeouts_and_errors_in_one_call_are_counted_apart_and_order_is_kept(caplog):
    caplog.set_level(logging.WARNING, logger="envs.grader")
    responses = ["0", "60", "boom", "0", "boom"]
    out = grade_batch(_sleeps_or_raises, responses, ["1"] * 5, timeout=1.0, num_workers=2)
    assert [r["reward"] for r in out] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert all(r == {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0} for r in out[1:3])
    assert (out.timeouts, out.errors) == (1, 2)
    assert out.stats.timed_out == [1] and out.stats.failed == [2, 4]
    assert out.metrics() == dict(zip(grader.METRIC_KEYS, (1, 2), strict=True))
    assert out.metrics(prefix="eval/grade_") == {"eval/grade_timeouts": 1, "eval/grade_errors": 2}
    assert _grader_warnings(caplog) == [out.stats.warning()]
    assert "1 timed out (limit 1 s) and 2 raised" in out.stats.warning()


def test_a_clean_call_reports_zero_and_warns_nothing(caplog):
    caplog.set_level(logging.WARNING, logger="envs.grader")
    out = grade_batch(_sleepy, ["0", "0"], ["1", "1"], timeout=5, num_workers=2)
    assert isinstance(out, grader.GradeResults) and isinstance(out, list)
    assert out.metrics() == {"grade/timeouts": 0, "grade/errors": 0}
    assert out.stats.warning() is None and _grader_warnings(caplog) == []


def test_dying_worker_scores_zero_and_is_replaced():
    out = grade_batch(_dies, ["ok", "die", "ok", "ok"], ["1"] * 4, timeout=5, num_workers=2)
    assert [r["reward"] for r in out] == [1.0, 0.0, 1.0, 1.0]
    assert out.stats.errors == 1 and out.stats.failed == [1]
    assert "worker died (exit code 3)" in out.stats.first_error


def test_empty_batch_and_length_mismatch():
    assert list(grade_batch(r1_zero_reward_fn, [], [])) == []
    with pytest.raises(ValueError, match="ground truths"):
        grade_batch(r1_zero_reward_fn, ["a"], [])


def test_unpicklable_reward_fn_is_a_clear_error():
    with pytest.raises(TypeError, match="picklable"):
        grade_batch(lambda r, g: {}, ["a"], ["b"])


def test_fast_path_needs_no_workers():
    out = grade_batch(r1_zero_reward_fn, [R("7"), R("8"), "junk"], ["7", "7", "7"])
    assert [r["reward"] for r in out] == [1.0, 0.0, 0.0]
    assert out.stats.fast == 3 and out.stats.pooled == 0


def test_interrupted_call_does_not_leak_into_the_next(monkeypatch):
    """A call cut short (here: Ctrl-C while waiting) leaves busy workers; the next call must
    not receive their answers."""
    from envs import grade_pool, grader

    grade_batch(_sleepy, ["0", "0"], ["1", "1"], timeout=5, num_workers=2)  # both workers ready
    real_wait = grade_pool.wait

    def interrupted_wait(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(grade_pool, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        grade_batch(_sleepy, ["0.3", "0.3"], ["7", "7"], timeout=5, num_workers=2)
    monkeypatch.setattr(grade_pool, "wait", real_wait)
    assert any(w.job is not None for w in grader._POOL.workers)  # answers still in flight
    out = grade_batch(_sleepy, ["0.5"], ["1"], timeout=5, num_workers=2)
    assert [r["reward"] for r in out] == [1.0]


def test_fresh_worker_loads_math_verify_before_its_first_item():
    """The per-item limit must time the grading, not a fresh worker's first import of
    math-verify and sympy (~0.3 s here, seconds on a loaded machine), which could make a
    correct answer score 0 after every worker replacement."""
    from envs import grader

    grader._shutdown()  # a fresh pool
    out = grade_batch(_math_verify_loaded, ["x"], ["1"], timeout=30, num_workers=1)
    assert [r["reward"] for r in out] == [1.0]


def test_pool_is_resized_when_a_call_asks_for_another_size():
    from envs import grader

    grade_batch(_sleepy, ["0"], ["1"], timeout=5, num_workers=1)
    assert len(grader._POOL.workers) == 1
    out = grade_batch(_sleepy, ["0"] * 3, ["1"] * 3, timeout=5, num_workers=3)
    assert [r["reward"] for r in out] == [1.0] * 3
    assert len(grader._POOL.workers) == 3


def test_non_positive_timeout_is_refused():
    with pytest.raises(ValueError, match="timeout"):
        grade_batch(r1_zero_reward_fn, [R("1")], ["1"], timeout=0)


def test_fast_path_error_scores_zero_and_counts_an_error():
    out = grade_batch(
        envs.countdown_reward_fn,
        [R("1 + 2"), R("1 + 2")],
        ["not json", '{"nums": [1, 2], "target": 3}'],
    )
    assert [r["reward"] for r in out] == [0.0, 1.0]
    assert out.stats.errors == 1 and out.stats.fast == 2 and out.stats.pooled == 0
    assert out.stats.failed == [0] and out.metrics()["grade/errors"] == 1


def test_reward_fn_from_main_is_refused(monkeypatch):
    """A script's own function pickles (by reference to __main__) but no worker can load it."""
    import sys

    def fn(response: str, ground_truth: str) -> dict:
        return {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}

    fn.__module__, fn.__qualname__ = "__main__", "rrl_grader_test_fn"
    monkeypatch.setattr(sys.modules["__main__"], "rrl_grader_test_fn", fn, raising=False)
    with pytest.raises(TypeError, match="__main__"):
        grade_batch(fn, ["a"], ["b"], timeout=5)


# ----------------------------------------------------------------------------- direct calls


def test_direct_reward_call_holds_the_time_limit(monkeypatch):
    """`r1_zero_reward_fn` called directly (as `compute_group_normalized_rewards` does) on an
    answer that keeps sympy busy in C for minutes returns 0 within the hard limit."""
    from envs import rewards

    monkeypatch.setattr(rewards, "HARD_TIME_LIMIT", LIMIT)
    assert r1_zero_reward_fn(R("\\frac12"), "0.5")["reward"] == 1.0  # starts the pool
    t0 = time.monotonic()
    out = r1_zero_reward_fn(R("9^{9^{9^{9^{9}}}}"), "1")
    elapsed = time.monotonic() - t0
    assert elapsed <= LIMIT + 1.0, f"took {elapsed:.2f}s"
    assert out == {"reward": 0.0, "format_reward": 1.0, "answer_reward": 0.0}


def test_direct_reward_call_from_a_thread_holds_the_time_limit(monkeypatch):
    """On another thread math-verify's signal.alarm cannot work; the worker's kill still does."""
    import threading

    from envs import rewards

    monkeypatch.setattr(rewards, "HARD_TIME_LIMIT", LIMIT)
    envs.question_only_reward_fn("\\boxed{\\frac12}", "0.5")  # starts the pool
    out: list[dict] = []
    t0 = time.monotonic()
    thread = threading.Thread(
        target=lambda: out.append(envs.question_only_reward_fn("\\boxed{10^{10^{10}}}", "10"))
    )
    thread.start()
    thread.join(timeout=60)
    elapsed = time.monotonic() - t0
    assert out and out[0]["reward"] == 0.0
    assert elapsed <= LIMIT + 1.0, f"took {elapsed:.2f}s"


def test_a_huge_answer_prints_a_bounded_message(capfd, monkeypatch):
    """math-verify quotes an answer whose parsing times out; a 600 kB answer must not print
    600 kB, whether graded in a worker or (limit off) in this process."""
    from envs import rewards

    huge = "\\frac{" + "x+" * 300_000 + "1}"
    monkeypatch.setattr(rewards, "HARD_TIME_LIMIT", LIMIT)
    assert r1_zero_reward_fn(R(huge), "1")["reward"] == 0.0
    monkeypatch.setattr(rewards, "HARD_TIME_LIMIT", None)
    monkeypatch.setattr(rewards, "MATH_VERIFY_TIMEOUT", 1)
    assert r1_zero_reward_fn(R(huge), "1")["reward"] == 0.0
    err = capfd.readouterr().err
    assert len(err) < 5_000, f"{len(err)} characters on stderr"
