"""Question formats and output parsers of the supplement's MMLU and GSM8K evaluations.

MMLU: the question goes into `envs/prompts/mmlu.prompt` (subject, question, four options),
which in turn fills the zero-shot system prompt's `{instruction}`; the model is asked to answer
"The correct answer is _". `parse_mmlu` returns the letter A-D it states, or None.

GSM8K: `envs/prompts/gsm8k.prompt` (`{question}` then `Answer:`); the prediction is the last
number in the output (`parse_gsm8k`), None when there is none.
"""

from __future__ import annotations

import re

from envs.base import load_prompt, render

LETTERS = ("A", "B", "C", "D")


def mmlu_question(subject: str, question: str, options: list[str]) -> str:
    """The handout's MMLU question text (subject with underscores read as spaces)."""
    if len(options) != 4:
        raise ValueError(f"MMLU needs 4 options, got {len(options)}")
    text = load_prompt("mmlu")
    for i, option in enumerate(options):
        text = text.replace(f"{{options[{i}]}}", str(option))
    return render(text, {"subject": subject.replace("_", " "), "question": question})


def zero_shot_prompt(instruction: str) -> str:
    """The evaluations' zero-shot system prompt with `instruction` in place."""
    return render(load_prompt("zero_shot_system_prompt"), {"instruction": instruction})


def gsm8k_question(question: str) -> str:
    """The handout's GSM8K question text: `{question}\\nAnswer:`."""
    return render(load_prompt("gsm8k"), {"question": question})


_STATED = re.compile(r"correct answer is\s*:?\s*\(?\**([ABCD])\b", re.IGNORECASE)
_LONE = re.compile(r"^\s*\(?([ABCD])\)?[.:)]?(\s|$)")


def parse_mmlu(output: str) -> str | None:
    """The letter the output states ("The correct answer is B"), or a lone leading letter; else None."""
    stated = _STATED.findall(output)
    if stated:
        return stated[0].upper()
    lone = _LONE.match(output)
    return lone.group(1) if lone else None


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def parse_gsm8k(output: str) -> str | None:
    """The last number in the output (commas dropped, a trailing `.0` kept as written), or None."""
    numbers = _NUMBER.findall(output)
    if not numbers:
        return None
    return numbers[-1].replace(",", "").rstrip(".")
