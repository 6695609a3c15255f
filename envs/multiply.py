"""Multiplication word problems: the task where a calculator pays.

    Mia has 23 boxes of 47 coins each. How many coins does Mia have?

Both factors are drawn from ``min_factor..max_factor`` (11..99 by default), so the answer is a
product of two two-digit numbers: about four thousand distinct problems, far more than a
1M-parameter model can memorize, and nothing its pretraining taught it to compute (the tiny
world's corpus holds sums and differences of small numbers only). With the calculator
(``env: calculator``) the problem is a copy: write ``<calc>23*47</calc>``, read
``<result>1081</result>``, answer 1081.

Splits are generated from seeds, as the arithmetic task's: ``test`` holds ``test_size`` (512)
fixed problems; ``train`` a seeded stream of problems none of which multiplies the same two
numbers as a test problem, in either order.

The SFT pool (:meth:`MultiplyTask.sft_pool`) is what gives a model the call syntax: in
``r1_zero`` format, a share ``tool_fraction`` of its responses call the calculator::

     <calc>23*47</calc> <result>1081</result> </think> <answer> 1081 </answer>

and the others state the product as if computed in the head::

     23 * 47 = 1081. </think> <answer> 1081 </answer>

Every stated product is right; the SFT start therefore knows both ways, and reinforcement
learning decides which one it keeps. The result tags in the SFT text are the tool's words,
trained on here as ordinary text; under ``env: calculator`` the calculator writes them and
they are never trained on (docs/tools.md).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.arithmetic import ITEMS, NAMES, ArithmeticTask
from envs.base import Example, Trace

CONTAINERS = ("boxes", "bags", "rows", "shelves")


@dataclass(frozen=True)
class MultiplyConfig:
    """Factor range, sizes and seeds of the multiplication task."""

    min_factor: int = 11
    max_factor: int = 99
    test_size: int = 512
    test_seed: int = 20261205
    train_seed: int = 3
    train_size: int = 2048
    trace_seed: int = 11
    tool_fraction: float = 0.5
    sft_pool_size: int = 2048

    def __post_init__(self) -> None:
        if not 1 <= self.min_factor <= self.max_factor:
            raise ValueError("need 1 <= min_factor <= max_factor")
        if not 0.0 <= self.tool_fraction <= 1.0:
            raise ValueError("tool_fraction must lie in [0, 1]")


@dataclass(frozen=True)
class Product:
    """A problem's numbers and the wording choices that turn them into text."""

    a: int
    b: int
    name: str
    item: str
    container: str

    @property
    def key(self) -> tuple[int, int]:
        """Content identity: the two factors in either order."""
        return (min(self.a, self.b), max(self.a, self.b))

    @property
    def answer(self) -> int:
        return self.a * self.b

    def question(self) -> str:
        return (
            f"{self.name} has {self.a} {self.container} of {self.b} {self.item}s each. "
            f"How many {self.item}s does {self.name} have?"
        )

    def expression(self) -> str:
        return f"{self.a}*{self.b}"


def tool_reasoning(problem: Product) -> str:
    """The reasoning of a transcript that calls the calculator (the call and its answer)."""
    return f"<calc>{problem.expression()}</calc> <result>{problem.answer}</result>"


def head_reasoning(problem: Product) -> str:
    """The reasoning of a transcript that states the product without the tool."""
    return f"{problem.a} * {problem.b} = {problem.answer}."


class MultiplyTask(ArithmeticTask):
    """Seeded multiplication word problems (see the module docstring). The splits are drawn
    as the arithmetic task draws its own (:class:`~envs.arithmetic.ArithmeticTask`: the test
    set from its seed, training problems distinct and outside it by :attr:`Product.key`)."""

    name = "multiply"
    templates = ("r1_zero",)

    def __init__(self, config: MultiplyConfig | None = None):
        self.config = config or MultiplyConfig()
        self._test = None

    def sample_problem(self, rng: random.Random) -> Product:
        c = self.config
        return Product(
            a=rng.randint(c.min_factor, c.max_factor),
            b=rng.randint(c.min_factor, c.max_factor),
            name=rng.choice(NAMES),
            item=rng.choice(ITEMS),
            container=rng.choice(CONTAINERS),
        )

    def distinct_problems(self) -> int:
        """Unordered factor pairs in the range."""
        n = self.config.max_factor - self.config.min_factor + 1
        return n * (n + 1) // 2

    def example(self, problem: Product, id_: str) -> Example:
        return Example(
            id=id_,
            question=problem.question(),
            ground_truth=str(problem.answer),
            extra={"factors": [problem.a, problem.b]},
        )

    def traces(
        self,
        split: str = "train",
        n: int | None = None,
        *,
        tool_fraction: float | None = None,
        seed: int | None = None,
        path: str | Path | None = None,
    ) -> Iterator[Trace]:
        """Worked solutions of the first ``n`` training problems: each calls the calculator with
        probability ``tool_fraction`` (config default), drawn from ``seed`` (``trace_seed``),
        else states the product. Every answer is right."""
        self.check_split(split)
        if path is not None:
            raise ValueError("multiply: traces are generated from seeds, not read from a path")
        if split == "test":
            raise ValueError("multiply: no SFT traces for the held-out test split")
        frac = self.config.tool_fraction if tool_fraction is None else tool_fraction
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"tool_fraction must lie in [0, 1], got {frac}")
        rng = random.Random(self.config.trace_seed if seed is None else seed)
        for p in self.train_problems(self.config.train_size if n is None else n):
            reasoning = tool_reasoning(p) if rng.random() < frac else head_reasoning(p)
            yield Trace(p.question(), reasoning, str(p.answer), str(p.answer))

    def sft_pool(
        self,
        size: int | None = None,
        *,
        template: str = "r1_zero",
        tool_fraction: float | None = None,
        seed: int | None = None,
    ) -> list[dict[str, Any]]:
        """The SFT pool: ``size`` (config ``sft_pool_size``) r1_zero examples
        ``{"prompt", "response", "ground_truth", "correct", "tool"}``; ``tool`` says whether
        the response calls the calculator."""
        from envs.sft_data import examples_from_traces

        self.check_template(template)
        n = self.config.sft_pool_size if size is None else size
        traces = list(self.traces("train", n, tool_fraction=tool_fraction, seed=seed))
        examples = examples_from_traces(traces, template)
        for ex, t in zip(examples, traces, strict=True):
            ex["correct"] = True
            ex["tool"] = t.reasoning.startswith("<calc>")
        return examples


TASK = MultiplyTask()
