"""The five-benchmark evaluation suite: vendored data, answer shapes, golden grader rows."""

from __future__ import annotations

import hashlib
import json

import pytest

import envs
from envs.base import DATA_DIR
from envs.numbers import numbers_equal, parse_number
from envs.rewards import cheap_match, r1_zero_reward_fn
from envs.suite import (
    BENCHMARKS,
    clean_answer,
    gold_answers,
    suite_boxed_reward_fn,
    suite_r1_zero_reward_fn,
)

SIZES = {"aime24": 30, "amc23": 83, "math500": 500, "minerva_math": 272, "olympiadbench": 675}
# first 16 hex digits of each vendored file's sha256 (envs/data/README.md lists the same)
DIGESTS = {
    "aime24": "09d25c71b6c2a323",
    "amc23": "1acf00e3602ed7be",
    "math500": "db31cf92e68c16c1",
    "minerva_math": "e1d2b7411eac5a28",
    "olympiadbench": "a0d45fb4dedb83c8",
}


def gt(*answers: str) -> str:
    """A suite ground truth as the loader builds it from stored answers."""
    return json.dumps([clean_answer(a) for a in answers])


# (answer written by the model, stored answers as in the data file, expected answer reward),
# one group per answer shape found in Minerva Math and OlympiadBench (and AIME/AMC).
GOLDEN = [
    # Minerva: a decimal with a trailing newline
    ("9.6", ["9.6\n"], 1),
    ("9.60", ["9.6\n"], 1),
    ("9.7", ["9.6\n"], 0),
    # Minerva: scientific notation, small magnitudes (math-verify's 6-decimal rounding
    # would call all of these equal)
    ("8.224 \\times 10^{-19}", ["8.224 \\times 10^{-19}", "8.224 \\times 10^{-19}\n"], 1),
    ("9.224 \\times 10^{-19}", ["8.224 \\times 10^{-19}", "8.224 \\times 10^{-19}\n"], 0),
    ("-3 \\times 10^{-19}", ["8.224 \\times 10^{-19}"], 0),
    ("8.224e-19", ["8.224 \\times 10^{-19}"], 1),
    ("8.224 \\cdot 10^{-19}", ["8.224 \\times 10^{-19}"], 1),
    ("\\frac{8224}{10^{22}}", ["8.224 \\times 10^{-19}"], 1),
    ("\\frac{9224}{10^{22}}", ["8.224 \\times 10^{-19}"], 0),
    ("3.89 \\times 10^{-10}", ["3.89e-10\n"], 1),
    ("3.98e-10", ["3.89e-10\n"], 0),
    ("1.325 \\times 10^{-27}", ["1.325 \\times 10^{-27}\n"], 1),
    ("1.326 \\times 10^{-27}", ["1.325 \\times 10^{-27}\n"], 0),
    # Minerva: scientific notation, large magnitudes
    ("2.19 \\times 10^6", ["2.19 \\times 10^6", "2.19 \\times 10^{6}"], 1),
    ("2190000", ["2.19 \\times 10^6"], 1),
    ("4.4678 \\times 10^{14}", ["4.4677 \\times 10^{14} Hz\n"], 0),
    # Minerva: units after the number (bare, \text{}, degrees, arcseconds)
    ("4.4677 \\times 10^{14}", ["4.4677 \\times 10^{14} Hz\n"], 1),
    ("4.4677 \\times 10^{14} \\mathrm{Hz}", ["4.4677 \\times 10^{14} Hz\n"], 1),
    ("8.224 \\times 10^{-19} \\text{ J}", ["8.224 \\times 10^{-19}"], 1),
    ("15000", ["15000 \\text{ kcal m}^{-2} \\text{yr}^{-1}\n", "15000\n"], 1),
    ("6.43 \\times 10^{16}", ["6.43 \\times 10^{16}", "6.43 \\times 10^{16} \\text{ cm}^{-3}"], 1),
    ("1950", ["1950^\\circ C\n"], 1),
    ("1950^\\circ \\mathrm{C}", ["1950^\\circ C\n"], 1),
    ("41.8", ["41.8^\\circ\n", "41.8^{\\circ}\n"], 1),
    ("41.9^\\circ", ["41.8^\\circ\n"], 0),
    ("0.003", ["0.003^{\\prime \\prime}\n"], 1),
    ("7.6Z", ["7.6Z"], 1),  # Z is the atomic number, not a unit
    ("7.6", ["7.6Z"], 0),
    # Minerva: several alternatives, any one counts
    ("0.02", ["0.01\n", "0.02\n"], 1),
    ("0.03", ["0.01\n", "0.02\n"], 0),
    ("10^{-3}", ["1 \\times 10^{-3}", "10^{-3}\n"], 1),
    ("0.001", ["1 \\times 10^{-3}", "10^{-3}\n"], 1),
    ("2 \\times 10^{-3}", ["1 \\times 10^{-3}", "10^{-3}\n"], 0),
    ("\\arcsin{\\frac{10}{13}}", ["\\arcsin{\\frac{1}{1.3}}", "\\arcsin{\\frac{10}{13}}\n"], 1),
    ("-\\frac{1}{3}", ["-\\frac{1}{3}\n", "-1/3\n"], 1),
    # Minerva: expressions, complex numbers
    ("1+\\sqrt{3} i", ["1+\\sqrt{3}i\n"], 1),
    ("1-\\sqrt{3} i", ["1+\\sqrt{3}i\n"], 0),
    ("\\frac{x}{2} - \\frac14 + ce^{-2x}", ["\\frac{x}{2} - \\frac{1}{4} + ce^{-2x}"], 1),
    # OlympiadBench: several values in one string, with or without `$` around each
    ("69, 84", ["$69$,$84$"], 1),
    ("84, 69", ["$69$,$84$"], 1),
    ("69", ["$69$,$84$"], 0),
    ("1, 3, 5", ["1,3,5"], 1),
    ("1, 3", ["1,3,5"], 0),
    ("-2, 0, 2", ["$-2,0,2$"], 1),
    ("90^\\circ, 60^\\circ", ["$90^{\\circ}$,$60^{\\circ}$"], 1),
    # OlympiadBench: tuples and lists of tuples
    ("(2,4)", ["$(2,4)$"], 1),
    ("(4,2)", ["$(2,4)$"], 0),
    ("(3,2),(1,1)", ["$(1,1), (3,2)$"], 1),
    # OlympiadBench: percent and degrees
    ("62.5\\%", ["62.5%"], 1),
    ("62.5", ["62.5%"], 1),
    ("8", ["$8 \\%$"], 1),
    ("45", ["$45^{\\circ}$"], 1),
    # OlympiadBench: expressions in n, powers, decimals, sets
    ("\\frac{1}{2n+2}", ["$\\frac{1}{2 n+2}$"], 1),
    ("2n", ["$2 n$"], 1),
    ("2", ["$2 n$"], 0),
    ("2^{1009}", ["$2^{1009}$"], 1),
    ("2^{1008}", ["$2^{1009}$"], 0),
    ("4.25", ["4.25"], 1),
    ("\\frac{17}{4}", ["4.25"], 1),
    ("f(x)=\\frac1x", ["$f(x)=\\frac{1}{x}$"], 1),
    ("(-\\infty, 0) \\cup \\{1\\}", ["$(-\\infty, 0) \\cup\\{1\\}$."], 1),
    # AIME (leading zeros) and AMC (floats)
    ("25", ["025"], 1),
    ("142", ["142"], 1),
    ("142.0", ["142"], 1),
]


@pytest.mark.parametrize(("answer", "stored", "expected"), GOLDEN)
def test_golden_rows_under_both_reward_rules(answer, stored, expected):
    truth = gt(*stored)
    boxed = suite_boxed_reward_fn(f"So the answer is \\boxed{{{answer}}}.", truth)
    tagged = suite_r1_zero_reward_fn(f"Think. </think> <answer> {answer} </answer>", truth)
    assert boxed["answer_reward"] == expected and boxed["format_reward"] == 1.0
    assert tagged["answer_reward"] == expected and tagged["format_reward"] == 1.0


@pytest.mark.parametrize(("answer", "stored", "expected"), GOLDEN)
def test_the_fast_path_never_disagrees(answer, stored, expected):
    fast = suite_boxed_reward_fn.fast(f"\\boxed{{{answer}}}", gt(*stored))
    assert fast is None or fast["answer_reward"] == expected


def test_grade_batch_agrees_with_the_golden_rows():
    responses = [f"\\boxed{{{a}}}" for a, _, _ in GOLDEN]
    got = envs.grade_batch(suite_boxed_reward_fn, responses, [gt(*s) for _, s, _ in GOLDEN])
    assert [r["answer_reward"] for r in got] == [float(e) for _, _, e in GOLDEN]
    assert got.stats.timeouts == 0 and got.stats.errors == 0


def test_r1_zero_reward_fn_compares_small_numbers_by_relative_tolerance():
    gold = "8.224 \\times 10^{-19}"
    for wrong in ("9.224 \\times 10^{-19}", "-3 \\times 10^{-19}", "0"):
        out = r1_zero_reward_fn(f"t </think> <answer> {wrong} </answer>", gold)
        assert out["answer_reward"] == 0.0, wrong
    out = r1_zero_reward_fn("t </think> <answer> 8.224e-19 </answer>", gold)
    assert out["answer_reward"] == 1.0


def test_numbers_compare_by_relative_tolerance_at_any_magnitude():
    for scale in (-30, -19, -6, 0, 6, 19, 30):
        a = parse_number(f"1.5 \\times 10^{{{scale}}}")
        assert numbers_equal(a, a * (1 + parse_number("1e-7")))
        assert not numbers_equal(a, a * (1 + parse_number("1e-5")))
    assert numbers_equal(parse_number("0"), parse_number("0.0"))
    assert not numbers_equal(parse_number("0"), parse_number("1e-30"))
    # integers stay exact, however large
    assert cheap_match("1000001", "1000000") is False


def test_parse_number_reads_literals_and_units_only():
    assert parse_number("-3 \\times 10^{-19}") == parse_number("-3e-19")
    assert parse_number("1,000") == 1000 and parse_number(".5") * 2 == 1
    for not_a_literal in ("2n", "7.6Z", "3, 5", "2^{10}", "x = 3", "\\frac12", "1e9999999", "2 m"):
        assert parse_number(not_a_literal) is None, not_a_literal


def test_loaders_give_the_documented_sizes_and_json_ground_truths():
    for name, size in SIZES.items():
        examples = envs.get_task(name).load("test")
        assert len(examples) == size
        for ex in examples:
            answers = gold_answers(ex.ground_truth)
            assert answers and all(a == a.strip() and a for a in answers)
    minerva = envs.get_task("minerva_math").load("test")
    assert max(len(gold_answers(e.ground_truth)) for e in minerva) == 3
    assert gold_answers(envs.get_task("amc23").load("test", limit=1)[0].ground_truth) == ["142"]


def test_every_stored_answer_grades_as_correct_against_itself():
    for name in BENCHMARKS:
        for ex in envs.get_task(name).load("test"):
            for answer in gold_answers(ex.ground_truth):
                fn = suite_boxed_reward_fn
                assert fn(f"\\boxed{{{answer}}}", ex.ground_truth)["reward"] == 1.0, (name, answer)


def test_vendored_files_are_the_documented_bytes():
    for name, digest in DIGESTS.items():
        data = (DATA_DIR / "eval_suite" / f"{name}.jsonl").read_bytes()
        assert hashlib.sha256(data).hexdigest()[:16] == digest


def test_templates_and_their_reward_rules():
    task = envs.get_task("math500")
    assert task.templates == ("r1_zero", "question_only", "qwen_math")
    ex = task.load("test", limit=1)[0]
    prompt = task.format_prompt(ex, "qwen_math")
    assert prompt.startswith("<|im_start|>system\nPlease reason step by step")
    assert prompt.endswith(ex.question + "<|im_end|>\n<|im_start|>assistant\n")
    assert task.reward_fn("r1_zero") is suite_r1_zero_reward_fn
    assert task.reward_fn("qwen_math") is suite_boxed_reward_fn
    assert task.reward_fn("question_only") is suite_boxed_reward_fn
    with pytest.raises(ValueError, match="template"):
        task.reward_fn("countdown")


def test_a_bad_answer_field_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "p", "answer": ["1"]}\n{"problem": "q", "answer": {"x": 1}}\n')
    with pytest.raises(envs.DataError, match=r"bad\.jsonl:2: field 'answer'"):
        envs.get_task("minerva_math").load("test", path=bad)
