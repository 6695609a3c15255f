"""A number no setting can mean (NaN, infinity, negative, beyond 64 bits) stops every command at
start with a message naming the setting, instead of a silent run or a traceback later."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

import envs.tasks
from envs.arithmetic import ArithmeticConfig, ArithmeticTask
from reasoning_core.runtime import cli
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation import suite
from reasoning_core.runtime.settings.config import build_config
from reasoning_core.runtime.settings.docs import load_config_class


@pytest.mark.parametrize(
    ("command", "sets", "setting"),
    [
        # accepted before: the KL term silently off, the train loss logged as null
        ("grpo", ["kl_coef=nan"], "kl_coef"),
        ("grpo", ["loss_type=grpo_clip", "cliprange=nan"], "cliprange"),
        # accepted before, then a traceback: torch's ValueError, an index out of bounds
        ("grpo", ["lr=nan"], "lr"),
        ("grpo", ["sampling_temperature=nan"], "sampling_temperature"),
        ("sft", ["lr=.inf"], "lr"),
        ("eval", ["eval_temperature=-.inf"], "eval_temperature"),
    ],
)
def test_a_non_finite_number_is_refused_at_start_naming_the_setting(
    command, sets, setting, tmp_path, capsys
):
    argv = [command, "--set", f"model_path={tmp_path / 'model'}", "--out", str(tmp_path / "r")]
    for s in sets:
        argv += ["--set", s]
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"rrl {command}: command line (with --set ")
    assert f"setting {setting!r} must be a finite number" in err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()  # before any work


@dataclass
class Numbers:
    seed: int = 0
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weights: dict[str, float] = field(default_factory=dict)
    budget: float | None = None


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"lr": float("nan")}, "setting 'lr' must be a finite number, got nan"),
        ({"lr": "inf"}, "setting 'lr' must be a finite number"),
        ({"lr": 10**400}, "setting 'lr' must be a finite number"),  # beyond any float
        ({"budget": float("inf")}, "setting 'budget' must be a finite number"),
        ({"betas": [0.9, float("nan")]}, "setting 'betas[1]' must be a finite number"),
        ({"weights": {"a": float("nan")}}, "setting 'weights.a' must be a finite number"),
        ({"weights": {"a": "x"}}, "setting 'weights.a' must be a number"),
        ({"lr": -1e-3}, "setting 'lr' must be >= 0, got -0.001"),
        ({"seed": -1}, "setting 'seed' must be >= 0, got -1"),
        ({"seed": 2**63}, "setting 'seed' must be below 2**63"),
    ],
)
def test_the_type_check_refuses_numbers_no_setting_means(values, needle):
    with pytest.raises(ConfigError, match=r"^here: ") as info:
        build_config(Numbers, values, "here")
    assert needle in str(info.value)


def test_finite_numbers_and_null_pass_the_type_check():
    cfg = build_config(
        Numbers,
        {"seed": 2**63 - 1, "lr": "3e-5", "betas": [0, 0.5], "weights": {"a": 1}, "budget": None},
    )
    assert cfg == Numbers(seed=2**63 - 1, lr=3e-5, betas=[0.0, 0.5], weights={"a": 1.0})


# ----------------------------------------------------------------------------- the data at start


@pytest.mark.parametrize("command", ["grpo", "ei", "dpo"])
@pytest.mark.parametrize(("task", "held"), [("math", 7498), ("arithmetic", 47668)])
def test_more_training_questions_than_the_split_holds_are_refused(command, task, held, world):
    cls = load_config_class(command)
    values = {"model_path": str(world), "task": task, "train_examples": 1_000_000_000}
    with pytest.raises(ConfigError) as info:
        build_config(cls, values, "command line")
    assert str(info.value) == (
        f"setting 'train_examples' asks for 1000000000 examples, but split 'train' of task "
        f"{task!r} has only {held}"
    )
    # all of them is a pool like any other
    assert build_config(cls, {**values, "train_examples": held}).train_examples == held


def test_more_prompts_than_the_data_set_holds_are_refused(world):
    cls = load_config_class("supplement-generate")
    values = {"model_path": str(world), "dataset": "simple_safety_tests", "eval_examples": 101}
    with pytest.raises(ConfigError) as info:
        build_config(cls, values, "command line")
    assert str(info.value) == (
        "setting 'eval_examples' asks for 101 examples, but simple_safety_tests has only 100"
    )
    assert build_config(cls, {**values, "eval_examples": 100}).eval_examples == 100


def test_arithmetic_counts_its_distinct_training_problems():
    """The count the refusal names: every problem by content, by brute force, minus the test
    set's (a smaller number range, so the enumeration is quick)."""
    task = ArithmeticTask(ArithmeticConfig(max_start=4, max_operand=4, test_size=20))
    moves = [(sign, k) for sign in (1, -1) for k in range(1, 5)]
    problems = {
        (start, steps)
        for start in range(1, 5)
        for n in (2, 3)
        for steps in itertools.product(moves, repeat=n)
        if min(itertools.accumulate((k * s for s, k in steps), initial=start)) >= 0
    }
    assert task.distinct_problems() == len(problems)
    assert task.available("train") == len(problems) - 20
    assert len(task.load("train", limit=task.available("train"))) == len(problems) - 20


@pytest.fixture
def gsm8k_folder_gone(tmp_path, monkeypatch):
    """The vendored data looked up in an empty folder, as if envs/data/gsm8k were deleted."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(envs.tasks, "DATA_DIR", data)
    return data / "gsm8k"


@pytest.mark.parametrize("command", ["eval", "dpo", "grpo"])
def test_a_missing_data_folder_is_named_at_start(
    command, gsm8k_folder_gone, world, tmp_path, capsys
):
    out = tmp_path / "run"
    argv = ["--set", f"model_path={world}", "--set", "task=gsm8k", "--out", str(out)]
    assert cli.main([command, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rrl {command}: setting 'eval_split': split 'test' of task 'gsm8k': ")
    assert f"{gsm8k_folder_gone}/test.jsonl[.gz]: no such data file" in err
    assert f"(the folder {gsm8k_folder_gone} is missing)" in err
    assert "Traceback" not in err
    assert not out.exists()  # before any work


def test_compare_published_without_the_published_table_is_named_at_start(
    world, tmp_path, monkeypatch, capsys
):
    missing = tmp_path / "published.csv"
    monkeypatch.setattr(suite, "PUBLISHED_CSV", missing)
    out = tmp_path / "run"
    argv = ["--set", f"model_path={world}", "--set", "compare=published", "--out", str(out)]
    # a short run, should the table be read only after it
    for s in ("device=cpu", "engine=hf", "benchmarks=[aime24]", "templates=[r1_zero]"):
        argv += ["--set", s]
    argv += ["--set", "eval_examples=1", "--set", "eval_max_tokens=4"]
    assert cli.main(["eval-suite", *argv]) == 2
    err = capsys.readouterr().err
    assert f"the table of published numbers {missing} is missing" in err
    assert "setting 'compare' is published" in err and "Traceback" not in err
    assert not out.exists()
