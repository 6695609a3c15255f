"""The five-benchmark evaluation suite of the R1-Zero papers: AIME24, AMC23, MATH500, Minerva Math
and OlympiadBench (Liu et al. 2025, "Understanding R1-Zero-Like Training"; data vendored in
`envs/data/eval_suite/`, provenance in `envs/data/README.md`).

Each benchmark is a task with one split, `test`. Ground truths are stored as a JSON list of
accepted answers (`["204"]`), because Minerva lists alternatives (`["0.01\\n", "0.02\\n"]`,
`["4.4e7\\n", "4.4 \\times 10^7\\n"]`): a response is right when its answer matches any of
them. How each answer shape is read:

* AIME24: a string with leading zeros (`"025"`), compared as the integer.
* AMC23: a float (`142.0`), written as the integer it is (`"142"`).
* MATH500: a LaTeX string, as MATH's answers.
* Minerva Math: a list of 1 to 3 alternatives; trailing newlines and `$` are stripped.
* OlympiadBench: a one-element list whose string may hold several values separated by commas
  (`"$69$,$84$"`, `"1,3,5"`, `"$(2,4)$"`): the `$` signs are removed and the values are
  compared as math-verify compares a set or tuple (order-free for bare values, as MATH's
  `3, 5`).

Numbers (integers, decimals, scientific notation `8.224 \\times 10^{-19}` / `3.89e-10`, with
a unit after them such as `Hz`, `\\text{ cm}^{-3}`, `^\\circ`, `\\%`) compare by relative
tolerance at any magnitude (`envs.numbers`). Reward rule by template: `r1_zero` grades the last
`<answer>` (as `envs.r1_zero_reward_fn`); `question_only` and `qwen_math` grade the last
`\\boxed{}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from envs.base import DataError, Example, RewardFn, read_jsonl, require
from envs.rewards import (
    _answer_reward,
    _answer_reward_fast,
    extract_r1_answer,
    last_boxed,
)
from envs.tasks import _VendoredTask

#: benchmark name -> vendored file stem in `envs/data/eval_suite/`
BENCHMARKS = {
    "aime24": "aime24",
    "amc23": "amc23",
    "math500": "math500",
    "minerva_math": "minerva_math",
    "olympiadbench": "olympiadbench",
}
#: the templates of the paper's table that the suite supports (4-shot: see docs/eval_suite.md)
SUITE_TEMPLATES = ("r1_zero", "question_only", "qwen_math")


def clean_answer(answer: str) -> str:
    """One stored answer as graded: trailing newline and surrounding `$` removed, and in a
    comma-separated list of `$...$` values (`$69$,$84$`) every `$` removed."""
    s = answer.strip()
    if s.startswith("$") and s.endswith("$") and s.count("$") % 2 == 0:
        s = s.replace("$", "")
    return s.strip()


def gold_answers(ground_truth: str) -> list[str]:
    """The accepted answers of a suite ground truth (a JSON list of strings)."""
    try:
        answers = json.loads(ground_truth)
    except json.JSONDecodeError:
        answers = None
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise ValueError(f"suite ground truth must be a JSON list of strings, got {ground_truth!r}")
    return answers


def _any_reward(answer: str | None, ground_truth: str) -> dict[str, float]:
    results = [_answer_reward(answer, gold) for gold in gold_answers(ground_truth)]
    return max(results, key=lambda r: r["reward"])


def _any_reward_fast(answer: str | None, ground_truth: str) -> dict | None:
    results = [_answer_reward_fast(answer, gold) for gold in gold_answers(ground_truth)]
    if any(r is not None and r["reward"] == 1.0 for r in results):
        return next(r for r in results if r is not None and r["reward"] == 1.0)
    if all(r is not None for r in results):
        return results[0]
    return None


def suite_r1_zero_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """r1_zero rule (the last `<answer>`) against any of the accepted answers."""
    return _any_reward(extract_r1_answer(response), ground_truth)


def suite_boxed_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """Boxed rule (the last `\\boxed{}`; none: format 0) against any of the accepted answers."""
    return _any_reward(last_boxed(response), ground_truth)


suite_r1_zero_reward_fn.fast = lambda r, g: _any_reward_fast(extract_r1_answer(r), g)
suite_boxed_reward_fn.fast = lambda r, g: _any_reward_fast(last_boxed(r), g)


class SuiteTask(_VendoredTask):
    """One benchmark of the suite (see the module docstring); split `test` only."""

    splits = ("test",)
    templates = SUITE_TEMPLATES

    def __init__(self, name: str):
        self.name = name
        self._files = {"test": BENCHMARKS[name]}

    def load(self, split: str, path: str | Path | None = None, limit: int | None = None):
        self.check_split(split)
        if path is None:
            from envs.base import DATA_DIR

            path = DATA_DIR / "eval_suite" / f"{BENCHMARKS[self.name]}.jsonl"
        return super().load(split, path=path, limit=limit)

    def reward_fn(self, template: str = "r1_zero") -> RewardFn:
        self.check_template(template)
        return suite_r1_zero_reward_fn if template == "r1_zero" else suite_boxed_reward_fn

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        for lineno, rec in read_jsonl(path):
            problem = require(rec, "problem", str, path, lineno, nonempty=True)
            if "answer" not in rec:
                raise DataError(path, lineno, "missing field 'answer'")
            answers = [clean_answer(a) for a in _answer_list(rec["answer"], path, lineno)]
            if not all(answers):
                raise DataError(path, lineno, "field 'answer' holds an empty answer")
            yield Example(
                id=f"{self.name}/{lineno}",
                question=problem,
                ground_truth=json.dumps(answers),
                extra={"difficulty": rec.get("difficulty")},
            )


def _answer_list(value, path: Path, lineno: int) -> list[str]:
    """`answer` as a list of strings: a string, an integral number or a list of strings."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if float(value).is_integer():
            return [str(int(value))]
        return [repr(float(value))]
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return value
    raise DataError(path, lineno, "field 'answer' must be a string, a number or a list of strings")


TASKS = {name: SuiteTask(name) for name in BENCHMARKS}
AIME24, AMC23, MATH500 = TASKS["aime24"], TASKS["amc23"], TASKS["math500"]
MINERVA_MATH, OLYMPIADBENCH = TASKS["minerva_math"], TASKS["olympiadbench"]
