"""The multiplication task: seeded splits with no shared factor pair, questions that state
both factors, and an SFT pool whose transcripts call the calculator or state the product,
every one graded correct by the task's reward and, for the calls, answered by the
calculator environment exactly as the transcript says."""

from __future__ import annotations

import re

import pytest

import envs
from envs.environment import make_environment
from envs.multiply import TASK, MultiplyConfig, MultiplyTask

FACTORS = re.compile(r"has (\d+) \w+ of (\d+) \w+ each\.")


def factor_key(example) -> tuple[int, int]:
    a, b = example.extra["factors"]
    return (min(a, b), max(a, b))


def test_registered_and_splits_fixed():
    assert envs.get_task("multiply") is TASK
    test = TASK.load("test")
    assert len(test) == 512 and test == MultiplyTask().load("test")
    assert len({factor_key(e) for e in test}) == 512


def test_train_never_shares_a_factor_pair_with_test():
    test_keys = {factor_key(e) for e in TASK.load("test")}
    train = TASK.load("train", limit=3000)
    keys = [factor_key(e) for e in train]
    assert len(set(keys)) == 3000 and not set(keys) & test_keys
    assert TASK.available("train") == 89 * 90 // 2 - 512


def test_questions_state_the_factors_and_the_truth_is_their_product():
    for ex in TASK.load("test", limit=50) + TASK.load("train", limit=50):
        a, b = map(int, FACTORS.search(ex.question).groups())
        assert [a, b] == ex.extra["factors"] and 11 <= a <= 99 and 11 <= b <= 99
        assert ex.ground_truth == str(a * b)


def test_too_many_problems_refused_by_name():
    small = MultiplyTask(MultiplyConfig(min_factor=2, max_factor=4, test_size=2))
    with pytest.raises(ValueError, match="multiply: cannot find 5 distinct problems"):
        small.load("train", limit=5)
    with pytest.raises(ValueError, match="tool_fraction"):
        MultiplyConfig(tool_fraction=1.5)


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_sft_pool_is_correct_and_calls_as_asked(fraction):
    pool = TASK.sft_pool(400, tool_fraction=fraction)
    reward = TASK.reward_fn("r1_zero")
    tools = sum(ex["tool"] for ex in pool)
    if fraction in (0.0, 1.0):
        assert tools == 400 * fraction
    else:  # independent draws: 200 expected, 6 standard deviations of slack
        assert 140 <= tools <= 260
    for ex in pool:
        assert ex["prompt"].endswith("Assistant: <think>")
        assert reward(ex["response"], ex["ground_truth"])["reward"] == 1.0
        assert ("<calc>" in ex["response"]) == ex["tool"]


def test_tool_transcripts_replay_in_the_calculator_environment():
    """A pool transcript that calls the tool is what an episode produces: the model's call,
    the calculator's own answer, the model's final answer; graded 1."""
    env = make_environment("calculator", TASK, prompt="r1_zero")
    train = TASK.load("train", limit=64)
    pool = TASK.sft_pool(64, tool_fraction=1.0)
    for ex, item in zip(train, pool, strict=True):
        assert env.reset(ex) == item["prompt"]
        call, _, rest = item["response"].partition("</calc>")
        step = env.step(call + "</calc>")
        assert not step.done and rest.startswith(step.observation)
        step = env.step(rest.removeprefix(step.observation))
        assert step.done and step.reward == 1.0
        assert env.transcript == item["response"]
