"""Golden table for the reward functions, plus extraction details."""

from __future__ import annotations

import pytest
from project_root import ROOT

import envs
from envs.rewards import (
    answers_match,
    cheap_match,
    last_boxed,
    normalize_answer,
    question_only_reward_fn,
    r1_zero_reward_fn,
)


def R(answer: str) -> str:
    """An r1_zero response with a well-formed answer."""
    return f"Let me think. </think> <answer> {answer} </answer>"


PM = "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"

# (response, ground truth, expected answer reward, expected format reward) for r1_zero.
R1_GOLDEN = [
    # fractions vs decimals, \frac vs /, \dfrac
    (R("0.5"), "\\frac{1}{2}", 1, 1),
    (R("\\frac{1}{2}"), "0.5", 1, 1),
    (R("1/2"), "\\frac{1}{2}", 1, 1),
    (R("\\dfrac{1}{2}"), "\\frac{1}{2}", 1, 1),
    (R("\\tfrac{3}{4}"), "0.75", 1, 1),
    (R("0.75"), "\\dfrac{3}{4}", 1, 1),
    (R("\\frac{3}{4}"), "\\frac{4}{3}", 0, 1),
    (R("1/3"), "\\frac{1}{3}", 1, 1),
    (R("0.33"), "\\frac{1}{3}", 0, 1),
    (R("\\frac{-2}{3}"), "-\\frac{2}{3}", 1, 1),
    (R("-2/3"), "-\\frac{2}{3}", 1, 1),
    (R("2/3"), "-\\frac{2}{3}", 0, 1),
    # a prefix of the gold is another answer (string comparisons must be whole)
    (R("1"), "12", 0, 1),
    (R("3.1"), "3.14", 0, 1),
    (R("x"), "x + 1", 0, 1),
    (R("\\frac12"), "\\frac{1}{2}", 1, 1),
    # \boxed inside the answer tag
    (R("\\boxed{7}"), "7", 1, 1),
    (R("The answer is \\boxed{7}."), "7", 1, 1),
    (R("\\boxed{\\frac{1}{2}}"), "0.5", 1, 1),
    (R("\\boxed{8}"), "7", 0, 1),
    # \text{}
    (R("\\text{Evelyn}"), "\\text{Evelyn}", 1, 1),
    (R("Evelyn"), "\\text{Evelyn}", 1, 1),
    (R("\\text{(C)}"), "\\text{(C)}", 1, 1),
    (R("(C)"), "\\text{(C)}", 1, 1),
    (R("(D)"), "\\text{(C)}", 0, 1),
    # units, degrees, dollars
    (R("5 \\text{ cm}"), "5", 1, 1),
    (R("30^\\circ"), "30", 1, 1),
    (R("30"), "30^\\circ", 1, 1),
    (R("90^{\\circ}"), "90^\\circ", 1, 1),
    (R("45^\\circ"), "30^\\circ", 0, 1),
    (R("\\$18"), "18", 1, 1),
    # percent
    (R("50\\%"), "50", 1, 1),
    (R("50"), "50\\%", 1, 1),
    (R("25\\%"), "50\\%", 0, 1),
    # thousands commas
    (R("1,000"), "1000", 1, 1),
    (R("1000"), "1,000", 1, 1),
    (R("1,234,567"), "1234567", 1, 1),
    (R("1,001"), "1000", 0, 1),
    # negatives
    (R("-3"), "-3", 1, 1),
    (R("3"), "-3", 0, 1),
    (R("-0.5"), "-\\frac{1}{2}", 1, 1),
    # x = 3 vs 3
    (R("x = 3"), "3", 1, 1),
    (R("x=3"), "3", 1, 1),
    (R("x = 4"), "3", 0, 1),
    # intervals
    (R("(1, 2]"), "(1,2]", 1, 1),
    (R("[1,2)"), "(1,2]", 0, 1),
    (R("(-\\infty, 3)"), "(-\\infty,3)", 1, 1),
    (R("(-\\infty, 3]"), "(-\\infty,3)", 0, 1),
    (R("x \\in [2,5)"), "[2,5)", 1, 1),
    # tuples
    (R("(3, \\frac{\\pi}{2})"), "\\left( 3, \\frac{\\pi}{2} \\right)", 1, 1),
    (R("(1,2,3)"), "(1, 2, 3)", 1, 1),
    (R("(1,3,2)"), "(1, 2, 3)", 0, 1),
    # pi
    (R("2\\pi"), "2\\pi", 1, 1),
    (R("\\pi/2"), "\\frac{\\pi}{2}", 1, 1),
    (R("6.28"), "2\\pi", 0, 1),
    (R("3.14"), "\\pi", 0, 1),
    # square roots
    (R("\\sqrt{2}/2"), "\\frac{\\sqrt{2}}{2}", 1, 1),
    (R("\\frac{1}{\\sqrt{2}}"), "\\frac{\\sqrt{2}}{2}", 1, 1),
    (R("\\sqrt{27}"), "3\\sqrt{3}", 1, 1),
    (R("11\\sqrt2"), "11\\sqrt{2}", 1, 1),
    (R("\\sqrt{3}"), "3\\sqrt{3}", 0, 1),
    # matrices
    (R(PM), PM, 1, 1),
    (R(PM.replace("pmatrix", "bmatrix")), PM, 1, 1),
    (R(PM.replace("4", "5")), PM, 0, 1),
    (
        R("\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}"),
        "\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}",
        1,
        1,
    ),
    # other forms
    (R("x^2+7x+10"), "x^2 + 7x + 10", 1, 1),
    (R("3, 5"), "5, 3", 1, 1),
    (R("5.0"), "5", 1, 1),
    (R("5.01"), "5", 0, 1),
    (R("\\infty"), "\\infty", 1, 1),
    (R("$7$"), "7", 1, 1),
    (R(" "), "7", 0, 1),  # well-formed but empty answer
    # the last <answer> counts
    ("a </think> <answer> 3 </answer> b <answer> 7 </answer>", "7", 1, 1),
    ("a </think> <answer> 7 </answer> b <answer> 3 </answer>", "7", 0, 1),
    # format failures: reward, format and answer all 0
    ("a </think><answer> 7 </answer>", "7", 0, 0),  # no space between the tags
    ("a </think>  <answer> 7 </answer>", "7", 0, 0),  # two spaces
    ("a </think> <answer> 7", "7", 0, 0),  # missing closing tag
    ("The answer is 7", "7", 0, 0),  # no tags
    ("<answer> 7 </answer>", "7", 0, 0),  # no </think>
    ("</answer> a </think> <answer> 7", "7", 0, 0),  # closing tag only before
    ("\\boxed{7}", "7", 0, 0),  # a box is not an answer tag
    # review of the grader (the first row of each group failed before its fix)
    # a comma followed by a space separates list items, not thousands (MATH train has the
    # gold "81, 256", the two solutions of an equation)
    (R("81256"), "81, 256", 0, 1),
    (R("1100"), "1, 100", 0, 1),
    (R("1, 100"), "1100", 0, 1),
    (R("81, 256"), "81, 256", 1, 1),
    (R("256, 81"), "81, 256", 1, 1),
    (R("81,256"), "81256", 1, 1),  # no space: a thousands separator
    # \left and \right are dropped as commands, not as prefixes of \leftarrow/\rightarrow
    (R("\\rightarrow"), "\\leftarrow", 0, 1),
    (R("\\leftarrow"), "\\leftarrow", 1, 1),
    (R("\\left[ 1, 2 \\right)"), "[1,2)", 1, 1),
    # golds ending in a sentence period (MATH has six) still parse
    (R("7"), "7\\text{ hours}.", 1, 1),
    (R("30.0"), "30^\\circ.", 1, 1),
    (R("\\frac{7}{5}+\\frac{i}{5}"), "\\frac{7}{5} + \\frac{1}{5} i.", 1, 1),
    (R("31"), "30^\\circ.", 0, 1),
    # ... while an answer's own final period is left to math-verify (the last number counts)
    (R("The answer is 5."), "5", 1, 1),
    (R("The final answer is $9$."), "9", 1, 1),
    # a box that never closes is a wrong answer (as in the handout), not ungraded text
    (R("\\boxed{7"), "7", 0, 1),
    (R("\\boxed{\\frac{1}{2}"), "0.5", 0, 1),
    # mutation audit: rows that pin behaviour no earlier row did
    ("<answer> 3 </answer> </think> <answer> 7", "3", 0, 0),  # </answer> only before the separator
    (R("007"), "7", 1, 1),  # an integer's leading zeros
    (R("-0"), "0", 1, 1),
    ("x </think> <answer>5.</answer>", "5", 1, 1),  # math-verify parses nothing in `5.`
    (R("(-\\infty, 3)"), "x < 3", 1, 1),  # verify(gold, pred): swapped, math-verify says no
]

Q_GOLDEN = [
    ("so the answer is \\boxed{7}.", "7", 1, 1),
    ("\\boxed{3} no wait, \\boxed{7}", "7", 1, 1),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1, 1),
    ("\\boxed{8}", "7", 0, 1),
    ("The answer is 7", "7", 0, 0),
    ("\\boxed{7", "7", 0, 0),  # unclosed box
    ("\\boxed{x = 3}", "3", 1, 1),
    ("\\boxed{81256}", "81, 256", 0, 1),
    ("so \\boxed{7\\text{ hours}}", "7\\text{ hours}.", 1, 1),
]


# Where our graders differ from the handout's (cs336_alignment/drgrpo_grader.py, read, not run
# here), as docs/contract.md's "How our r1_zero grader differs from the handout's" states. Rows:
# (difference, template, response, ground truth, ours (answer, format), handout's (answer,
# format)); the handout's values follow from its code: format needs `</think> <answer>` and
# `</answer>` anywhere; the answer is everything after the last `<answer>` with `</answer>`
# deleted; the last `\boxed` is unwrapped (`\fbox` only searched when there is no `\boxed`,
# and never unwrapped), an unclosed one scoring 0; its default fast mode compares with string
# normalizers and sympy, where two fractions must be written identically and an integer gold
# needs an integer answer.
TAGS, BOX, FBOX, FRAC = "Tag order", "Last closed box", "`\\fbox`", "Unreduced fractions"
HANDOUT_DIFFERENCES = [
    # `</answer>` must follow `</think> <answer>`; the last complete pair is the answer
    (TAGS, "r1_zero", "<answer> 3 </answer> </think> <answer> 7", "7", (0, 0), (1, 1)),
    (TAGS, "r1_zero", "a </think> <answer> 7 </answer> b <answer> 3", "7", (1, 1), (0, 1)),
    (TAGS, "r1_zero", "a </think> <answer> 7 </answer> and that is all", "7", (1, 1), (0, 1)),
    # an unclosed last box falls back to the last box that closes
    (BOX, "r1_zero", R("\\boxed{3} then \\boxed{7"), "3", (1, 1), (0, 1)),
    (BOX, "r1_zero", R("\\boxed{\\frac{1}{2}} or \\boxed{0.6"), "0.5", (1, 1), (0, 1)),
    # \fbox{} is a box like \boxed{}; the last of either counts
    (FBOX, "r1_zero", R("\\boxed{3}, no: \\fbox{7}"), "7", (1, 1), (0, 1)),
    (FBOX, "question_only", "\\fbox{7}", "7", (1, 1), (0, 0)),
    (FBOX, "question_only", "\\boxed{3} no wait, \\fbox{7}", "7", (1, 1), (0, 1)),
    # equal values are equal: unreduced fractions are accepted
    (FRAC, "r1_zero", R("2/4"), "1/2", (1, 1), (0, 1)),
    (FRAC, "r1_zero", R("\\frac{2}{4}"), "\\frac{1}{2}", (1, 1), (0, 1)),
    (FRAC, "r1_zero", R("6/3"), "2", (1, 1), (0, 1)),
    (FRAC, "question_only", "\\boxed{\\frac{6}{3}}", "2", (1, 1), (0, 1)),
]
R1_GOLDEN += [(r, gt, *ours) for _, t, r, gt, ours, _ in HANDOUT_DIFFERENCES if t == "r1_zero"]
Q_GOLDEN += [(r, gt, *ours) for _, t, r, gt, ours, _ in HANDOUT_DIFFERENCES if t == "question_only"]


def _expected(answer: int, fmt: int) -> dict:
    return {"reward": float(answer), "format_reward": float(fmt), "answer_reward": float(answer)}


@pytest.mark.parametrize(("response", "gt", "answer", "fmt"), R1_GOLDEN)
def test_r1_zero_golden(response, gt, answer, fmt):
    assert r1_zero_reward_fn(response, gt) == _expected(answer, fmt)


@pytest.mark.parametrize(("response", "gt", "answer", "fmt"), Q_GOLDEN)
def test_question_only_golden(response, gt, answer, fmt):
    assert question_only_reward_fn(response, gt) == _expected(answer, fmt)


@pytest.mark.parametrize(
    ("difference", "template", "response", "gt", "ours", "handout"),
    HANDOUT_DIFFERENCES,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(HANDOUT_DIFFERENCES)],
)
def test_differences_from_the_handout_grader(difference, template, response, gt, ours, handout):
    """Each row is a case where we score differently from the handout's drgrpo grader, as the
    contract says; a change of our grader that makes a row agree with the handout shows up here."""
    fn = r1_zero_reward_fn if template == "r1_zero" else question_only_reward_fn
    assert fn(response, gt) == _expected(*ours)
    assert ours != handout


def test_contract_names_every_difference_from_the_handout_grader():
    contract = (ROOT / "docs/contract.md").read_text(encoding="utf-8")
    start = contract.index("## How our r1_zero grader differs from the handout's")
    end = contract.find("\n## ", start + 1)
    section = contract[start : end if end != -1 else len(contract)]
    for difference in sorted({row[0] for row in HANDOUT_DIFFERENCES}):
        assert f"**{difference}.**" in section, difference  # the bullet that explains it


def test_grade_batch_agrees_with_golden_table():
    responses = [row[0] for row in R1_GOLDEN]
    gts = [row[1] for row in R1_GOLDEN]
    expected = [_expected(a, f) for _, _, a, f in R1_GOLDEN]
    got = envs.grade_batch(envs.r1_zero_reward_fn, responses, gts, timeout=10)
    assert list(got) == expected
    assert got.stats.timeouts == 0 and got.stats.errors == 0


def test_rewards_are_floats_with_three_keys():
    out = r1_zero_reward_fn(R("1"), "1")
    assert set(out) == {"reward", "format_reward", "answer_reward"}
    assert all(type(v) is float for v in out.values())


def test_last_boxed_matches_braces():
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("\\boxed 5") == "5"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed{unclosed") is None


def test_cheap_path_decides_integers_only():
    assert cheap_match("1,000", "1000") is True
    assert cheap_match("12", "13") is False
    assert cheap_match("0.5", "\\frac{1}{2}") is None  # left to math-verify
    assert normalize_answer("\\dfrac{1}{2}") == normalize_answer("\\frac{1}{2}")


# Forms the cheap check must decide equal by itself, so grade_batch keeps them in-process.
CHEAP_EQUAL = [
    ("\\text{Evelyn}", "Evelyn"),  # \text{} unwrapped
    ("x^2 + 7x + 10", "x^2+7x+10"),  # whitespace
    ("\\left( 1, 2 \\right)", "(1,2)"),  # \left / \right
    ("30^\\circ", "30"),  # degree, percent and dollar signs
    ("50\\%", "50"),
    ("\\$18", "18"),
    ("\\dfrac{1}{2}", "\\tfrac{1}{2}"),
    ("1,000", "1000"),
    ("EVELYN", "evelyn"),
]


@pytest.mark.parametrize(("pred", "gold"), CHEAP_EQUAL)
def test_cheap_check_decides_normalized_forms(pred, gold):
    assert cheap_match(pred, gold) is True
    assert cheap_match(gold, pred) is True


def test_answers_match_is_gold_first():
    # A huge integer against an integer gold is decided without math-verify.
    assert answers_match("9" * 10_000, "7") is False


def test_extraction_is_linear_on_adversarial_responses():
    """50,000 unclosed tags or boxes: linear extraction takes milliseconds, a quadratic scan
    billions of steps. Timed in CPU time of this process, which other jobs on a loaded
    machine do not inflate (wall time did: this failed with the machine at load 8)."""
    import time

    many_tags = "x </think> <answer></answer>" + "<answer>" * 50_000
    many_boxes = "\\boxed{7} " + "\\boxed{" * 50_000
    t0 = time.process_time()
    assert r1_zero_reward_fn(many_tags, "1") == {
        "reward": 0.0,
        "format_reward": 1.0,
        "answer_reward": 0.0,
    }
    assert question_only_reward_fn(many_boxes, "7")["reward"] == 1.0
    assert time.process_time() - t0 < 1.0


def test_reward_fn_works_off_the_main_thread():
    """math-verify's signal timeout is main-thread only; elsewhere it is switched off."""
    import threading

    out = {}

    def run():
        out["r"] = r1_zero_reward_fn(R("\\frac{1}{2}"), "0.5")

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=30)
    assert out["r"]["reward"] == 1.0


@pytest.mark.parametrize(
    "answer",
    ["5\x00", "\x005", "\x1f5", "5\x85", "\ud800 5", "\ud8005", "5\x07"],
    ids=[
        "nul-after",
        "nul-before",
        "unit-separator",
        "next-line",
        "surrogate-space",
        "surrogate",
        "bell",
    ],
)
def test_control_characters_and_lone_surrogates_are_not_digits(answer):
    """A control character or lone surrogate makes an answer wrong, though `str.split` or
    math-verify would otherwise drop it and read `5`; tab and newline stay whitespace."""
    from envs import r1_zero_reward_fn
    from envs.rewards import answers_match

    assert answers_match(answer, "5") is False
    assert r1_zero_reward_fn(f"x</think> <answer>{answer}</answer>", "5")["answer_reward"] == 0.0
    assert r1_zero_reward_fn("x</think> <answer>5\t\n</answer>", "5")["answer_reward"] == 1.0
