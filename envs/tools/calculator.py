"""A calculator tool: exact arithmetic on a short expression, never ``eval``.

The model sends text such as ``12*34`` or ``(7 - 2) / 4``; :func:`calculate` returns the value
as text (``408``, ``5/4``) or an error text starting with ``error:``. It never raises: whatever
the input, the answer is a string the environment can show the model.

How the input is read (each step refuses with its own message):

1. at most :data:`MAX_CHARS` characters, ASCII only, no control characters (so unicode
   digits such as ``١٢`` and smuggled NUL or escape bytes never reach the parser);
2. parsed with :func:`ast.parse` in ``eval`` mode (parsing builds a tree, it runs nothing);
3. every node of the tree must be one of the whitelisted kinds: a number literal written as
   plain digits with an optional decimal part (no ``1e9``, ``0x10``, ``1_000``, ``1j``), the
   binary operators ``+ - * / // % **``, unary minus or plus, and the parentheses that
   grouping leaves no node for. Names, calls, attribute access, subscripts, lambdas,
   comparisons, strings and everything else are refused before any value is computed;
4. the tree is at most :data:`MAX_DEPTH` nodes deep;
5. the value is computed exactly with :class:`fractions.Fraction` (no floats, so no NaN,
   infinity or rounding); every intermediate value's numerator and denominator stay within
   :data:`MAX_BITS` bits, an exponent must be a whole number of magnitude at most
   :data:`MAX_EXPONENT`, and a power is refused *before* it is computed when its result would
   pass the bit bound (``9**9**9`` is refused at ``9**9``'s exponent: 387420489);
6. an error text never repeats the model's input (beyond one refused character), so a tool
   answer cannot carry tags such as ``<answer>`` into the transcript that is graded;
7. evaluation stops with an error after :data:`MAX_SECONDS` of wall clock (with the bounds
   above it never comes near; the check is a second line of defence).

This is a calculator, not a code interpreter: a tool that runs model-written Python is out
of scope here, because it needs a real sandbox (a separate process with no network, no file
system and CPU and memory limits), which this package does not provide.
"""

from __future__ import annotations

import ast
import operator
import re
import time
from fractions import Fraction

MAX_CHARS = 200
MAX_DEPTH = 64
MAX_BITS = 256  # numerator and denominator of every value: below 2**256 (about 77 digits)
MAX_EXPONENT = 256
MAX_SECONDS = 0.05

ERROR_PREFIX = "error:"

_LITERAL = re.compile(r"[0-9]+(\.[0-9]+)?")
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_SYMBOL = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}


class CalcError(Exception):
    """A refusal: its message is what the model is shown after ``error:``."""


def calculate(expression: str) -> str:
    """The value of ``expression`` as text (an integer, or a reduced fraction ``p/q``), or
    ``"error: <why>"``; never raises.

    >>> calculate("12*34")
    '408'
    >>> calculate("(7 - 2) / 4")
    '5/4'
    >>> calculate("1/0")
    'error: division by zero'
    """
    try:
        return format_value(evaluate(expression))
    except CalcError as exc:
        return f"{ERROR_PREFIX} {exc}"
    except Exception as exc:  # a bug or an input class not foreseen: still a message
        return f"{ERROR_PREFIX} cannot evaluate ({type(exc).__name__})"


def is_error(result: str) -> bool:
    """True when :func:`calculate`'s answer is a refusal."""
    return result.startswith(ERROR_PREFIX)


def format_value(value: Fraction) -> str:
    """``408`` for a whole number, ``-5/4`` otherwise (reduced)."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def evaluate(expression: str) -> Fraction:
    """The exact value of ``expression``; :class:`CalcError` for anything refused."""
    if not isinstance(expression, str):
        raise CalcError("the expression must be text")
    text = expression.strip()
    if not text:
        raise CalcError("empty expression")
    if len(text) > MAX_CHARS:
        raise CalcError(f"expression longer than {MAX_CHARS} characters")
    for ch in text:
        if not ch.isascii():
            raise CalcError(
                f"character {ch!r} is not allowed (ASCII digits and + - * / % ( ) only)"
            )
        if not ch.isprintable():
            raise CalcError(f"control character {ch!r} is not allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalcError("not an arithmetic expression (syntax)") from None
    except (RecursionError, MemoryError, ValueError):
        raise CalcError("expression too deeply nested") from None
    check_tree(tree, text)
    return _Evaluator(text, time.monotonic() + MAX_SECONDS).value(tree.body)


def check_tree(tree: ast.AST, source: str) -> None:
    """Refuse any node outside the whitelist, a literal not written as plain digits, or a
    tree deeper than :data:`MAX_DEPTH`, before anything is computed."""
    if not isinstance(tree, ast.Expression):
        raise CalcError("not an expression")
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CalcError(f"expression nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _SYMBOL:
                raise CalcError(f"operator {type(node.op).__name__} is not allowed")
            stack += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                raise CalcError(f"operator {type(node.op).__name__} is not allowed")
            stack.append((node.operand, depth + 1))
        elif isinstance(node, ast.Constant):
            literal = ast.get_source_segment(source, node)
            if type(node.value) not in (int, float) or not _LITERAL.fullmatch(literal or ""):
                # The literal is not echoed: a tool's answer never repeats model text (which
                # could carry answer tags into the transcript that is graded).
                raise CalcError("only plain numbers are allowed (digits, optional decimals)")
        else:
            raise CalcError(f"{_describe(node)} is not allowed (numbers and + - * / // % ** only)")


def _describe(node: ast.AST) -> str:
    names = {
        ast.Name: "a name",
        ast.Call: "a function call",
        ast.Attribute: "attribute access",
        ast.Lambda: "a lambda",
        ast.Subscript: "indexing",
        ast.Compare: "a comparison",
    }
    return names.get(type(node), f"syntax {type(node).__name__}")


class _Evaluator:
    def __init__(self, source: str, deadline: float) -> None:
        self.source, self.deadline = source, deadline

    def value(self, node: ast.AST) -> Fraction:
        if time.monotonic() > self.deadline:
            raise CalcError(f"took longer than {MAX_SECONDS} seconds")
        if isinstance(node, ast.Constant):
            # From the literal's text: exact for decimals (Fraction("0.1") is 1/10).
            return _bounded(Fraction(ast.get_source_segment(self.source, node)))
        if isinstance(node, ast.UnaryOp):
            inner = self.value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        assert isinstance(node, ast.BinOp)  # check_tree let nothing else through
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalcError("division by zero")
        return _bounded(_BINARY[type(node.op)](left, right))


def _bounded(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise CalcError(f"a value is too large (more than {MAX_BITS} bits)")
    return Fraction(value)


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalcError("an exponent must be a whole number")
    e = exponent.numerator
    if abs(e) > MAX_EXPONENT:
        raise CalcError(f"exponent {e} is too large (at most {MAX_EXPONENT})")
    if base == 0 and e < 0:
        raise CalcError("division by zero")
    bits = max(base.numerator.bit_length(), base.denominator.bit_length())
    if (bits - 1) * abs(e) > MAX_BITS:  # 2**(bits-1) <= |part|: a lower bound on the result
        raise CalcError(f"a value is too large (more than {MAX_BITS} bits)")
    return _bounded(base**e)
