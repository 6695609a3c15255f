"""The pretraining corpus: seeded documents about the arithmetic task's training problems."""

from __future__ import annotations

import random
from collections.abc import Iterator

from envs.arithmetic import TASK, chain_text, wrong_values
from envs.base import load_prompt, render
from reasoning_core.runtime.tinyworld.world import OTHER_LAYOUTS, R1_STYLES, TinyWorldConfig


def _pick(table: dict[str, float], rng: random.Random) -> str:
    names = sorted(table)
    return rng.choices(names, weights=[table[n] for n in names])[0]


def make_document(
    problem, cfg: TinyWorldConfig, rng: random.Random, template: str
) -> tuple[str, str]:
    """One corpus document as ``(prompt, response)``; ``prompt`` is "" for other layouts."""
    values = wrong_values(problem, rng) if rng.random() < cfg.wrong_fraction else problem.values()
    fields = {
        "question": problem.question(),
        "chain": chain_text(problem.start, problem.steps, values),
        "answer": str(values[-1]),
    }
    if rng.random() < cfg.r1_fraction:
        prompt = render(template, {"question": fields["question"]})
        long = cfg.r1_styles_long and len(problem.steps) >= cfg.long_steps
        styles = cfg.r1_styles_long if long else cfg.r1_styles
        return prompt, render(R1_STYLES[_pick(styles, rng)], fields)
    return "", render(OTHER_LAYOUTS[_pick(cfg.other_layouts, rng)], fields)


def documents(cfg: TinyWorldConfig, n: int, seed: int) -> Iterator[tuple[str, str]]:
    """``n`` documents drawn from seed ``seed`` (problems from the task's train side)."""
    template = load_prompt("r1_zero")
    rng = random.Random(seed)
    for problem in TASK.train_problems(n, seed=seed + 1, distinct=False):
        yield make_document(problem, cfg, rng, template)


def r1_zero_preamble() -> str:
    """The r1_zero template text before ``{question}`` (added to the tokenizer as one token)."""
    template = load_prompt("r1_zero")
    return template[: template.index("{question}")]
