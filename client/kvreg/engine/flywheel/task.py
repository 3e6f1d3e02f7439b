"""The flywheel's task: multi-digit addition written out as a per-digit trace.

A problem ``a + b`` (both operands with the same number of digits, no leading
zero) is written as a question, a step-by-step solution and a final answer::

    Q:4821+3967=? S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788

Each step adds one column, least significant first: the two digits, the carry in
and their two-digit sum (``tens`` is the carry out). Steps have a fixed width so
that a small model can follow them. The solution ends with the result, so the
answer after `` #### `` is a copy of it. Answers are machine-checkable: the
checker parses what follows `` #### `` and compares it with ``a + b``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

ANSWER_MARK = " #### "
ALPHABET = "0123456789Q:+=? S;#"  # every character a trace can contain

_QUESTION = re.compile(r"^Q:([1-9][0-9]*)\+([1-9][0-9]*)=\? $")
_STEP = re.compile(r"^([0-9])\+([0-9])\+([01])=([0-9]{2})$")


@dataclass(frozen=True, order=True)
class Problem:
    a: int
    b: int

    @property
    def digits(self) -> int:
        return max(len(str(self.a)), len(str(self.b)))

    @property
    def answer(self) -> int:
        return self.a + self.b

    def question(self) -> str:
        """The prompt: ``Q:a+b=? `` (with the trailing space)."""
        return f"Q:{self.a}+{self.b}=? "

    def solution(self) -> str:
        """The exact step-by-step solution ``S:…;=result`` (no answer mark)."""
        return solve(self)

    def trace(self) -> str:
        """Question, solution and answer: the full training text (without BOS/EOS)."""
        return f"{self.question()}{self.solution()}{ANSWER_MARK}{self.answer}"


def solve(problem: Problem) -> str:
    """The exact per-digit solution of ``problem``, least significant column first."""
    width = problem.digits
    da = str(problem.a).zfill(width)[::-1]
    db = str(problem.b).zfill(width)[::-1]
    carry = 0
    steps = []
    for x, y in zip(da, db, strict=True):
        total = int(x) + int(y) + carry
        steps.append(f"{x}+{y}+{carry}={total:02d};")
        carry = total // 10
    return "S:" + "".join(steps) + f"={problem.a + problem.b}"


def random_problem(rng: random.Random, digits: int) -> Problem:
    """Two ``digits``-digit operands drawn from ``rng``."""
    low, high = 10 ** (digits - 1), 10**digits - 1
    return Problem(rng.randint(low, high), rng.randint(low, high))


def problems(
    seed: int, digit_range: tuple[int, int], count: int, *, exclude: Iterable[Problem] = ()
) -> list[Problem]:
    """``count`` distinct problems with a digit count drawn uniformly from ``digit_range`` (inclusive)."""
    rng = random.Random(seed)  # noqa: S311 - seeded data, not secrets
    skip = set(exclude)
    out: list[Problem] = []
    seen: set[Problem] = set()
    while len(out) < count:
        p = random_problem(rng, rng.randint(*digit_range))
        if p in skip or p in seen:
            continue
        seen.add(p)
        out.append(p)
    return out


def stream(
    rng: random.Random, digit_range: tuple[int, int], *, exclude: Iterable[Problem] = ()
) -> Iterator[Problem]:
    """An endless stream of problems (repeats allowed), skipping ``exclude``."""
    skip = set(exclude)
    while True:
        p = random_problem(rng, rng.randint(*digit_range))
        if p not in skip:
            yield p


def parse_question(text: str) -> Problem:
    """The problem of a ``Q:a+b=? `` prompt; ValueError if it is not one."""
    m = _QUESTION.match(text)
    if not m:
        raise ValueError(f"not a question: {text!r}")
    return Problem(int(m.group(1)), int(m.group(2)))


def extract_answer(completion: str) -> int | None:
    """The integer after the last `` #### `` (up to the end or whitespace); None if there is none."""
    idx = completion.rfind(ANSWER_MARK)
    if idx < 0:
        return None
    tail = completion[idx + len(ANSWER_MARK) :].split(maxsplit=1)
    if not tail or not tail[0].isdigit() or (len(tail[0]) > 1 and tail[0][0] == "0"):
        return None
    return int(tail[0])


def check_answer(problem: Problem, completion: str) -> bool:
    """Whether ``completion`` ends in `` #### <a+b>``: the machine check of an answer."""
    return extract_answer(completion) == problem.answer


def check_solution(problem: Problem, solution: str) -> bool:
    """Whether ``solution`` (``S:…;=result``) is a correct step-by-step derivation of ``problem``.

    Every step must add the right digits with the right carry and give the right
    two-digit sum, and the result must be assembled from the steps. This accepts
    exactly the solver's output.
    """
    if not solution.startswith("S:") or ";=" not in solution:
        return False
    body, _, result = solution[2:].rpartition(";=")
    steps = body.split(";")
    width = problem.digits
    if len(steps) != width:
        return False
    da = str(problem.a).zfill(width)[::-1]
    db = str(problem.b).zfill(width)[::-1]
    carry = 0
    digits = []
    for step, x, y in zip(steps, da, db, strict=True):
        m = _STEP.match(step)
        if not m or m.group(1) != x or m.group(2) != y or int(m.group(3)) != carry:
            return False
        total = int(x) + int(y) + carry
        if int(m.group(4)) != total:
            return False
        digits.append(str(total % 10))
        carry = total // 10
    expected = (str(carry) if carry else "") + "".join(reversed(digits))
    return result == expected and result == str(problem.answer)
