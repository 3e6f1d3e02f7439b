"""Numbers in the prose of a GSM8K worked solution: the tokenizer, and the last number.

:func:`tokenize` splits a text into numbers, operators, parentheses, ``=``, words and
breaks, for :mod:`.gsm8k_arith` to read claims from; :func:`last_number` is the
checker's final-answer rule. Numbers may carry thousands commas (``1,234``), a leading
``$``/``€``/``£``, a ``%`` suffix and decimals (``.5``, ``2.50``), or be mixed
(``3 1/2``, ``1½``) or vulgar (``¾``); values are exact :class:`fractions.Fraction`.

Why by hand: no library tokenizes arithmetic inside prose, where ``x`` is a word or a
times sign, ``–`` a range or a minus, ``/`` a division or "per" (``$2/car``), ``,`` a
thousands separator or a list and ``:`` a clock or a label. Context decides:
``x``/``X``, ``^``, ``**`` and ``–`` are operators only between two operands.

This module evaluates nothing and reads no file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "OPERAND_END",
    "OPERAND_START",
    "OPS",
    "Token",
    "annotation_bodies",
    "last_number",
    "strip_annotations",
    "tight_fraction",
    "tokenize",
]

_ANNOTATION = re.compile(r"<<([^<>]*)>>")
_VULGAR = {
    "½": Fraction(1, 2), "⅓": Fraction(1, 3), "⅔": Fraction(2, 3), "¼": Fraction(1, 4),
    "¾": Fraction(3, 4), "⅕": Fraction(1, 5), "⅖": Fraction(2, 5), "⅗": Fraction(3, 5),
    "⅘": Fraction(4, 5), "⅙": Fraction(1, 6), "⅚": Fraction(5, 6), "⅛": Fraction(1, 8),
    "⅜": Fraction(3, 8), "⅝": Fraction(5, 8), "⅞": Fraction(7, 8),
}  # fmt: skip
_VULGAR_CHARS = "".join(_VULGAR)
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
# One token at a time, tried in this order (the scanner is tokenize). re.VERBOSE ignores
# whitespace, except in a character class and when escaped.
_SCAN = re.compile(
    rf"""
    (?P<clock>(?:[01]?\d|2[0-4]):[0-5]\d(?!\d))              # 10:30 (but "Day 3:70-21" is a label)
    |(?P<mixed>(?P<whole>\d+)\ (?P<numer>\d+)/(?P<denom>\d+)(?![\d/]|\.\d))  # 3 1/2
    |(?P<number>(?:[$€£]\ ?)?(?:
        (?P<int>{_DIGITS})(?P<dec>\.\d+)?(?P<vulgar>[{_VULGAR_CHARS}])?   # 1,234.5 or 1½
        |(?P<bare_dec>\.\d+)                                   # .5
        |(?P<lone_vulgar>[{_VULGAR_CHARS}])                    # ¾
    )(?P<pct>%)?)
    |(?P<per>/(?=[^\W\d_]))                                   # $2/car: "per", not division
    |(?P<pow>\*\*|\^)|(?P<dash>–)                             # en dash: a minus or a range
    |(?P<op>[-+*/×÷−])
    |(?P<lp>\()|(?P<rp>\))|(?P<eq>=)
    |(?P<word>[^\W\d_]+)
    |(?P<space>[ \t\u00a0]+)
    |(?P<other>.|\n)
    """,
    re.VERBOSE,
)
#: The operator each operator token stands for.
OPS = {
    "+": "+",
    "-": "-", "−": "-", "–": "-",
    "*": "*", "×": "*", "x": "*", "X": "*",
    "/": "/", "÷": "/",
    "^": "^",
}  # fmt: skip
#: Token kinds that end, and that start, an operand.
OPERAND_END = ("num", "rp")
OPERAND_START = ("num", "lp")
_ONE = Fraction(1)
_MAX_NUMBER_CHARS = 100  # a longer "number" is not one (and int() refuses over 4,300 digits)


@dataclass(frozen=True)
class Token:
    """One token of a text, with its place in it (``start``, ``end``)."""

    kind: str  # num, op, lp, rp, eq, word, other (a break); pow and dash until resolved
    text: str
    start: int
    end: int
    spaced: bool  # whitespace right before it
    value: Fraction = _ONE  # of a num
    decimals: int = 0  # digits after the point, for the rounding rule
    percent: bool = False  # written with a % suffix


def annotation_bodies(text: str) -> list[str]:
    """The insides of ``text``'s GSM8K calculator annotations: ``48/2=24`` of ``<<48/2=24>>``."""
    return _ANNOTATION.findall(text)


def strip_annotations(text: str) -> str:
    """``text`` without its GSM8K calculator annotations ``<<...>>``."""
    return _ANNOTATION.sub("", text)


def last_number(text: str) -> tuple[Fraction, str] | None:
    """The last number of ``text`` (annotations removed) and how it is written, or None.

    A ``-`` written against the number makes it negative (``= -5``), unless it follows
    an operand (the ``5`` of ``10-5``)."""
    tokens = tokenize(strip_annotations(text))
    for i in range(len(tokens) - 1, -1, -1):
        t = tokens[i]
        if t.kind != "num":
            continue
        sign = tokens[i - 1] if i > 0 else None
        negative = sign is not None and sign.kind == "op" and OPS[sign.text] == "-" and not t.spaced
        if negative and (i < 2 or tokens[i - 2].kind not in OPERAND_END):
            assert sign is not None
            return -t.value, sign.text + t.text
        return t.value, t.text
    return None


def tokenize(text: str) -> list[Token]:
    """Every token of ``text`` but whitespace, which only sets the next token's ``spaced``."""
    out: list[Token] = []
    pos, spaced = 0, False
    while pos < len(text):
        m = _SCAN.match(text, pos)
        assert m is not None  # the last alternative matches any character
        if m.lastgroup == "mixed" and int(m["numer"]) >= int(m["denom"]):
            m = _SCAN.match(text[: m.start("numer") - 1], pos)  # "2 3/4" when proper, else "2"
            assert m is not None
        kind = m.lastgroup or "other"
        if kind == "space":
            spaced = True
        elif kind in ("number", "mixed") and len(m[0]) <= _MAX_NUMBER_CHARS:
            value, decimals = _number(m)
            out.append(Token("num", m[0], m.start(), m.end(), spaced, value, decimals, bool(m["pct"])))
        else:
            kind = "other" if kind in ("clock", "per", "number", "mixed") else kind
            out.append(Token(kind, m[0], m.start(), m.end(), spaced))
        spaced = spaced and kind == "space"
        pos = m.end()
    return _resolve_context(out)


def _number(m: re.Match[str]) -> tuple[Fraction, int]:
    if m["mixed"]:
        return int(m["whole"]) + Fraction(int(m["numer"]), int(m["denom"])), 0
    if m["lone_vulgar"]:
        return _VULGAR[m["lone_vulgar"]], 0
    if m["bare_dec"]:
        return Fraction(m["bare_dec"]), len(m["bare_dec"]) - 1
    value = Fraction(m["int"].replace(",", "") + (m["dec"] or ""))
    if m["vulgar"]:
        value += _VULGAR[m["vulgar"]]
    return value, len(m["dec"]) - 1 if m["dec"] else 0


def _resolve_context(tokens: list[Token]) -> list[Token]:
    """``x``/``X``, ``^``, ``**`` and ``–`` are operators only between two operands, else words or
    breaks ("a 2 x 4 board" is a product, "x = 5" a variable, "10–15 minutes" a range)."""
    out = list(tokens)
    for i, t in enumerate(tokens):
        if not (t.kind in ("pow", "dash") or (t.kind == "word" and t.text in ("x", "X"))):
            continue
        before = tokens[i - 1].kind if i > 0 else None
        after = tokens[i + 1].kind if i + 1 < len(tokens) else None
        if before in OPERAND_END and after in OPERAND_START:
            out[i] = Token("op", "^" if t.kind == "pow" else t.text, t.start, t.end, t.spaced)
        elif t.kind in ("pow", "dash"):
            out[i] = Token("other", t.text, t.start, t.end, t.spaced)
    return out


def tight_fraction(tokens: list[Token], i: int) -> bool:
    """Whether ``tokens[i:i+3]`` is a fraction ``a/b`` written without spaces or ``%``."""
    if i < 0 or i + 2 >= len(tokens):
        return False
    a, slash, b = tokens[i : i + 3]
    return (
        a.kind == b.kind == "num"
        and slash.kind == "op"
        and slash.text == "/"
        and not (slash.spaced or b.spaced or a.percent or b.percent)
    )
