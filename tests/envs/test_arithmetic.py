"""The synthetic arithmetic task: seeded splits, disjointness, knobs and SFT traces."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import envs
from envs.arithmetic import TASK, ArithmeticConfig, ArithmeticTask
from envs.base import DataError

STEP_RE = re.compile(r"(\d+) ([+-]) (\d+) = (-?\d+)\.")


def running_values(example) -> list[int]:
    values = [example.extra["start"]]
    for sign, k in example.extra["steps"]:
        values.append(values[-1] + sign * k)
    return values


def key(example) -> tuple:
    return (example.extra["start"], tuple(map(tuple, example.extra["steps"])))


def test_registered_under_its_name():
    assert envs.get_task("arithmetic") is TASK
    assert TASK.splits == ("train", "test")


def test_test_split_is_fixed_and_distinct():
    test = TASK.load("test")
    assert len(test) == 512
    assert test == ArithmeticTask().load("test")  # same seed, fresh instance: same problems
    assert len({key(e) for e in test}) == 512
    assert TASK.load("test", limit=10) == test[:10]


def test_train_is_seeded_and_seed_matters():
    a = TASK.load("train", limit=300)
    assert a == ArithmeticTask().load("train", limit=300)
    b = ArithmeticTask(ArithmeticConfig(train_seed=2)).load("train", limit=300)
    assert [e.question for e in a] != [e.question for e in b]
    # A longer request extends the same stream.
    assert TASK.load("train", limit=400)[:300] == a


def test_train_and_sft_pool_never_contain_a_test_problem():
    test_keys = {key(e) for e in TASK.load("test")}
    test_questions = {e.question for e in TASK.load("test")}
    train = TASK.load("train")
    assert len(train) == TASK.config.train_size
    assert not test_keys & {key(e) for e in train}
    assert len({key(e) for e in train}) == len(train)
    pool_questions = {t.question for t in TASK.traces("train", 2048)}
    assert not test_questions & pool_questions
    # The independent (non-distinct) stream used for pretraining corpora excludes them too.
    corpus = TASK.train_problems(20_000, seed=5, distinct=False)
    assert not test_keys & {p.key for p in corpus}


def test_values_never_drop_below_zero_and_ground_truth_is_the_last_value():
    for e in itertools.chain(TASK.load("test"), TASK.load("train", limit=2000)):
        values = running_values(e)
        assert min(values) >= 0
        assert e.ground_truth == str(values[-1])
        assert 2 <= len(e.extra["steps"]) <= 3
        assert 1 <= values[0] <= 10
        assert all(1 <= k <= 10 for _, k in e.extra["steps"])
        # The question states every number of the problem, in order.
        assert [int(n) for n in re.findall(r"\d+", e.question)] == [values[0]] + [
            k for _, k in e.extra["steps"]
        ]


@given(
    max_start=st.integers(0, 30),
    steps=st.tuples(st.integers(1, 5), st.integers(0, 3)),
    max_operand=st.integers(1, 30),
    seed=st.integers(0, 2**31),
)
def test_difficulty_knobs_are_respected(max_start, steps, max_operand, seed):
    cfg = ArithmeticConfig(
        max_start=max_start,
        min_start=0,
        min_steps=steps[0],
        max_steps=steps[0] + steps[1],
        max_operand=max_operand,
    )
    task = ArithmeticTask(cfg)
    rng = random.Random(seed)
    for _ in range(20):
        p = task.sample_problem(rng)
        assert cfg.min_steps <= len(p.steps) <= cfg.max_steps
        assert 0 <= p.start <= max_start
        assert all(1 <= k <= max_operand for _, k in p.steps)
        assert min(p.values()) >= 0


def test_bad_knobs_are_refused():
    with pytest.raises(ValueError):
        ArithmeticConfig(min_steps=3, max_steps=2)
    with pytest.raises(ValueError):
        ArithmeticConfig(wrong_fraction=1.5)
    with pytest.raises(ValueError):
        ArithmeticConfig(min_operand=0)  # a step of 0 changes nothing
    with pytest.raises(ValueError):
        ArithmeticConfig(min_start=-1)


def test_lower_bounds_of_the_knobs_are_respected():
    task = ArithmeticTask(ArithmeticConfig(min_start=4, max_start=6, min_operand=3, max_operand=5))
    rng = random.Random(0)
    problems = [task.sample_problem(rng) for _ in range(200)]
    assert {p.start for p in problems} <= {4, 5, 6}
    assert {k for p in problems for _, k in p.steps} <= {3, 4, 5}


def test_seed_arguments_choose_the_stream():
    default = [p.key for p in TASK.train_problems(50)]
    assert [p.key for p in TASK.train_problems(50, seed=TASK.config.train_seed)] == default
    assert [p.key for p in TASK.train_problems(50, seed=5)] != default
    one = list(TASK.traces("train", 200, seed=1))
    assert one == list(TASK.traces("train", 200, seed=1))
    assert [t.answer for t in one] != [t.answer for t in TASK.traces("train", 200, seed=2)]


def check_chain(trace) -> int:
    """Parse `a op b = c.` steps; return how many steps are miscalculated."""
    steps = STEP_RE.findall(trace.reasoning)
    assert steps and " ".join(f"{a} {op} {b} = {c}." for a, op, b, c in steps) == trace.reasoning
    wrong = 0
    for i, (a, op, b, c) in enumerate(steps):
        if i:
            assert int(a) == int(steps[i - 1][3])  # each step starts from the previous result
        true = int(a) + int(b) if op == "+" else int(a) - int(b)
        wrong += true != int(c)
        assert int(c) >= 0
    assert trace.answer == steps[-1][3]
    return wrong


def test_traces_wrong_fraction_and_error_carries_to_the_answer():
    traces = list(TASK.traces("train", 4000))
    wrong = [t for t in traces if t.answer != t.ground_truth]
    frac = len(wrong) / len(traces)
    assert abs(frac - TASK.config.wrong_fraction) < 0.025, frac
    for t in traces:
        n_bad = check_chain(t)
        if t.answer == t.ground_truth:
            assert n_bad == 0
        else:
            assert n_bad == 1
            assert 1 <= abs(int(t.answer) - int(t.ground_truth)) <= 2
    assert traces[:50] == list(TASK.traces("train", 50))  # deterministic


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_wrong_fraction_is_configurable(fraction):
    traces = list(TASK.traces("train", 1000, wrong_fraction=fraction))
    frac = sum(t.answer != t.ground_truth for t in traces) / len(traces)
    assert abs(frac - fraction) < 0.05


def test_no_traces_for_the_test_split():
    with pytest.raises(ValueError, match="test"):
        next(TASK.traces("test", 1))


def test_sft_pool_is_r1_zero_and_correct_traces_grade_one():
    pool = TASK.sft_pool()
    assert len(pool) == 2048
    assert pool[:100] == TASK.sft_pool(100)
    test_questions = {e.question for e in TASK.load("test")}
    for ex in pool:
        assert ex["prompt"].endswith("Assistant: <think>")
        assert ex["prompt"].startswith("A conversation between User and Assistant.")
        assert ex["response"].startswith(" ") and ex["response"].endswith(" </answer>")
        assert "{question}" not in ex["prompt"]
    rewards = [envs.r1_zero_reward_fn(ex["response"], ex["ground_truth"]) for ex in pool]
    for ex, r in zip(pool, rewards, strict=True):
        assert r["format_reward"] == 1.0
        assert r["reward"] == (1.0 if ex["correct"] else 0.0)
    n_wrong = sum(not ex["correct"] for ex in pool)
    assert 0.15 < n_wrong / len(pool) < 0.21
    questions = {ex["prompt"].split("User: ")[1].split("\nAssistant")[0] for ex in pool}
    assert not questions & test_questions


def test_load_from_jsonl_file(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text(
        json.dumps({"question": "Ana has 2 coins. How many?", "ground_truth": "2"}) + "\n"
    )
    (ex,) = TASK.load("test", path=good)
    assert ex.ground_truth == "2"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"question": "q", "ground_truth": "1"})
        + "\n"
        + json.dumps({"question": "q", "ground_truth": "x"})
        + "\n"
    )
    with pytest.raises(DataError, match=r"bad.jsonl:2.*ground_truth"):
        TASK.load("train", path=bad)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"ground_truth": "1"}) + "\n")
    with pytest.raises(DataError, match=r"missing.jsonl:1.*question"):
        TASK.load("train", path=missing)
    three = tmp_path / "three.jsonl"
    three.write_text(
        "".join(json.dumps({"question": "q", "ground_truth": n}) + "\n" for n in "123")
    )
    assert [e.ground_truth for e in TASK.load("test", path=three, limit=2)] == ["1", "2"]


def test_sft_data_builder_and_filter_use_the_arithmetic_traces():
    from envs.sft_data import build_examples, filter_correct

    examples = build_examples("arithmetic", limit=128)
    pool = TASK.sft_pool(128)
    assert [e["response"] for e in examples] == [e["response"] for e in pool]
    kept, stats = filter_correct(examples, num_workers=1)
    assert stats["total"] == 128
    assert [e["response"] for e in kept] == [e["response"] for e in pool if e["correct"]]


@pytest.mark.parametrize("split", ["train", "test"])
def test_negative_limit_is_refused(split, tmp_path):
    """As for the vendored tasks; `test_problems()[:-1]` used to return 511 problems."""
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"question": "q", "ground_truth": "1"}) + "\n")
    for path in (None, f):
        with pytest.raises(ValueError, match="limit"):
            TASK.load(split, path=path, limit=-1)


@pytest.mark.parametrize("gt", ["\u00b2", "\u0663", "--1", "1.0", " "])
def test_jsonl_ground_truth_must_be_an_ascii_integer(tmp_path, gt):
    """str.isdigit() also accepts superscripts and other scripts' digits, and stripping every
    leading '-' let '--1' through; none of them is an integer the grader can compare."""
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"question": "q", "ground_truth": gt}) + "\n")
    with pytest.raises(DataError, match=r"p.jsonl:1.*ground_truth"):
        TASK.load("test", path=f)
