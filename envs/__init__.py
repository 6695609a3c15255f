"""Tasks for reasoning-rl: MATH, GSM8K, Countdown, a synthetic arithmetic task and the
five-benchmark evaluation suite (AIME24, AMC23, MATH500, Minerva Math, OlympiadBench).

Public API (see ARCHITECTURE.md, section envs):

* `get_task(name) -> Task` for `math`, `gsm8k`, `countdown`, `arithmetic`, `multiply` (two-digit
  products, where the calculator tool pays) and the suite's
  `aime24`, `amc23`, `math500`, `minerva_math`, `olympiadbench` (`envs.suite`), and the
  supplement's `mmlu` and `gsm8k_supplement` (`envs.supplement`, which also reads and writes
  AlpacaEval and SimpleSafetyTests);
* reward functions `r1_zero_reward_fn`, `question_only_reward_fn`, `countdown_reward_fn`,
  each `fn(response, ground_truth) -> {"reward", "format_reward", "answer_reward"}`;
* `grade_batch(reward_fn, responses, ground_truths, *, timeout=..., num_workers=...)`, returning
  a `GradeResults` list (input order) whose `.timeouts`, `.errors` and `.metrics()` (keys
  `grade/timeouts`, `grade/errors`) say how many items scored 0 because grading failed.

Heavy modules (math-verify, multiprocessing) are imported on first use, so `import envs` is cheap.
"""

from __future__ import annotations

import importlib

from envs.base import DataError, Example, Task, Trace

# name -> "module:attribute" of a Task instance; imported lazily on first request.
_TASKS = {
    "math": "envs.tasks:MATH",
    "gsm8k": "envs.tasks:GSM8K",
    "countdown": "envs.tasks:COUNTDOWN",
    "arithmetic": "envs.arithmetic:TASK",
    "multiply": "envs.multiply:TASK",
    # the five-benchmark evaluation suite (envs/suite.py; split `test` only)
    "aime24": "envs.suite:AIME24",
    "amc23": "envs.suite:AMC23",
    "math500": "envs.suite:MATH500",
    "minerva_math": "envs.suite:MINERVA_MATH",
    "olympiadbench": "envs.suite:OLYMPIADBENCH",
    # the supplement's evaluations (envs/supplement.py)
    "mmlu": "envs.supplement:MMLU",
    "gsm8k_supplement": "envs.supplement:GSM8K_SUPPLEMENT",
}

_LAZY = {
    "r1_zero_reward_fn": "envs.rewards",
    "question_only_reward_fn": "envs.rewards",
    "countdown_reward_fn": "envs.rewards",
    "grade_batch": "envs.grader",
    "GradeStats": "envs.grader",
    "GradeResults": "envs.grader",
}

__all__ = [
    "DataError",
    "Example",
    "Task",
    "Trace",
    "get_task",
    "task_names",
    *_LAZY,
]


def task_names() -> list[str]:
    return list(_TASKS)


def get_task(name: str) -> Task:
    """Return the task registered under `name` (imports its module on first use)."""
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; known: {task_names()}")
    module, attr = _TASKS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
