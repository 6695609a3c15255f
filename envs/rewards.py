"""Reward functions: `fn(response, ground_truth) -> {"reward", "format_reward", "answer_reward"}`.

* `r1_zero_reward_fn`: format 1 only if the response contains `</think> <answer>` and, after it,
  `</answer>`. The answer is the text of the last complete `<answer>...</answer>`, with the last
  `\\boxed{}` or `\\fbox{}` that closes inside it unwrapped (when no box closes, a box is a
  wrong answer, as in the handout). reward = answer reward; format 0 implies answer 0.
  Where this differs from the handout's `drgrpo_grader` (tag order, the last closed box,
  `\\fbox`, unreduced fractions) and why: docs/contract.md, "How our r1_zero grader differs
  from the handout's"; `HANDOUT_DIFFERENCES` in tests/envs/test_rewards.py pins it.
* `question_only_reward_fn`: the answer is the content of the last `\\boxed{}` (or `\\fbox{}`);
  no box means format 0 (and answer 0).
* `countdown_reward_fn`: r1 format with any whitespace between `</think>` and `<answer>`; the
  answer must be an arithmetic expression (+ - * /, parentheses) using each given number exactly
  once and equal to the target (see `envs.countdown`).

Answer equivalence (`answers_match`): a cheap normalized string comparison first (numeric
literals, with scientific notation and units, compared by relative tolerance: `envs.numbers`),
then math-verify (`parse` both sides wrapped in `\\boxed{}`, then `verify(gold, pred)`, gold
first; two plain numbers by relative tolerance, never by math-verify's 6-decimal rounding).

Time limits: wherever these functions are called, an answer that needs math-verify is decided
under a hard limit of `HARD_TIME_LIMIT` seconds: the comparison runs in one of
`envs.grade_batch`'s worker processes, which is killed when it overruns (that also stops code
stuck in C, such as a huge integer power, where math-verify's `signal.alarm` cannot). An answer
that overruns scores 0 and a warning says so (on the `envs.grader` logger). Inside those workers
the comparison runs in-process; setting `HARD_TIME_LIMIT = None` does the same in the caller
(then only math-verify's own `MATH_VERIFY_TIMEOUT`, on the main thread, limits it). For many
responses `envs.grade_batch` is the faster way: it grades in parallel.

Bad input: an answer holding a control character (other than tab, newline and carriage return)
or a lone surrogate is wrong, whatever its digits say. math-verify's log messages are cut to
`LOG_MESSAGE_LIMIT` characters, so a huge answer does not flood stderr.

Each reward function carries a `fast` attribute: `fast(response, ground_truth)` returns the
result dict when it can be decided without math-verify (format failures, string-equal answers,
two different integers), else None. `grade_batch` uses it to keep easy items in-process.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import unicodedata
from collections.abc import Callable
from functools import lru_cache

from envs.countdown import check_countdown_answer
from envs.grade_pool import in_worker
from envs.grade_stats import ZERO
from envs.grader import grade_one
from envs.numbers import numbers_equal, parse_number, sympy_numbers_equal

#: seconds math-verify may spend per parse / comparison when called on the main thread;
#: None disables its (signal.alarm) timeout. Worker processes of `grade_batch` ignore it and
#: rely on their hard per-item limit instead.
MATH_VERIFY_TIMEOUT: int | None = 5

#: seconds an answer that needs math-verify may take, enforced by killing the grading worker
#: process that runs it; None runs math-verify in the calling process (grading workers always
#: do).
HARD_TIME_LIMIT: float | None = 5.0
#: longest math-verify log message passed on (a message quoting a huge answer is cut)
LOG_MESSAGE_LIMIT = 300


class _ShortMessages(logging.Filter):
    """Cut a log record's message to `LOG_MESSAGE_LIMIT` characters (math-verify quotes the whole
    answer when parsing times out: a 1 MB answer would print 1 MB)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > LOG_MESSAGE_LIMIT:
            cut = len(message) - LOG_MESSAGE_LIMIT
            record.msg = f"{message[:LOG_MESSAGE_LIMIT]}... ({cut} more characters)"
            record.args = ()
        return True


# A filter on a logger sees only the records logged on that very logger, so each of
# math-verify's module loggers gets one.
for _name in (
    "math_verify",
    "math_verify.parser",
    "math_verify.grader",
    "math_verify.metric",
    "math_verify.utils",
    "math_verify.tasks",
):
    logging.getLogger(_name).addFilter(_ShortMessages())


def _result(format_ok: bool, answer_ok: bool) -> dict[str, float]:
    answer = 1.0 if (format_ok and answer_ok) else 0.0
    return {"reward": answer, "format_reward": 1.0 if format_ok else 0.0, "answer_reward": answer}


# ----------------------------------------------------------------------------- extraction

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*")


def _closing_braces(text: str) -> dict[int, int]:
    """Map the index of each matched `{` to the index of its `}` (one linear pass)."""
    stack: list[int] = []
    match: dict[int, int] = {}
    for i, c in enumerate(text):
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            match[stack.pop()] = i
    return match


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (braces matched), or None.

    `\\boxed 5` (no braces) yields the token after the space. An unclosed box is skipped in
    favour of an earlier, closed one. Linear time in `len(text)`.
    """
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    matches = list(_BOX_RE.finditer(text))
    closing: dict[int, int] | None = None
    for m in reversed(matches):
        i = m.end()
        if i < len(text) and text[i] == "{":
            if closing is None:
                closing = _closing_braces(text)
            j = closing.get(i)
            if j is not None:
                return text[i + 1 : j]
            continue  # unclosed: try an earlier box
        if m.group(0) != m.group(0).rstrip():  # `\\boxed 5`: the next token
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                return token.group(0)
    return None


def last_answer_tag(text: str) -> str | None:
    """Text of the last complete `<answer>...</answer>`, or None.

    That is the text between the last `</answer>` and the nearest `<answer>` before it
    (linear time, unlike a lazy regex over many unclosed tags).
    """
    end = text.rfind("</answer>")
    if end < 0:
        return None
    start = text.rfind("<answer>", 0, end)
    if start < 0:
        return None
    return text[start + len("<answer>") : end]


def r1_zero_format_ok(response: str) -> bool:
    """True iff the response holds `</think> <answer>` and, after it, `</answer>`."""
    i = response.find("</think> <answer>")
    return i >= 0 and response.find("</answer>", i) >= 0


def extract_r1_answer(response: str) -> str | None:
    """The graded answer of an r1_zero response (None when the format is wrong)."""
    if not r1_zero_format_ok(response):
        return None
    answer = last_answer_tag(response)
    if answer is None:
        return None
    boxed = last_boxed(answer)
    if boxed is not None:
        return boxed
    if "\\boxed" in answer or "\\fbox" in answer:
        # A box that never closes (e.g. `\\boxed{7 </answer>`): a wrong answer, as in the
        # handout's grader, rather than text with unbalanced braces for math-verify to guess at.
        return ""
    return answer


# ----------------------------------------------------------------------------- equivalence

_STRIP_TOKENS = (
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "\\displaystyle",
    "^\\circ",
    "^{\\circ}",
    "\\circ",
    "\\%",
    "%",
    "\\$",
)
#: `\\left` / `\\right` as commands, not the start of `\\leftarrow`, `\\rightarrow`, ...
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
#: a comma with whitespace beside it separates list items ("81, 256"), not thousands
_SPACED_COMMA_RE = re.compile(r"\s,|,\s")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_THOUSANDS_RE = re.compile(r"^-?\d{1,3}(,\d{3})+$")
_INT_RE = re.compile(r"^-?\d+$")


def normalize_answer(s: str) -> str:
    """A cheap canonical form for string comparison (linear time, no math).

    Drops `$`, spacing commands, `\\left`/`\\right`, degree and percent marks and whitespace;
    maps `\\dfrac`/`\\tfrac` to `\\frac`; unwraps `\\text{}`; strips a trailing period and
    thousands commas in integers (`1,000`, not the list `1, 000`); lowercases.
    """
    s = s.strip().strip("$").strip()
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _LEFT_RIGHT_RE.sub("", s)
    for tok in _STRIP_TOKENS:
        s = s.replace(tok, "")
    s = _TEXT_RE.sub(r"\1", s)
    spaced_commas = _SPACED_COMMA_RE.search(s) is not None
    s = "".join(s.split())
    s = s.rstrip(".")
    if not spaced_commas and _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    if _INT_RE.match(s):
        neg = s.startswith("-")
        digits = s.lstrip("-").lstrip("0") or "0"
        s = ("-" if neg and digits != "0" else "") + digits
    return s.lower()


def cheap_match(pred: str, gold: str) -> bool | None:
    """Decide equivalence without math-verify where that is safe; None when undecided.

    True when the normalized strings agree; False when both are integers that differ; when
    both are numeric literals (decimals, scientific notation, a unit after them: see
    `envs.numbers`), their values compared by relative tolerance.
    """
    p, g = normalize_answer(pred), normalize_answer(gold)
    if not p:
        return False
    if p == g:
        return True
    if _INT_RE.match(p) and _INT_RE.match(g):
        return False
    p_value, g_value = parse_number(pred), parse_number(gold)
    if p_value is not None and g_value is not None:
        return numbers_equal(p_value, g_value)
    return None


def _mv_timeout() -> int | None:
    if threading.current_thread() is threading.main_thread() and not in_worker():
        return MATH_VERIFY_TIMEOUT
    return None


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, timeout: int | None):
    from math_verify import parse

    return parse("\\boxed{" + gold + "}", parsing_timeout=timeout)


def _drop_final_period(s: str) -> str:
    """`7\\text{ hours}.` -> `7\\text{ hours}`: a sentence's full stop, which math-verify
    cannot parse after a unit or a degree sign (six MATH answers end in one). `...` stays."""
    s = s.rstrip()
    return s[:-1] if s.endswith(".") and not s.endswith("..") else s


def _has_control_characters(text: str) -> bool:
    """A control character other than tab, newline and carriage return, or a lone surrogate."""
    return any(unicodedata.category(c) in ("Cc", "Cs") and c not in "\t\n\r" for c in text)


def _math_verify_reward(pred: str, gold: str) -> dict[str, float]:
    """`math_verify_match` as a reward dict, for a grading worker (module level: picklable)."""
    return _result(True, _math_verify_inline(pred, gold))


def math_verify_match(pred: str, gold: str) -> bool:
    """`_math_verify_inline` under the hard time limit `HARD_TIME_LIMIT` (see the module
    docstring): False when it overruns."""
    if HARD_TIME_LIMIT is None or in_worker():
        return _math_verify_inline(pred, gold)
    return grade_one(_math_verify_reward, pred, gold, timeout=HARD_TIME_LIMIT)["reward"] == 1.0


def _math_verify_inline(pred: str, gold: str) -> bool:
    """math-verify equivalence: parse both inside `\\boxed{}`, then `verify(gold, pred)`.

    The gold's final full stop is dropped first. The answer is parsed as written: there a
    final period makes math-verify fall back to the last number (`The answer is 5.` -> 5).
    When both sides parse to plain numbers (no free symbols), they are compared by relative
    tolerance (`envs.numbers.sympy_numbers_equal`) instead of math-verify's 6-decimal rounding,
    which would make every small quantity equal to every other."""
    from math_verify import parse, verify

    gold = _drop_final_period(gold)
    timeout = _mv_timeout()
    gold_parsed = _parse_gold(gold, timeout)
    if not gold_parsed:
        return False
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=timeout)
    if not pred_parsed:
        return False
    as_numbers = sympy_numbers_equal(gold_parsed[0], pred_parsed[0])
    if as_numbers is not None:
        return as_numbers
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))


def answers_match(pred: str, gold: str) -> bool:
    """Is the answer `pred` equivalent to the ground truth `gold`? (cheap check, then math-verify)

    An answer with a control character or a lone surrogate is not (see the module docstring)."""
    if _has_control_characters(pred):
        return False
    decided = cheap_match(pred, gold)
    if decided is not None:
        return decided
    return math_verify_match(pred, gold)


# ----------------------------------------------------------------------------- reward functions


def _answer_reward_fast(answer: str | None, ground_truth: str) -> dict | None:
    """The reward of an extracted answer (None: bad format) when the cheap check decides it;
    None when math-verify is needed."""
    if answer is None:
        return dict(ZERO)
    if _has_control_characters(answer):
        return _result(True, False)
    decided = cheap_match(answer, ground_truth)
    return None if decided is None else _result(True, decided)


def _answer_reward(answer: str | None, ground_truth: str) -> dict[str, float]:
    """The reward of an extracted answer (None: bad format): format 1 and a graded answer."""
    if answer is None:
        return dict(ZERO)
    return _result(True, answers_match(answer, ground_truth))


def _r1_zero_fast(response: str, ground_truth: str) -> dict | None:
    return _answer_reward_fast(extract_r1_answer(response), ground_truth)


def r1_zero_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """Reward for the r1_zero template (see the module docstring)."""
    return _answer_reward(extract_r1_answer(response), ground_truth)


def _question_only_fast(response: str, ground_truth: str) -> dict | None:
    return _answer_reward_fast(last_boxed(response), ground_truth)


def question_only_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """Reward for the question_only template: the last `\\boxed{}` is the answer."""
    return _answer_reward(last_boxed(response), ground_truth)


_COUNTDOWN_FORMAT_RE = re.compile(r"</think>\s*<answer>")


def countdown_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """Reward for Countdown. `ground_truth` is JSON `{"nums": [...], "target": N}`.

    Format: `</think>`, any whitespace, `<answer>`, then `</answer>` later. Answer: the last
    `<answer>...</answer>` is a valid expression over exactly the given numbers equal to target.
    """
    m = _COUNTDOWN_FORMAT_RE.search(response)
    if m is None or response.find("</answer>", m.end()) < 0:
        return dict(ZERO)
    answer = last_answer_tag(response)
    if answer is None:
        return dict(ZERO)
    gt = _parse_countdown_gt(ground_truth)
    return _result(True, check_countdown_answer(answer, gt[0], gt[1]))


@lru_cache(maxsize=4096)
def _parse_countdown_gt(ground_truth: str) -> tuple[tuple[int, ...], int]:
    data = json.loads(ground_truth)
    return tuple(int(n) for n in data["nums"]), int(data["target"])


# grade_batch's in-process shortcut; Countdown is always cheap (bounded exact arithmetic).
r1_zero_reward_fn.fast = _r1_zero_fast
question_only_reward_fn.fast = _question_only_fast
countdown_reward_fn.fast = countdown_reward_fn

RewardFn = Callable[[str, str], dict]
