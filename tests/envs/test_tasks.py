"""Loaders (validation errors name file, line and field), splits, prompts, Countdown, SFT data."""

from __future__ import annotations

import gzip
import hashlib
import json
from fractions import Fraction
from pathlib import Path

import pytest

import envs
from envs import DataError, countdown_reward_fn
from envs.base import PROMPT_DIR
from envs.countdown import MAX_ANSWER_CHARS, check_countdown_answer, evaluate
from envs.sft_data import build_examples, examples_from_traces, filter_correct, main

MATH_ROW = {
    "problem": "What is $1+1$?",
    "solution": "It is $\\boxed{2}$.",
    "answer": "2",
    "subject": "Algebra",
    "level": 1,
    "unique_id": "train/algebra/1.json",
}
GSM8K_ROW = {"question": "How many?", "answer": "Add them: <<1+1=2>>2.\n#### 1,002"}
COUNTDOWN_ROW = {"nums": [1, 2, 3], "target": 6, "solution": "1 + 2 + 3"}


def _write(path: Path, rows: list) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _drop(row: dict, key: str) -> dict:
    return {k: v for k, v in row.items() if k != key}


MALFORMED = [
    # (task, good row, bad row, field named in the error)
    ("math", MATH_ROW, _drop(MATH_ROW, "problem"), "problem"),
    ("math", MATH_ROW, _drop(MATH_ROW, "answer"), "answer"),
    ("math", MATH_ROW, {**MATH_ROW, "level": "Level 3"}, "level"),
    ("math", MATH_ROW, {**MATH_ROW, "unique_id": 7}, "unique_id"),
    ("gsm8k", GSM8K_ROW, _drop(GSM8K_ROW, "question"), "question"),
    ("gsm8k", GSM8K_ROW, {**GSM8K_ROW, "answer": "no final line"}, "answer"),
    ("gsm8k", GSM8K_ROW, {**GSM8K_ROW, "answer": "x\n#### many"}, "answer"),
    ("countdown", COUNTDOWN_ROW, _drop(COUNTDOWN_ROW, "target"), "target"),
    ("countdown", COUNTDOWN_ROW, {**COUNTDOWN_ROW, "nums": "1 2 3"}, "nums"),
    ("countdown", COUNTDOWN_ROW, {**COUNTDOWN_ROW, "nums": [1, 2.5]}, "nums"),
    ("countdown", COUNTDOWN_ROW, {**COUNTDOWN_ROW, "target": True}, "target"),
    ("countdown", COUNTDOWN_ROW, {**COUNTDOWN_ROW, "nums": [1, -2, 3]}, "nums"),
]


@pytest.mark.parametrize(("task", "good", "bad", "field"), MALFORMED)
def test_malformed_record_names_file_line_and_field(tmp_path, task, good, bad, field):
    path = _write(tmp_path / f"{task}_bad.jsonl", [good, good, bad, good])
    with pytest.raises(DataError) as err:
        envs.get_task(task).load("train", path=path)
    msg = str(err.value)
    assert f"{path}:3" in msg and repr(field) in msg, msg
    assert err.value.line == 3


@pytest.mark.parametrize("task", ["math", "gsm8k", "countdown"])
def test_invalid_json_and_empty_file_are_errors(tmp_path, task):
    path = _write(tmp_path / "broken.jsonl", ['{"problem": "x"', "[1, 2]"])
    with pytest.raises(DataError, match=r"broken\.jsonl:1: invalid JSON"):
        envs.get_task(task).load("train", path=path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"empty\.jsonl: empty file"):
        envs.get_task(task).load("train", path=empty)
    with pytest.raises(DataError, match="not found"):
        envs.get_task(task).load("train", path=tmp_path / "missing.jsonl")


def test_non_object_record_is_an_error(tmp_path):
    path = _write(tmp_path / "list.jsonl", [GSM8K_ROW, "[1, 2]"])
    with pytest.raises(DataError, match=r"list\.jsonl:2: record is not a JSON object"):
        envs.get_task("gsm8k").load("train", path=path)


def test_gzip_files_read_transparently(tmp_path):
    path = tmp_path / "g.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps(GSM8K_ROW) + "\n")
    (ex,) = envs.get_task("gsm8k").load("test", path=path)
    assert ex.ground_truth == "1002"
    assert ex.extra["solution"] == "Add them: 2."


def test_math_train_drops_empty_answers_and_test_rows(tmp_path):
    rows = [
        MATH_ROW,
        {**MATH_ROW, "answer": "", "unique_id": "train/number_theory/7115.json"},
        {**MATH_ROW, "unique_id": "test/algebra/5.json"},
    ]
    path = _write(tmp_path / "m.jsonl", rows)
    math = envs.get_task("math")
    assert [e.id for e in math.load("train", path=path)] == ["train/algebra/1.json"]
    assert len(math.load("train12k", path=path)) == 2


def test_math_ground_truth_is_the_stripped_answer(tmp_path):
    path = _write(tmp_path / "m.jsonl", [{**MATH_ROW, "answer": " \\frac{1}{2} \n"}])
    (ex,) = envs.get_task("math").load("train", path=path)
    assert ex.ground_truth == "\\frac{1}{2}"


def test_math_test_split_is_the_full_test_set_and_holds_math500():
    math = envs.get_task("math")
    test_ids = [e.id for e in math.load("test")]
    assert len(set(test_ids)) == len(test_ids) == 5000
    assert all(i.startswith("test/") for i in test_ids)
    assert {e.id for e in math.load("math500")} <= set(test_ids)


def test_limit_keeps_the_first_rows_and_refuses_a_negative_one():
    gsm8k = envs.get_task("gsm8k")
    assert gsm8k.load("test", limit=0) == []
    assert gsm8k.load("test", limit=3) == gsm8k.load("test")[:3]
    with pytest.raises(ValueError, match="limit"):
        gsm8k.load("test", limit=-1)


def test_vendored_splits_have_the_documented_sizes():
    math = envs.get_task("math")
    assert len(math.load("math500")) == 500
    train = math.load("train")
    assert len(train) == 7498  # 7,500 minus the two empty answers
    assert all(e.id.startswith("train/") and e.ground_truth for e in train)
    assert len(math.load("test", limit=10)) == 10
    assert len(envs.get_task("gsm8k").load("test")) == 1319
    assert len(envs.get_task("countdown").load("test")) == 1024


def test_math_refuses_overlapping_train_and_eval_splits():
    math = envs.get_task("math")
    math.check_split_pair("train", "test")
    math.check_split_pair("train", "math500")
    math.check_split_pair("train12k", "math500")
    with pytest.raises(ValueError, match="4,500"):
        math.check_split_pair("train12k", "test")
    with pytest.raises(ValueError):
        math.check_split_pair("nope", "test")


@pytest.mark.parametrize(
    ("train", "eval_"),
    [
        ("train12k", "test"),
        ("test", "math500"),  # MATH-500 is a subset of the 5k test set
        ("math500", "test"),
        ("train", "train"),
        ("test", "test"),
        ("math500", "math500"),
    ],
)
def test_math_refuses_every_overlapping_pair(train, eval_):
    with pytest.raises(ValueError, match="overlap"):
        envs.get_task("math").check_split_pair(train, eval_)


def test_gsm8k_ground_truth_strips_thousands_commas():
    rows = envs.get_task("gsm8k").load("train")
    assert all("," not in e.ground_truth and "#" not in e.ground_truth for e in rows)
    assert any(len(e.ground_truth) >= 4 for e in rows)


def test_unknown_task_split_and_template():
    with pytest.raises(ValueError, match="unknown task"):
        envs.get_task("chess")
    with pytest.raises(ValueError, match="no split"):
        envs.get_task("gsm8k").load("validation")
    ex = envs.get_task("gsm8k").load("test", limit=1)[0]
    with pytest.raises(ValueError, match="template"):
        envs.get_task("gsm8k").format_prompt(ex, "countdown")


# ----------------------------------------------------------------------------- prompts

PROMPT_SHA256 = {
    "r1_zero.prompt": "56213732da87e12ace60a2b88a16df0af18280fb0563a957cbecc938a6a2ac0e",
    "question_only.prompt": "bf085a6e12c9d0e23a9dd157df084f933b2ef021caba82def1494bfb84a723c9",
    "alpaca_sft.prompt": "fbd4a4672e92a2ecb3a849a6417ce7be683dc02382edc11a9ce0d58a9ac9449e",
    "zero_shot_system_prompt.prompt": "1b4854e31925e2823f701de2d7ac895297dbae563d03077a68713ef420075180",
}


@pytest.mark.parametrize(("name", "digest"), PROMPT_SHA256.items())
def test_prompts_are_byte_identical_to_the_handout(name, digest):
    assert hashlib.sha256((PROMPT_DIR / name).read_bytes()).hexdigest() == digest


def test_format_prompt_keeps_latex_braces():
    math = envs.get_task("math")
    ex = math.load("math500", limit=1)[0]
    prompt = math.format_prompt(ex, "r1_zero")
    assert prompt.endswith("Assistant: <think>")
    assert ex.question in prompt
    assert math.format_prompt(ex, "question_only") == ex.question


def test_countdown_prompt_is_r1_style():
    cd = envs.get_task("countdown")
    ex = cd.load("test", limit=1)[0]
    prompt = cd.format_prompt(ex, "countdown")
    assert prompt.endswith("Assistant: <think>")
    assert str(ex.extra["nums"]) in prompt and str(ex.extra["target"]) in prompt
    assert cd.reward_fn("countdown") is countdown_reward_fn


# ----------------------------------------------------------------------------- Countdown

GT = json.dumps({"nums": [44, 19, 35], "target": 98})


def C(answer: str, sep: str = " ") -> str:
    return f"steps </think>{sep}<answer> {answer} </answer>"


@pytest.mark.parametrize(
    ("response", "answer", "fmt"),
    [
        (C("44 + (19 + 35)"), 1, 1),  # correct
        (C("(44+19)+35", sep="\n"), 1, 1),  # any whitespace between the tags
        (C("35 + 19 + 44", sep=""), 1, 1),
        (C("44 + 19 - 35"), 0, 1),  # wrong value
        (C("44 + 44 + 10"), 0, 1),  # a number reused (and one not given)
        (C("44 + 19 + 35 + 35"), 0, 1),  # a number used twice
        (C("44 + 19"), 0, 1),  # a number missing
        (C("44 + 19 + 35 = 98"), 0, 1),  # disallowed token
        (C("44 + 19 + 35 ** 1"), 0, 1),  # disallowed operator
        (C("__import__('os')"), 0, 1),  # never evaluated
        (C("44.0 + 19 + 35"), 0, 1),  # decimals are not integers of the list
        (C("(44 + 19 + 35) / (35 - 35)"), 0, 1),  # division by zero
        (C("(44 + 19 + 35"), 0, 1),  # unbalanced parenthesis
        (C("\u0664\u0664 + 19 + 35"), 0, 1),  # non-ASCII digits (Arabic-Indic 44)
        (C("\uff14\uff14 + 19 + 35"), 0, 1),  # non-ASCII digits (full-width 44)
        ("steps <answer> 44 + 19 + 35 </answer>", 0, 0),  # no </think>
        ("steps </think> <answer> 44 + 19 + 35", 0, 0),  # no closing tag
        ("<answer> 44 + 19 + 35 </answer> </think> <answer> 9", 0, 0),  # closing tag only before
    ],
)
def test_countdown_reward(response, answer, fmt):
    expected = {
        "reward": float(answer),
        "format_reward": float(fmt),
        "answer_reward": float(answer),
    }
    assert countdown_reward_fn(response, GT) == expected


def test_countdown_exact_fractions():
    assert check_countdown_answer("(8 / 3) * 3 * 1", [8, 3, 3, 1], 8)
    assert check_countdown_answer("6 / (1 - 3 / 4)", [6, 1, 3, 4], 24)
    assert not check_countdown_answer("((" * 200 + "1" + "))" * 200, [1], 1)  # too deep


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("44 - 19 + 35", 60),  # left to right, not 44 - (19 + 35)
        ("10 - 2 - 3", 5),
        ("8 / 4 / 2", 1),  # not 8 / (4 / 2)
        ("8 / 4 * 2", 4),
        ("2 + 3 * 4", 14),  # * binds tighter than +
        ("2 * 3 - 4 / 2", 4),
        ("(2 + 3) * 4", 20),
        ("-2 * 3", -6),  # unary minus
        ("44 - -19", 63),
        ("7 / 2", Fraction(7, 2)),  # exact, not truncated
    ],
)
def test_countdown_evaluate_precedence_and_associativity(expr, value):
    assert evaluate(expr)[0] == value


def test_countdown_each_given_number_exactly_once_even_when_the_value_is_right():
    nums = [2, 3, 5]
    assert check_countdown_answer("2 + 3 + 5", nums, 10)
    assert check_countdown_answer("5 - -3 + 2", nums, 10)  # unary minus introduces no number
    assert not check_countdown_answer("2 * 5", nums, 10)  # 3 unused
    assert not check_countdown_answer("2 * 5 + 3 - 3", nums, 10)  # 3 used twice
    assert not check_countdown_answer("5 + 5", nums, 10)  # 5 twice, 2 and 3 unused
    assert not check_countdown_answer("2 + 3 + 5 + 0", nums, 10)  # 0 is not given


def test_countdown_value_must_equal_the_target_exactly():
    assert check_countdown_answer("1 / 49 * 49", [1, 49, 49], 1)  # 0.999... in floats
    assert not check_countdown_answer("7 / 2", [7, 2], 3)  # 3.5 is not 3
    assert not check_countdown_answer("7 / 2", [7, 2], 4)


def test_countdown_rejects_trailing_tokens_and_overlong_answers():
    assert not check_countdown_answer("2 + 3 + 5 4", [2, 3, 5], 10)
    assert not check_countdown_answer("2 + 3 + 5)", [2, 3, 5], 10)
    padded = "2 + 3 + 5".ljust(MAX_ANSWER_CHARS)
    assert check_countdown_answer(padded, [2, 3, 5], 10)
    assert not check_countdown_answer(padded + " ", [2, 3, 5], 10)


def test_countdown_traces_split_the_reasoning_from_the_equation():
    # The first train row: answer "19 + 35 = 54\n44 + 54 = 98\nTherefore, the final equation
    # is 44 + (19 + 35) </think>\n<answer> 44 + (19 + 35) </answer>".
    (t,) = envs.get_task("countdown").traces("train", limit=1)
    assert t.reasoning == (
        "19 + 35 = 54\n44 + 54 = 98\nTherefore, the final equation is 44 + (19 + 35)"
    )
    assert t.answer == "44 + (19 + 35)"
    assert json.loads(t.ground_truth) == {"nums": [44, 19, 35], "target": 98}


def test_countdown_reference_solutions_all_score_one():
    cd = envs.get_task("countdown")
    exs = cd.load("test")
    responses = [C(e.extra["solution"]) for e in exs]
    scores = envs.grade_batch(countdown_reward_fn, responses, [e.ground_truth for e in exs])
    assert all(s["reward"] == 1.0 for s in scores)
    assert scores.stats.pooled == 0


# ----------------------------------------------------------------------------- SFT data


def test_sft_examples_are_r1_zero_format():
    ex = build_examples("gsm8k", limit=3)
    assert len(ex) == 3
    for e in ex:
        assert e["prompt"].endswith("Assistant: <think>")
        assert e["response"].startswith(" ")
        assert e["response"].endswith(f"</think> <answer> {e['ground_truth']} </answer>")
        assert envs.r1_zero_reward_fn(e["response"], e["ground_truth"])["reward"] == 1.0
    math = build_examples("math", limit=2)
    assert "\\boxed" in math[0]["response"]


def test_filter_keeps_only_correct_traces():
    traces = [
        envs.Trace("1+1?", "1 + 1 = 2.", "2", "2"),
        envs.Trace("1+2?", "1 + 2 = 4.", "4", "3"),  # wrong on purpose
        envs.Trace("half?", "one over two", "\\frac{1}{2}", "0.5"),
    ]
    kept, stats = filter_correct(examples_from_traces(traces))
    assert [k["ground_truth"] for k in kept] == ["2", "0.5"]
    assert stats["total"] == 3 and stats["kept"] == 2


def test_sft_cli_writes_jsonl(tmp_path):
    out = tmp_path / "sft.jsonl"
    assert main(["--task", "countdown", "--limit", "5", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and set(rows[0]) == {"prompt", "response", "ground_truth"}


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_non_utf8_byte_is_named_by_file_and_line(tmp_path, suffix):
    """What `rrl sft`, `rrl dpo` and `rrl eval` read: a bad byte names its file and line, not
    an offset into a decoding block."""
    from envs.base import read_jsonl

    body = b'{"question": "1+1"}\n{"question": "caf\xe9"}\n'
    path = tmp_path / f"data{suffix}"
    path.write_bytes(gzip.compress(body) if suffix.endswith(".gz") else body)
    with pytest.raises(
        DataError, match=rf"data{suffix}:2: not UTF-8 text \(byte 0xe9 at column 18\)"
    ):
        list(read_jsonl(path))
