"""The supplement's MMLU and GSM8K question formats and output parsers."""

from __future__ import annotations

import pytest

from envs.supplement_parsing import (
    gsm8k_question,
    mmlu_question,
    parse_gsm8k,
    parse_mmlu,
    zero_shot_prompt,
)


def test_mmlu_question_follows_the_handout_format():
    text = mmlu_question("high_school_physics", "What is g?", ["1", "9.8", "3", "4"])
    assert text.startswith(
        "Answer the following multiple choice question about high school physics."
    )
    assert "Question: What is g?\nA. 1\nB. 9.8\nC. 3\nD. 4\nAnswer:" in text
    assert "{" not in text
    full = zero_shot_prompt(text)
    assert "# Query:\n```" + text + "```" in full
    assert full.endswith("# Answer:\n```\n")
    with pytest.raises(ValueError):
        mmlu_question("x", "q", ["a", "b"])


@pytest.mark.parametrize(
    ("output", "letter"),
    [
        ("The correct answer is B.", "B"),
        ("the correct answer is: (c) because ...", "C"),
        ("D. 4\nIt is four.", "D"),
    ],
)
def test_mmlu_parser_reads_the_stated_letter(output, letter):
    assert parse_mmlu(output) == letter


@pytest.mark.parametrize(
    "output", ["I am not sure.", "The correct answer is E.", "Apples are red."]
)
def test_mmlu_parser_returns_none_when_no_letter(output):
    assert parse_mmlu(output) is None


def test_gsm8k_prompt_and_last_number():
    assert gsm8k_question("How many?") == "How many?\nAnswer:"
    assert parse_gsm8k("She has 3 apples, then 5 more, so 8.") == "8"
    assert parse_gsm8k("The total is $1,250.") == "1250"
    assert parse_gsm8k("It drops to -4.5 degrees") == "-4.5"


def test_gsm8k_parser_returns_none_without_a_number():
    assert parse_gsm8k("I cannot answer that.") is None
