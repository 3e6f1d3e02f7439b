"""Arithmetic claims in the prose of a worked solution, checked exactly.

:func:`claims` finds every arithmetic claim a text states and says whether it holds;
the GSM8K checker (:mod:`.gsm8k_checker`) fails a solution with a wrong one.

A claim is one ``=`` step whose left or right side is an expression with at least one
operator among ``+ - * / x × ÷`` (``x`` only between two numbers; also ``^``/``**``
between numbers, and parentheses): ``16 - 3 - 4 = 9``, each step of a chain
``a + b = c + d = e``, and each calculator annotation ``<<a*b=c>>`` (checked on its
own; the prose is read with the annotations removed). Numbers are read by
:mod:`.gsm8k_numbers`; both sides are evaluated exactly with
:class:`fractions.Fraction`, never ``eval``:

- a side that is a bare decimal number holds if it is the other side's exact value
  rounded to the decimals it states (``10/3 = 3.33``); a bare integer must be exact
  (``10/3 = 3`` is wrong);
- ``%`` is read both as a plain suffix (``12/20 x 100% = 60%``) and as ``/100``
  (``$80 x 30% = $24``), each side either way; a bare number followed by "cents" may be
  hundredths (``$1 / 2 = 50 cents``);
- a tight ``a/b`` (no spaces) is a fraction that binds first (``1 1/2 / 1/2 = 3``);
- in a chain written as a running total (``3/2 = 1.50+3.00 = 4.50``) a step holds if
  the next side's leading number is its value, the next step being checked in turn;
- a division by zero is a wrong claim.

Why a hand-written parser: no library parses arithmetic claims inside prose, where an
expression is cut short by words and units. The rules are conservative: a step that is
not plainly arithmetic between numbers (a variable, a unit or a word inside the
expression, an unbalanced or unparseable side) is skipped, never counted wrong. In the
8,792 GSM8K reference solutions (test and train) this checks 51,244 claims: 27,556 of
the 27,998 annotations (the others, like ``<<5=5>>``, state no operation) and 23,688
steps of the prose's 31,140 ``=`` signs (the others stand between words, units or
variables).

This module renders nothing, reads no file, and knows nothing of gold answers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

from kvreg.app.flywheel.gsm8k_numbers import (
    OPS,
    Token,
    annotation_bodies,
    strip_annotations,
    tight_fraction,
    tokenize,
)

__all__ = ["Claim", "claims"]

# Words that glue the number beside them into an expression the run does not hold
# ("15 pages x 1/3 = 5", "3 times 4 + 1 = 13"): the side next to them is skipped. Not
# "of" or "by", which mostly lead into a claim ("a profit of 70-40 = 30"), except in
# "15% of 80", "1/2 of 80" and "divided by".
_GLUE_WORDS = frozenset({"x", "times", "plus", "minus", "over", "less"})
_BY_GLUE = frozenset({"divided", "multiplied"})
# Words after which a bare number is a label, not a value: "Day 2 = 3 * 4 = 12".
_LABEL_WORDS = frozenset({"day", "week", "month", "year", "step", "part", "round", "level", "stage", "case"})
_CENTS = frozenset({"cent", "cents"})
_ARITHMETIC = ("num", "op", "lp", "rp", "eq")

_MAX_TOKENS = 128  # per side: longer is not a claim in prose (and bounds the recursion)
_MAX_DEPTH = 40  # nested parentheses, minus signs and powers
_MAX_EXPONENT = 64
_ONE, _HUNDREDTH = Fraction(1), Fraction(1, 100)


@dataclass(frozen=True)
class Claim:
    """One checked ``=`` step: its text as written and whether it holds."""

    text: str
    holds: bool


def claims(text: str) -> list[Claim]:
    """Every arithmetic claim ``text`` states: its annotations', then its prose's."""
    found: list[Claim] = []
    for inner in annotation_bodies(text):
        found.extend(Claim(f"<<{inner}>>", c.holds) for c in _claims_in(inner))
    found.extend(_claims_in(strip_annotations(text)))
    return found


# --- one side of an "=" -------------------------------------------------------------


class _Unparseable(Exception):
    """A side that is not plainly arithmetic between numbers: its steps are skipped."""


class _Parser:
    """Recursive descent over one side: expr := term (+|- term)*, term := unary (*|/ unary)*,
    unary := -unary | power, power := primary (^ unary)?, primary := NUM | NUM/NUM (tight) |
    ( expr ) | NUM( expr ).

    A unary minus must touch its operand (``-5``): ``- 5`` is a bullet or a dash. Division
    by zero raises ZeroDivisionError (the claim is wrong, not skipped)."""

    def __init__(self, tokens: list[Token], percent: Fraction) -> None:
        self.tokens, self.pos, self.depth, self.operators = tokens, 0, 0, 0
        self.percent = percent  # what a % suffix multiplies by: 1 (a plain suffix) or 1/100

    def parse(self) -> Fraction:
        value = self._expr()
        if self.pos != len(self.tokens):
            raise _Unparseable
        return value

    def _peek(self, ahead: int = 0) -> Token | None:
        pos = self.pos + ahead
        return self.tokens[pos] if pos < len(self.tokens) else None

    def _op(self, *symbols: str) -> str | None:
        """Take a binary operator among ``symbols``, counting it."""
        t = self._peek()
        if t is None or t.kind != "op" or OPS[t.text] not in symbols:
            return None
        self.pos += 1
        self.operators += 1
        return OPS[t.text]

    def _expr(self) -> Fraction:
        value = self._term()
        while op := self._op("+", "-"):
            right = self._term()
            value = value + right if op == "+" else value - right
        return value

    def _term(self) -> Fraction:
        value = self._unary()
        while op := self._op("*", "/"):
            right = self._unary()
            value = value * right if op == "*" else value / right
        return value

    def _unary(self) -> Fraction:
        t, operand = self._peek(), self._peek(1)
        if t is not None and t.kind == "op" and OPS[t.text] == "-":
            if operand is None or operand.spaced:
                raise _Unparseable
            self.pos += 1
            return -self._nested(self._unary)
        return self._power()

    def _power(self) -> Fraction:
        base = self._primary()
        if self._op("^"):
            exponent = self._nested(self._unary)
            if exponent.denominator != 1 or abs(exponent) > _MAX_EXPONENT:
                raise _Unparseable
            return base ** int(exponent)
        return base

    def _primary(self) -> Fraction:
        t = self._peek()
        if t is not None and t.kind == "lp":
            return self._group()
        if t is None or t.kind != "num":
            raise _Unparseable
        value = self._value(t)
        if tight_fraction(self.tokens, self.pos):  # binds first: 3 / 1/2 = 6
            self.operators += 1
            value /= self._value(self.tokens[self.pos + 2])
            self.pos += 2
        self.pos += 1
        after = self._peek()
        if after is not None and after.kind == "lp" and not after.spaced:  # 2(3+4)
            self.operators += 1
            value *= self._group()
        return value

    def _value(self, t: Token) -> Fraction:
        return t.value * self.percent if t.percent else t.value

    def _group(self) -> Fraction:
        self.pos += 1  # the "("
        value = self._nested(self._expr)
        t = self._peek()
        if t is None or t.kind != "rp":
            raise _Unparseable
        self.pos += 1
        return value

    def _nested(self, parse: Callable[[], Fraction]) -> Fraction:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _Unparseable
        value = parse()
        self.depth -= 1
        return value


@dataclass(frozen=True)
class _Side:
    # (value, tolerance) per reading: "%" as a plain suffix, and as /100 where the side has
    # a %; value None: a division by zero; tolerance: half a unit of a bare decimal's last
    # place (0 for an integer or an expression).
    readings: tuple[tuple[Fraction | None, Fraction], ...]
    has_operator: bool
    start: int
    end: int


def _side(tokens: list[Token], *, cents: bool = False) -> _Side:
    """Parse one side of an ``=``, after dropping parentheses left open by the prose around it."""
    if len(tokens) > _MAX_TOKENS:
        raise _Unparseable
    balance = sum(1 if t.kind == "lp" else -1 if t.kind == "rp" else 0 for t in tokens)
    start, end = 0, len(tokens)
    while start < end and tokens[start].kind == "lp" and balance > 0:
        start, balance = start + 1, balance - 1
    while start < end and tokens[end - 1].kind == "rp" and balance < 0:
        end, balance = end - 1, balance + 1
    tokens = tokens[start:end]
    numbers = [t for t in tokens if t.kind == "num"]
    if not numbers:
        raise _Unparseable
    scales = (_ONE, _HUNDREDTH) if any(t.percent for t in numbers) else (_ONE,)
    readings: list[tuple[Fraction | None, Fraction]] = []
    operators = 0
    for scale in scales:
        parser = _Parser(tokens, scale)
        try:
            value: Fraction | None = parser.parse()
        except ZeroDivisionError:
            value = None
        operators = parser.operators
        bare = operators == 0 and len(numbers) == 1  # 3.33, -3.33, (3.33)
        unit = scale if numbers[0].percent else _ONE
        decimals = numbers[0].decimals if bare else 0
        tolerance = unit / (2 * 10**decimals) if decimals else Fraction(0)
        readings.append((value, tolerance))
        if cents and bare and value is not None:
            readings.append((value * _HUNDREDTH, tolerance * _HUNDREDTH))
    return _Side(tuple(readings), operators > 0, tokens[0].start, tokens[-1].end)


def _holds(left: _Side, right: _Side) -> bool:
    """Whether some reading makes both sides equal, a bare decimal within its rounding."""
    for a, a_tolerance in left.readings:
        for b, b_tolerance in right.readings:
            if a is not None and b is not None and abs(a - b) <= max(a_tolerance, b_tolerance):
                return True
    return False


# --- runs of arithmetic in prose -----------------------------------------------------


def _claims_in(text: str) -> Iterator[Claim]:
    tokens = tokenize(text)
    i = 0
    while i < len(tokens):
        if tokens[i].kind not in _ARITHMETIC:
            i += 1
            continue
        j = i
        while j < len(tokens) and tokens[j].kind in _ARITHMETIC:
            j += 1
        before, after = tokens[max(0, i - 2) : i][::-1], tokens[j : j + 4]
        yield from _run_claims(text, tokens[i:j], before, after)
        i = j


def _run_claims(text: str, run: list[Token], before: list[Token], after: list[Token]) -> Iterator[Claim]:
    """The claims of one run of numbers, operators, parentheses and ``=`` between words."""
    segments: list[list[Token]] = [[]]
    for t in run:
        if t.kind == "eq":
            segments.append([])
        else:
            segments[-1].append(t)
    if len(segments) < 2:
        return
    last = len(segments) - 1
    sides: list[_Side | None] = []
    for k, segment in enumerate(segments):
        is_open = bool(segment) and (
            (k == 0 and _open_start(segment, before)) or (k == last and _open_end(segment, after))
        )
        if not segment or is_open:
            sides.append(None)
            continue
        cents = k == last and bool(after) and after[0].kind == "word" and after[0].text.lower() in _CENTS
        try:
            sides.append(_side(segment, cents=cents))
        except _Unparseable:
            sides.append(None)
    for k, (left, right) in enumerate(itertools.pairwise(sides)):
        if left is None or right is None or not (left.has_operator or right.has_operator):
            continue
        holds = _holds(left, right)
        if not holds and left.has_operator and k + 1 < last:
            lead = _lead(segments[k + 1])
            holds = lead is not None and _holds(left, lead)
        yield Claim(text[left.start : right.end], holds)


def _open_start(segment: list[Token], before: list[Token]) -> bool:
    """Whether the first side of a run continues an expression before it, or is not a value:
    after a variable or a glue word (``3x - 5``, ``pages x 1/3``, ``1 and 1/3``), a label
    (``Week 2 = 35 + 35``), or a number broken by a stray comma or period (``16,0000/10``,
    ``.8 + . 84``; not ``In 2005, 20/2 = 10``)."""
    first = segment[0]
    opens_with_op = first.kind == "op"
    if not before:
        return opens_with_op and OPS[first.text] != "-"
    b0, b1 = before[0], before[1] if len(before) > 1 else None
    if b0.kind == "word":
        word = b0.text.lower()
        b1_kind, b1_word = (b1.kind, b1.text.lower()) if b1 is not None else (None, "")
        if word in _GLUE_WORDS or not first.spaced:
            return True
        if (word == "of" and b1_kind == "num") or (word == "by" and b1_word in _BY_GLUE):
            return True
        if word == "and" and b1_kind == "num" and tight_fraction(segment, 0):
            return True
        if word in _LABEL_WORDS and len(segment) == 1:
            return True
        return opens_with_op
    if b0.kind == "other" and b1 is not None:
        if b0.text == "," and b1.kind == "num" and not (b0.spaced or first.spaced):
            return True
        if b0.text in ",." and b1.kind == "op":
            return True
    return opens_with_op and OPS[first.text] != "-"


def _open_end(segment: list[Token], after: list[Token]) -> bool:
    """Whether the last side of a run goes on after it: ``= 2x + 1``, ``= 5 times 2``,
    ``= 24/Y``, ``= 5 and 2/3``, ``= 75 + 10% of 150``."""
    if not after:
        return False
    if after[0].text.lower() == "of" and (segment[-1].percent or tight_fraction(segment, len(segment) - 3)):
        return True
    a0, rest = after[0], after[1:]
    if a0.kind == "other" and a0.text == "/":  # "per" a one-letter word: a variable
        return bool(rest) and rest[0].kind == "word" and len(rest[0].text) == 1
    if a0.kind != "word":
        return False
    if a0.text.lower() in _GLUE_WORDS or not a0.spaced:
        return True
    if a0.text.lower() == "and" and rest and (rest[0].kind == "lp" or tight_fraction(rest, 0)):
        return True
    return bool(rest) and rest[0].kind in ("op", "eq")


def _lead(segment: list[Token]) -> _Side | None:
    """The leading number of a middle side of a chain, for a running total: in
    ``3/2 = 1.50+3.00 = 4.50`` the first step is read as ``3/2 = 1.50``."""
    if not segment or segment[0].kind != "num":
        return None
    size = 3 if tight_fraction(segment, 0) else 1
    try:
        return _side(segment[:size])
    except _Unparseable:
        return None
