"""The environment interface: the single-turn case keeps every task's reward; the calculator
environment answers calls and grades the transcript."""

from __future__ import annotations

import pytest

import envs
from envs.environment import (
    CalculatorEnvironment,
    Environment,
    Step,
    environment_names,
    make_environment,
    register_environment,
    tool_call,
)

# (task, template) of every training task and template that grades an answer.
TASK_TEMPLATES = [
    ("math", "r1_zero"),
    ("math", "question_only"),
    ("gsm8k", "r1_zero"),
    ("gsm8k", "question_only"),
    ("countdown", "countdown"),
    ("arithmetic", "r1_zero"),
    ("arithmetic", "question_only"),
    ("multiply", "r1_zero"),
]


def responses(example: envs.Example) -> list[str]:
    """Right, wrong and malformed responses to ``example``, in both answer formats."""
    gt = example.ground_truth
    if example.extra.get("nums"):  # countdown: an expression over the numbers
        nums, target = example.extra["nums"], example.extra["target"]
        answers = ["+".join(map(str, nums)), "-".join(map(str, nums)), str(target)]
    else:
        answers = [gt, f"{gt}1", "\\frac{1}{2}"]
    out = []
    for a in answers:
        out += [
            f"ok </think> <answer> {a} </answer>",
            f"ok </think>\n<answer>{a}</answer> trailing",
            f"\\boxed{{{a}}}",
            f"<answer> {a} </answer>",
            a,
        ]
    return [*out, "", "</think> <answer></answer>"]


@pytest.mark.parametrize(("task_name", "template"), TASK_TEMPLATES)
def test_single_turn_rewards_are_the_tasks(task_name, template):
    """``single_turn`` is the one-step case: the prompt is the task's and every reward is
    the task's reward function's, unchanged."""
    task = envs.get_task(task_name)
    split = "test"
    reward_fn = task.reward_fn(template)
    env = make_environment("single_turn", task, template)
    for example in task.load(split, limit=3):
        for response in responses(example):
            assert env.reset(example) == task.format_prompt(example, template)
            step = env.step(response)
            expected = reward_fn(response, example.ground_truth)
            assert step.done and step.observation == ""
            assert step.reward == expected["reward"]
            assert step.info["scores"] == expected
            assert env.transcript == response


def test_ungraded_environment_leaves_grading_to_the_caller():
    task = envs.get_task("arithmetic")
    example = task.load("test", limit=1)[0]
    env = make_environment("single_turn", task, grade=False)
    env.reset(example)
    assert env.step("x").info == {"graded": False}


def test_registry():
    assert environment_names()[:2] == ["single_turn", "calculator"]
    with pytest.raises(ValueError, match="unknown environment 'chess'"):
        make_environment("chess", envs.get_task("arithmetic"))
    with pytest.raises(ValueError, match="already registered"):
        register_environment("calculator", CalculatorEnvironment)
    with pytest.raises(RuntimeError, match="before reset"):
        Environment(envs.get_task("arithmetic")).step("x")


@pytest.fixture
def calc():
    task = envs.get_task("arithmetic")
    example = envs.Example(id="0", question="What is 12 times 34?", ground_truth="408")
    env = make_environment("calculator", task, max_calls=2)
    return env, example


def test_calculator_episode(calc):
    env, example = calc
    prompt = env.reset(example)
    assert "<calc>12*34</calc>" in prompt and prompt.endswith("Assistant: <think>")
    assert "What is 12 times 34?" in prompt
    assert env.stop == ("</calc>",)
    step = env.step(" I multiply <calc>12*34</calc>")
    assert step == Step(" <result>408</result>", 0.0, False, {"tool_calls": 1, "tool_errors": 0})
    step = env.step(" so </think> <answer> 408 </answer>")
    assert step.done and step.reward == 1.0
    assert step.info["tool_calls"] == 1 and step.info["scores"]["format_reward"] == 1.0
    assert env.transcript == (
        " I multiply <calc>12*34</calc> <result>408</result> so </think> <answer> 408 </answer>"
    )


def test_calculator_errors_and_budget(calc):
    env, example = calc
    env.reset(example)
    step = env.step("<calc>__import__('os')</calc>")
    assert not step.done and step.observation.startswith(" <result>error:")
    assert step.info == {"tool_calls": 1, "tool_errors": 1}
    step = env.step("<calc>9**9**9</calc>")
    assert "too large" in step.observation and step.info["tool_errors"] == 2
    step = env.step("<calc>1+1</calc>")  # the third call: past max_calls=2
    assert step.done and step.info["call_budget_spent"] and step.reward == 0.0
    # A new episode starts from zero calls.
    env.reset(example)
    assert env.step("<calc>1</calc>").info == {"tool_calls": 1, "tool_errors": 0}


def test_calculator_wrong_answer_and_no_format(calc):
    env, example = calc
    env.reset(example)
    assert env.step("</think> <answer> 407 </answer>").reward == 0.0
    env.reset(example)
    step = env.step("408")
    assert step.done and step.info["scores"]["format_reward"] == 0.0


def test_calculator_settings_refused():
    task = envs.get_task("arithmetic")
    with pytest.raises(ValueError, match="template 'question_only'"):
        make_environment("calculator", task, "question_only")
    with pytest.raises(ValueError, match="max_calls"):
        make_environment("calculator", task, max_calls=0)
    with pytest.raises(ValueError, match="prompt must be one of"):
        make_environment("calculator", task, prompt="question_only")
    for bonus in (-0.1, 1.5):
        with pytest.raises(ValueError, match="bonus must lie in"):
            make_environment("calculator", task, bonus=bonus)


def test_calculator_prompt_r1_zero_is_the_tasks(calc):
    """prompt r1_zero: exactly the task's r1_zero prompt, no word about the tool."""
    _, example = calc
    task = envs.get_task("arithmetic")
    env = make_environment("calculator", task, prompt="r1_zero")
    prompt = env.reset(example)
    assert prompt == task.format_prompt(example, "r1_zero") and "<calc>" not in prompt


@pytest.mark.parametrize("grade", [True, False])
def test_calculator_bonus_for_an_answered_call(calc, grade):
    """The bonus goes to an episode with a call answered without an error, on top of the
    task's reward; a refused call or no call earns none; answer_reward stays the task's."""
    _, example = calc
    env = make_environment("calculator", envs.get_task("arithmetic"), bonus=0.25, grade=grade)
    cases = [
        (["<calc>12*34</calc>", " </think> <answer> 408 </answer>"], 0.25, 1.0),
        (["<calc>12*34</calc>", " </think> <answer> 1 </answer>"], 0.25, 0.0),
        (["<calc>12*x</calc>", " </think> <answer> 408 </answer>"], 0.0, 1.0),
        (["</think> <answer> 408 </answer>"], 0.0, 1.0),
    ]
    for texts, bonus, answer in cases:
        env.reset(example)
        for text in texts:
            step = env.step(text)
        assert step.done and step.info["tool_bonus"] == bonus
        if grade:
            assert step.reward == pytest.approx(answer + bonus)
            assert step.info["scores"]["answer_reward"] == answer
        else:
            assert step.reward == 0.0 and not step.info["graded"]


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("<calc>1+2</calc>", "1+2"),
        ("a <calc>1+2</calc>  ", "1+2"),
        ("<calc>1</calc> then <calc>2*3</calc>", "2*3"),
        ("<calc>1+2</calc> and more", None),
        ("<calc>1+2", None),
        ("no call", None),
        ("<calc></calc>", ""),
    ],
)
def test_tool_call(text, expression):
    assert tool_call(text) == expression


def test_end_grades_what_was_written(calc):
    env, example = calc
    env.reset(example)
    step = env.end("</think> <answer> 408 </answer> <calc>1</calc>")
    assert step.done and step.reward == 1.0 and step.info["truncated"]
    assert step.info["tool_calls"] == 0
