"""The calculator tool: right values, and a message (never an exception) for hostile input."""

from __future__ import annotations

import ast
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envs.tools import calculator
from envs.tools.calculator import CalcError, calculate, check_tree, is_error


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12*34", "408"),
        ("  12 * 34 ", "408"),
        ("(7 - 2) / 4", "5/4"),
        ("-3 + 5", "2"),
        ("--3", "3"),
        ("+3", "3"),
        ("17 // 5", "3"),
        ("-17 // 5", "-4"),
        ("17 % 5", "2"),
        ("2 ** 10", "1024"),
        ("2 ** -2", "1/4"),
        ("(1/2) ** 3", "1/8"),
        ("1.5 * 4", "6"),
        ("0.1 + 0.2", "3/10"),  # exact: no float rounding
        ("2 ** 3 ** 2", "512"),  # right-associative, as in Python
        ("((((1))))", "1"),
        ("1" + "+1" * 40, "41"),
    ],
)
def test_values(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9**9**9", "exponent 387420489 is too large"),
        ("10**100000", "exponent 100000 is too large"),
        ("99999999999**200", "too large"),
        ("2**255*2**255", "too large"),
        ("(1/3)**200", "too large"),
        ("2**0.5", "whole number"),
        ("1/0", "division by zero"),
        ("1//0", "division by zero"),
        ("1%0", "division by zero"),
        ("0**-1", "division by zero"),
        ("(2-2)**-3", "division by zero"),
        ("1" * 201, "longer than 200"),
        ("", "empty"),
        ("   ", "empty"),
        ("1e309", "plain numbers"),
        ("1e5", "plain numbers"),
        ("0x10", "plain numbers"),
        ("1_000", "plain numbers"),
        ("1j", "plain numbers"),
        ("float('nan')", "function call"),
        ("float('inf')", "function call"),
        ("nan", "a name"),
        ("inf", "a name"),
        ("__import__('os')", "function call"),
        ("__import__('os').system('ls')", "function call"),
        ("().__class__.__bases__", "attribute access"),
        ("(1).real", "attribute access"),
        ("lambda: 1", "a lambda"),
        ("x", "a name"),
        ("abs(-1)", "function call"),
        ("[1][0]", "indexing"),
        ("'1' * 3", "plain numbers"),
        ("1 < 2", "a comparison"),
        ("1 if 1 else 2", "syntax IfExp"),
        ("1 << 100", "operator LShift"),
        ("1 & 3", "operator BitAnd"),
        ("~1", "operator Invert"),
        ("not 1", "operator Not"),
        ("1; 2", "syntax"),
        ("import os", "syntax"),
        ("1 +", "syntax"),
        ("(1", "syntax"),
        ("١٢*٢", "not allowed"),  # Arabic-Indic digits
        ("１２", "not allowed"),  # fullwidth digits
        ("1\x00+1", "control character"),
        ("1\x1b[2J", "control character"),
        ("1\n+1", "control character"),
        ("\u202e1+1", "not allowed"),  # a right-to-left override
    ],
)
def test_refusals(expression, message):
    result = calculate(expression)
    assert is_error(result), result
    assert message in result, result


def test_deep_nesting_is_refused():
    # Parentheses leave no node, so a deep tree needs operators: unary minus 100 deep.
    assert "nested deeper than 64" in calculate("-" * 100 + "1")
    # As deep as fits in the length bound, in parentheses: refused, not a crash.
    assert is_error(calculate("(" * 100 + "1" + ")" * 100))
    assert is_error(calculate("(" * 199 + "1"))


def test_tree_check_refuses_code_before_any_value():
    """The whitelist itself (not the character filter) refuses code nodes."""
    for source in ("__import__('os')", "a.b", "lambda: 0", "f(1)", "x[0]"):
        with pytest.raises(CalcError):
            check_tree(ast.parse(source, mode="eval"), source)


def test_not_text_is_a_message():
    assert is_error(calculate(None))  # type: ignore[arg-type]
    assert is_error(calculate(12))  # type: ignore[arg-type]


@given(st.text(max_size=300))
def test_any_text_gives_text(text):
    """Whatever the model writes, the tool answers with text and does not raise."""
    result = calculate(text)
    assert isinstance(result, str) and result


@given(st.integers(-(10**12), 10**12), st.integers(-(10**12), 10**12))
def test_agrees_with_exact_arithmetic(a, b):
    assert calculate(f"{a}*{b}") == str(a * b)
    assert calculate(f"{a}+({b})") == str(a + b)
    if b != 0:
        assert calculate(f"{a}/({b})") == calculator.format_value(Fraction(a, b))
        assert calculate(f"{a}//({b})") == str(a // b)
        assert calculate(f"{a}%({b})") == str(a % b)


@given(st.text(max_size=120))
def test_answer_never_carries_tags(text):
    """No answer contains ``<`` or ``>``: a tool answer cannot forge tags in the graded text."""
    result = calculate(text)
    assert "<" not in result and ">" not in result
    assert "<" not in calculate(f"'{text}'")
