"""Numbers in answers: literals with scientific notation and units, compared by relative tolerance.

math-verify compares numbers after rounding both sides to 6 decimals, so every quantity below
5e-7 equals every other (`9.224 \\times 10^{-19}` "equals" `8.224 \\times 10^{-19}` and even
`-3 \\times 10^{-19}`), which on physics answers counts wrong answers as right. Here two numbers
are equal when `|a - b| <= REL_TOL * max(|a|, |b|)`, at any magnitude, in exact rational
arithmetic (so `0` equals only `0`).

`parse_number(text)` reads one numeric literal with an optional unit after it, as written in
answers: `-12`, `1,000`, `0.5`, `.5`, `8.224 \\times 10^{-19}`, `3.89e-10`, `10^{-3}`,
`4.4677 \\times 10^{14} Hz`, `15000 \\text{ kcal m}^{-2}`, `41.8^\\circ`, `62.5\\%`, `$7$`.
It returns None for anything else (expressions, variables, lists), which is left to
math-verify. A unit is dropped only after a literal: `\\text{...}` / `\\mathrm{...}` blocks,
degree and percent signs, primes, and the plain unit words of `UNIT_WORDS` (so `2n` or `7.6Z`
are not numbers).
"""

from __future__ import annotations

import re
from fractions import Fraction

#: relative tolerance of `numbers_equal`
REL_TOL = Fraction(1, 10**6)
#: literals with a larger decimal exponent are not parsed (no huge exact powers)
MAX_EXPONENT = 400
# Literals longer than this are left to math-verify, which runs under the grader's time limit:
# int() refuses strings of over 4,300 digits, and no benchmark answer comes near.
MAX_DIGITS = 1000

#: plain unit words accepted after a number (SI and the few others in the suite's answers)
#: (single letters other than K are left out: `2 m` may be a product with a variable `m`;
#: `C` and `F` count only right after a degree sign)
UNIT_WORDS = frozenset(
    "Hz kHz MHz GHz cm mm km nm pm um ms ns yr years year days day hours hr min "
    "kg J kJ eV keV MeV GeV K Pa atm mol mL Angstroms Angstrom AU pc kpc "
    "Mpc ly degrees degree rad sr".split()
)

_MANTISSA = r"(?P<sign>[-+]?)\s*(?P<int>\d{1,3}(?:,\d{3})+|\d*)(?:\.(?P<frac>\d+))?"
_POWER = r"(?:\\times|\\cdot|x|\*)\s*10\s*\^\s*(?:\{\s*(?P<p1>[-+]?\d+)\s*\}|(?P<p2>[-+]?\d))"
_E_EXP = r"[eE](?P<e>[-+]?\d+)"
_LITERAL_RE = re.compile(rf"^{_MANTISSA}\s*(?:{_POWER}|{_E_EXP})?")
_BARE_POWER_RE = re.compile(r"^(?P<sign>[-+]?)\s*10\s*\^\s*(?:\{\s*(?P<p>[-+]?\d+)\s*\}|(?P<q>\d))")
_UNIT_BLOCK_RE = re.compile(r"\\(?:text|mathrm|mbox|textrm|operatorname)\s*\{[^{}]*\}")
_UNIT_POWER_RE = re.compile(r"\^\s*(?:\{\s*[-+]?\d+\s*\}|[-+]?\d)")
_DEGREE_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°")
_PRIME_RE = re.compile(r"\^\s*\{\s*(?:\\prime\s*)+\}|\^\s*\\prime|''|'")
_SPACES = ("\\,", "\\;", "\\:", "\\!", "\\ ", "~", "\\quad")


def _is_unit(rest: str) -> bool:
    """Is `rest` (what follows a literal) empty or a unit?"""
    rest = _DEGREE_RE.sub(" ° ", rest)
    rest = _PRIME_RE.sub(" ", rest).replace("\\%", " ").replace("%", " ")
    if rest.lstrip().startswith("^"):
        return False  # a power of the number itself (`2^{10}`), not of a unit
    for space in _SPACES:
        rest = rest.replace(space, " ")
    rest = _UNIT_BLOCK_RE.sub(" ", rest)
    rest = _UNIT_POWER_RE.sub(" ", rest)
    words = rest.replace("/", " ").replace("\\", " ").split()
    after = ["", *words]
    return all(
        w == "°" or w in UNIT_WORDS or (w in ("C", "F") and prev == "°")
        for prev, w in zip(after, words, strict=False)
    )


def parse_number(text: str) -> Fraction | None:
    """The exact value of a numeric literal (with an optional unit), or None (see module doc)."""
    s = text.strip().strip("$").strip().rstrip(".").strip()
    if s.startswith("\\$"):
        s = s[2:].lstrip()
    m = _BARE_POWER_RE.match(s)
    if m is not None:
        exp = int(m.group("p") or m.group("q"))
        value = Fraction(1)
    else:
        m = _LITERAL_RE.match(s)
        if m is None or not (m.group("int") or m.group("frac")):
            return None
        digits = m.group("int").replace(",", "") + (m.group("frac") or "")
        if len(digits) > MAX_DIGITS:
            return None
        scale = len(m.group("frac") or "")
        exp = int(m.group("p1") or m.group("p2") or m.group("e") or 0)
        value = Fraction(int(digits or "0"), 10**scale) if scale <= MAX_EXPONENT else None
        if value is None:
            return None
    if abs(exp) > MAX_EXPONENT or not _is_unit(s[m.end() :]):
        return None
    value *= Fraction(10) ** exp
    return -value if m.group("sign") == "-" else value


def numbers_equal(a: Fraction, b: Fraction, rel_tol: Fraction = REL_TOL) -> bool:
    """`|a - b| <= rel_tol * max(|a|, |b|)`, exactly (0 equals only 0)."""
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def sympy_numbers_equal(gold, pred, rel_tol: Fraction = REL_TOL) -> bool | None:
    """The same test on two sympy expressions when both are numbers (no free symbols, finite);
    None when either is not (left to math-verify's own comparison)."""
    import sympy

    try:
        if not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr)):
            return None
        if not (gold.is_number and pred.is_number):
            return None
        if gold.is_Rational and pred.is_Rational:
            return numbers_equal(Fraction(str(gold)), Fraction(str(pred)), rel_tol)
        g, p = complex(sympy.N(gold, 30)), complex(sympy.N(pred, 30))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, AttributeError):
        return None
    if any(v != v or abs(v) == float("inf") for v in (g, p)):
        return None
    return abs(g - p) <= float(rel_tol) * max(abs(g), abs(p))
