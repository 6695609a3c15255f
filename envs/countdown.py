"""Countdown answer checking with a small recursive-descent parser (never `eval`).

Grammar (whitespace between tokens is ignored)::

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := "-" factor | "(" expr ")" | INTEGER

Values are exact `fractions.Fraction`s. Anything else (decimals, `=`, `**`, `^`, letters,
unicode operators) is rejected. Unary minus is allowed, as in TinyZero's checker, since it
introduces no number.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction

MAX_ANSWER_CHARS = 1000
MAX_DEPTH = 100

# ASCII digits only: `\d` would also accept e.g. Arabic-Indic or full-width digits.
_TOKEN_RE = re.compile(r"\s*(?:([0-9]+)|([-+*/()]))")


class CountdownSyntaxError(ValueError):
    """The answer is not an expression of the allowed grammar."""


def tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise CountdownSyntaxError(f"disallowed character at {pos}: {text[pos]!r}")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.pos = 0
        self.numbers: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise CountdownSyntaxError("unexpected end of expression")
        self.pos += 1
        return tok

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor(depth)
            if op == "*":
                value = value * rhs
            else:
                value = value / rhs  # ZeroDivisionError is handled by the caller
        return value

    def factor(self, depth: int) -> Fraction:
        if depth > MAX_DEPTH:
            raise CountdownSyntaxError("expression nested too deeply")
        tok = self.take()
        if tok == "-":
            return -self.factor(depth + 1)
        if tok == "(":
            value = self.expr(depth + 1)
            if self.take() != ")":
                raise CountdownSyntaxError("expected ')'")
            return value
        if tok.isdigit():
            self.numbers.append(int(tok))
            return Fraction(int(tok))
        raise CountdownSyntaxError(f"unexpected token {tok!r}")


def evaluate(text: str) -> tuple[Fraction, list[int]]:
    """Evaluate an expression; returns (value, numbers used in order).

    Raises `CountdownSyntaxError` for anything outside the grammar and `ZeroDivisionError`.
    """
    if len(text) > MAX_ANSWER_CHARS:
        raise CountdownSyntaxError("answer too long")
    tokens = tokenize(text)
    if not tokens:
        raise CountdownSyntaxError("empty expression")
    if sum(len(t) for t in tokens if t.isdigit()) > 200:
        raise CountdownSyntaxError("too many digits")
    parser = _Parser(tokens)
    value = parser.expr(0)
    if parser.peek() is not None:
        raise CountdownSyntaxError(f"unexpected token {parser.peek()!r}")
    return value, parser.numbers


def check_countdown_answer(answer: str, nums: tuple[int, ...] | list[int], target: int) -> bool:
    """True iff `answer` uses each of `nums` exactly once and evaluates exactly to `target`."""
    try:
        value, used = evaluate(answer)
    except (CountdownSyntaxError, ZeroDivisionError):
        return False
    return Counter(used) == Counter(nums) and value == target
