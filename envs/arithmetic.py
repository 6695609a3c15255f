"""Synthetic arithmetic word problems: the task of the CPU tiny world.

A problem starts from a value and applies a few add/subtract steps, e.g.::

    Mia has 5 apples. Mia gets 3. Mia sells 2. How many apples does Mia have now?

Defaults (`ArithmeticConfig`): start value 1..10, 2 or 3 steps, each adding or subtracting
1..10, and the running value never drops below zero. The knobs (`min_steps`, `max_steps`,
`max_start`, `max_operand`, ...) set the difficulty.

Splits (all generated from seeds, nothing is read from disk unless `path` is given):

* `test`: `test_size` (512) fixed problems from their own seed, distinct by content.
* `train`: a seeded stream of distinct problems, none of which shares its content with a
  test problem. "Content" is the numbers and operations (start value and steps), not the
  wording, so a train problem never restates a test problem with another name.

Reasoning traces for SFT (`Task.traces`, `ArithmeticTask.sft_pool`) spell the steps out,
e.g. `5 + 3 = 8. 8 - 2 = 6.`; a set fraction (`wrong_fraction`, default 0.18) has one step
off by 1 or 2, and the error carries through to the stated answer, like the partly wrong R1
traces of the CS336 handout, so that filtering traces by correctness matters.

Ground truths are integers written as strings; grading uses the standard r1_zero reward.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.base import DataError, Example, Task, Trace, read_jsonl, require

NAMES = ("Ana", "Ben", "Mia", "Sam", "Tom", "Zoe", "Leo", "Eva")
ITEMS = ("apple", "marble", "coin", "book", "card", "shell")
ADD_VERBS = ("gets {k}", "finds {k}")
SUB_VERBS = ("loses {k}", "sells {k}")

# A step is (sign, operand): sign +1 adds, -1 subtracts.
Step = tuple[int, int]


@dataclass(frozen=True)
class ArithmeticConfig:
    """Difficulty knobs and seeds of the arithmetic task."""

    min_start: int = 1
    max_start: int = 10
    min_steps: int = 2
    max_steps: int = 3
    min_operand: int = 1
    max_operand: int = 10
    test_size: int = 512
    test_seed: int = 20240611
    train_seed: int = 1
    train_size: int = 10_000  # default `load("train")` size; `limit` may ask for more
    trace_seed: int = 7
    wrong_fraction: float = 0.18
    sft_pool_size: int = 2048

    def __post_init__(self) -> None:
        if not 0 <= self.min_start <= self.max_start:
            raise ValueError("need 0 <= min_start <= max_start")
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError("need 1 <= min_steps <= max_steps")
        if not 1 <= self.min_operand <= self.max_operand:
            raise ValueError("need 1 <= min_operand <= max_operand")
        if not 0.0 <= self.wrong_fraction <= 1.0:
            raise ValueError("wrong_fraction must lie in [0, 1]")


@dataclass(frozen=True)
class Problem:
    """The content of a problem plus the wording choices that turn it into text."""

    start: int
    steps: tuple[Step, ...]
    name: str
    item: str
    verbs: tuple[int, ...]  # index into ADD_VERBS / SUB_VERBS per step

    @property
    def key(self) -> tuple:
        """Content identity: numbers and operations, not wording (used for dedupe)."""
        return (self.start, self.steps)

    def values(self) -> list[int]:
        """Running values: start, then after each step."""
        out = [self.start]
        for sign, k in self.steps:
            out.append(out[-1] + sign * k)
        return out

    @property
    def answer(self) -> int:
        return self.values()[-1]

    def question(self) -> str:
        parts = [f"{self.name} has {self.start} {_plural(self.item, self.start)}."]
        for (sign, k), v in zip(self.steps, self.verbs, strict=True):
            verb = (ADD_VERBS if sign > 0 else SUB_VERBS)[v].format(k=k)
            parts.append(f"{self.name} {verb}.")
        parts.append(f"How many {self.item}s does {self.name} have now?")
        return " ".join(parts)


def _plural(item: str, n: int) -> str:
    return item if n == 1 else item + "s"


def chain_text(start: int, steps: tuple[Step, ...], values: list[int]) -> str:
    """`5 + 3 = 8. 8 - 2 = 6.` for the given (possibly wrong) running values."""
    out = []
    for (sign, k), before, after in zip(steps, values[:-1], values[1:], strict=True):
        out.append(f"{before} {'+' if sign > 0 else '-'} {k} = {after}.")
    return " ".join(out)


def wrong_values(problem: Problem, rng: random.Random) -> list[int]:
    """Running values with one step off by 1 or 2; the error carries to the answer.

    The offset is chosen so that no value drops below zero.
    """
    true = problem.values()
    step = rng.randrange(len(problem.steps))  # values[step + 1] is the wrong result
    lowest_after = min(true[step + 1 :])
    deltas = [d for d in (-2, -1, 1, 2) if lowest_after + d >= 0]
    delta = rng.choice(deltas)
    return true[: step + 1] + [v + delta for v in true[step + 1 :]]


class ArithmeticTask(Task):
    """Seeded arithmetic word problems (see the module docstring)."""

    name = "arithmetic"
    splits = ("train", "test")
    templates = ("r1_zero", "question_only")

    def __init__(self, config: ArithmeticConfig | None = None):
        self.config = config or ArithmeticConfig()
        self._test: list[Problem] | None = None

    # -- generation -------------------------------------------------------------------------

    def sample_problem(self, rng: random.Random) -> Problem:
        """One random problem (rejection-sampled so the running value stays >= 0)."""
        c = self.config
        while True:
            start = rng.randint(c.min_start, c.max_start)
            n = rng.randint(c.min_steps, c.max_steps)
            steps, value = [], start
            for _ in range(n):
                sign = rng.choice((1, -1))
                k = rng.randint(c.min_operand, c.max_operand)
                value += sign * k
                steps.append((sign, k))
            if min(_running(start, steps)) >= 0:
                return Problem(
                    start=start,
                    steps=tuple(steps),
                    name=rng.choice(NAMES),
                    item=rng.choice(ITEMS),
                    verbs=tuple(rng.randrange(2) for _ in steps),
                )

    def test_problems(self) -> list[Problem]:
        """The fixed eval problems: `test_size` distinct by content, from `test_seed`."""
        if self._test is None:
            self._test = list(
                self._distinct(random.Random(self.config.test_seed), set(), self.config.test_size)
            )
        return self._test

    def available(self, split: str, path: str | Path | None = None) -> int:
        """`test`: `test_size`; `train`: every distinct problem outside the test set (more
        than `train_size`, which is only `load`'s default); a JSONL `path`: its problems."""
        self.check_split(split)
        if path is not None or split == "test":
            return super().available(split, path)
        return self.distinct_problems() - len(self.test_keys())

    def distinct_problems(self) -> int:
        """How many problems differ in content (start and steps) under this config: step
        sequences whose running value never drops below 0, counted by that value."""
        c = self.config
        total = 0
        for start in range(c.min_start, c.max_start + 1):
            paths = {start: 1}  # running value -> sequences of the steps so far that reach it
            for n_steps in range(1, c.max_steps + 1):
                after: dict[int, int] = {}
                for value, count in paths.items():
                    for k in range(c.min_operand, c.max_operand + 1):
                        for nxt in (value + k, value - k):
                            if nxt >= 0:
                                after[nxt] = after.get(nxt, 0) + count
                paths = after
                if n_steps >= c.min_steps:
                    total += sum(paths.values())
        return total

    def test_keys(self) -> frozenset:
        return frozenset(p.key for p in self.test_problems())

    def train_problems(
        self, n: int, *, seed: int | None = None, distinct: bool = True
    ) -> Iterator[Problem]:
        """`n` training problems, none sharing its content with a test problem.

        With `distinct`, no two share content either (an error if the space runs out);
        without, problems are drawn independently (for large pretraining corpora).
        """
        rng = random.Random(self.config.train_seed if seed is None else seed)
        exclude = set(self.test_keys())
        if distinct:
            yield from self._distinct(rng, exclude, n)
            return
        for _ in range(n):
            while (p := self.sample_problem(rng)).key in exclude:
                pass
            yield p

    def _distinct(self, rng: random.Random, exclude: set, n: int) -> Iterator[Problem]:
        seen = set(exclude)
        misses = 0
        produced = 0
        while produced < n:
            p = self.sample_problem(rng)
            if p.key in seen:
                misses += 1
                if misses > 100_000:
                    raise ValueError(
                        f"{self.name}: cannot find {n} distinct problems with {self.config}; "
                        "widen the number range or the step count"
                    )
                continue
            misses = 0
            seen.add(p.key)
            produced += 1
            yield p

    # -- Task API ---------------------------------------------------------------------------

    def load(
        self, split: str, path: str | Path | None = None, limit: int | None = None
    ) -> list[Example]:
        """Generate `split` (or read problems from a JSONL `path`), at most `limit` of them."""
        self.check_split(split)
        if limit is not None and limit < 0:  # as the vendored tasks; [:-1] would drop one
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        if path is not None:
            return _load_jsonl(path, split, limit)
        if split == "test":
            problems = self.test_problems()[: limit if limit is not None else None]
        else:
            n = self.config.train_size if limit is None else limit
            problems = list(self.train_problems(n))
        return [self.example(p, f"{self.name}/{split}/{i}") for i, p in enumerate(problems)]

    def example(self, problem: Problem, id_: str) -> Example:
        """``problem`` as an :class:`Example` (a task built on this one words its own)."""
        return to_example(problem, id_)

    def traces(
        self,
        split: str = "train",
        n: int | None = None,
        *,
        wrong_fraction: float | None = None,
        seed: int | None = None,
        path: str | Path | None = None,
    ) -> Iterator[Trace]:
        """Worked solutions of the first `n` problems of `split`, a fraction of them wrong.

        Trace i solves problem i of `load(split)`. Each trace is wrong independently with
        probability `wrong_fraction` (config default), drawn from `seed` (`trace_seed`).
        """
        self.check_split(split)
        if path is not None:
            raise ValueError("arithmetic: traces are generated from seeds, not read from a path")
        if split == "test":
            raise ValueError("arithmetic: no SFT traces for the held-out test split")
        frac = self.config.wrong_fraction if wrong_fraction is None else wrong_fraction
        rng = random.Random(self.config.trace_seed if seed is None else seed)
        count = self.config.train_size if n is None else n
        for p in self.train_problems(count):
            yield make_trace(p, rng, frac)

    def sft_pool(
        self,
        size: int | None = None,
        *,
        template: str = "r1_zero",
        wrong_fraction: float | None = None,
        seed: int | None = None,
    ) -> list[dict[str, Any]]:
        """The fixed SFT pool: `size` (config `sft_pool_size`, 2048) r1_zero examples.

        Each is `{"prompt", "response", "ground_truth", "correct"}` with the prompt ending in
        `Assistant: <think>` and the response ` chain </think> <answer> N </answer>`.
        `correct` says whether the stated answer equals the ground truth (for bookkeeping;
        filtering should grade the response).
        """
        from envs.sft_data import examples_from_traces

        self.check_template(template)
        if template != "r1_zero":
            raise ValueError("arithmetic: the SFT pool is written in the r1_zero format")
        n = self.config.sft_pool_size if size is None else size
        traces = list(self.traces("train", n, wrong_fraction=wrong_fraction, seed=seed))
        examples = examples_from_traces(traces, template)
        for ex, t in zip(examples, traces, strict=True):
            ex["correct"] = t.answer == t.ground_truth
        return examples


def make_trace(problem: Problem, rng: random.Random, wrong_fraction: float) -> Trace:
    """A worked solution; with probability `wrong_fraction` one step is off by 1 or 2."""
    values = wrong_values(problem, rng) if rng.random() < wrong_fraction else problem.values()
    return Trace(
        question=problem.question(),
        reasoning=chain_text(problem.start, problem.steps, values),
        answer=str(values[-1]),
        ground_truth=str(problem.answer),
    )


def to_example(problem: Problem, id_: str) -> Example:
    return Example(
        id=id_,
        question=problem.question(),
        ground_truth=str(problem.answer),
        extra={"start": problem.start, "steps": [list(s) for s in problem.steps]},
    )


def _running(start: int, steps: list[Step]) -> list[int]:
    out = [start]
    for sign, k in steps:
        out.append(out[-1] + sign * k)
    return out


def _load_jsonl(path: str | Path, split: str, limit: int | None) -> list[Example]:
    """Problems from a JSONL file with `question` and `ground_truth` (an integer string)."""
    out = []
    for lineno, rec in read_jsonl(path):
        q = require(rec, "question", str, path, lineno, nonempty=True)
        gt = require(rec, "ground_truth", (str, int), path, lineno)
        gt = str(gt).strip()
        if not re.fullmatch(r"-?[0-9]+", gt):  # not isdigit(): it accepts '²', '٣'; '--1'
            raise DataError(path, lineno, f"field 'ground_truth' must be an integer, got {gt!r}")
        out.append(
            Example(
                id=str(rec.get("id", f"arithmetic/{split}/{lineno}")), question=q, ground_truth=gt
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out


TASK = ArithmeticTask()
