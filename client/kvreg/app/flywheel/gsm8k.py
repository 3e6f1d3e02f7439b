"""GSM8K problems as the flywheel uses them: load them, clean their solutions, build chat prompts.

The data ships with kvreg (``data/gsm8k/`` beside this module, MIT, OpenAI; its
README names the source commit): the whole test set, and the first 8 lines of the
train set for the 8-shot prompt. :func:`load_problems` reads them, or any GSM8K
``.jsonl`` file given by path (the full train set, say). A problem is named by its
split and 1-based line number in the original file (``gsm8k-test-0042``), so that
every figure can say which problems it was measured on.

Prompts are chat messages (``{"role", "content"}`` dicts) for the tokenizer's own chat
template. Their wording is fixed in module constants, because the tokens of a repeat
question must be exactly the prefix of the deposited artifact:

- every user turn is :func:`user_content`: the question, a newline, then
  :data:`INSTRUCTION` (ask to reason step by step and end with the final-answer line);
- every worked example's assistant turn is :func:`assistant_content`: the cleaned
  reference solution (:attr:`Gsm8kProblem.reference_solution`), a newline, then the
  final-answer line :func:`final_answer_line` (``The answer is 18.``), the one format
  that the instruction asks for and the checker's last-number rule reads.

This module renders no chat template and runs no model; the checker is in
:mod:`.gsm8k_checker`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from kvreg.app.flywheel.gsm8k_numbers import strip_annotations
from kvreg.core.errors import UsageError

__all__ = [
    "FEW_SHOT_LINES",
    "FINAL_ANSWER",
    "INSTRUCTION",
    "SHIPPED",
    "SPLITS",
    "Gsm8kProblem",
    "assistant_content",
    "few_shot_messages",
    "few_shot_problems",
    "final_answer_line",
    "load_problems",
    "question_messages",
    "user_content",
]

SPLITS = ("test", "train")
#: The shipped file of each split, under ``kvreg/app/flywheel/data/gsm8k/``: the whole
#: test set; the first 8 lines of the train set, unchanged.
SHIPPED = {"test": "test.jsonl", "train": "train-lines-1-8.jsonl"}
#: The train lines whose worked solutions make the 8-shot prompt.
FEW_SHOT_LINES = tuple(range(1, 9))
#: Appended to every question, after a newline.
INSTRUCTION = 'Solve it step by step. End with the line "The answer is N." where N is the final number.'
#: The final-answer line of a worked example (and what the instruction asks for).
FINAL_ANSWER = "The answer is {answer}."

_GOLD = re.compile(r"#### (-?(?:\d{1,3}(?:,\d{3})+|\d+))")
_HINT = 'give path= a GSM8K .jsonl file: one {"question": ..., "answer": ...} object a line'


@dataclass(frozen=True)
class Gsm8kProblem:
    """One GSM8K problem, as its line in the original file holds it."""

    split: str  # "test" or "train"
    line: int  # 1-based line number in the original file
    question: str
    answer_text: str  # the worked solution as published: annotations and "#### N" included

    @property
    def key(self) -> str:
        """A stable id: ``gsm8k-test-0042`` for line 42 of the test set."""
        return f"gsm8k-{self.split}-{self.line:04d}"

    @property
    def gold(self) -> int:
        """The gold answer: the integer on the last line ``#### N``, commas removed."""
        last = self.answer_text.rstrip().rpartition("\n")[2]
        m = _GOLD.fullmatch(last.strip())
        if m is None:
            raise UsageError(
                f"{self.key} has no final line '#### <integer>': {last[:80]!r}",
                hint=_HINT,
                problem=self.key,
            )
        return int(m[1].replace(",", ""))

    @property
    def reference_solution(self) -> str:
        """The worked solution for a model to read: calculator annotations ``<<...>>`` and the
        last line ``#### N`` removed, trailing whitespace stripped (from each line and the end)."""
        body = self.answer_text.rstrip().rpartition("\n")[0]
        lines = strip_annotations(body).split("\n")
        return "\n".join(line.rstrip() for line in lines).rstrip()


def load_problems(
    split: str, lines: Sequence[int] | None = None, path: Path | None = None
) -> list[Gsm8kProblem]:
    """The problems at ``lines`` (1-based, in the order given; all if None) of ``split``.

    Reads the shipped data, or the GSM8K ``.jsonl`` file at ``path``. Every problem read
    is checked (a JSON object with string ``question`` and ``answer``, a gold answer).

    Raises:
        UsageError: an unknown split, a file that cannot be read, a line number out of
            range (only train lines 1-8 ship: give ``path`` for others), or a malformed
            line (``details``: ``path``, ``line``).
    """
    if split not in SPLITS:
        raise UsageError(f"unknown GSM8K split {split!r}", hint=f"one of: {', '.join(SPLITS)}")
    where = str(path) if path is not None else f"kvreg's {SHIPPED[split]}"
    rows = _read(path).splitlines() if path is not None else _shipped(split).splitlines()
    wanted = range(1, len(rows) + 1) if lines is None else lines
    problems = []
    for n in wanted:
        if not 1 <= n <= len(rows):
            hint = f"lines 1 to {len(rows)}"
            if path is None and split == "train":
                hint += "; only the first 8 train lines ship with kvreg: give path= the full train.jsonl"
            raise UsageError(f"line {n} is out of range: {where} has {len(rows)} lines", hint=hint, line=n)
        problem = _problem(split, n, rows[n - 1], where)
        _ = problem.gold  # raises on a malformed final line, naming the problem
        problems.append(problem)
    return problems


def few_shot_problems() -> list[Gsm8kProblem]:
    """The worked examples of the 8-shot prompt: train lines :data:`FEW_SHOT_LINES` (shipped)."""
    return load_problems("train", FEW_SHOT_LINES)


def user_content(question: str) -> str:
    """A user turn: the question, a newline, :data:`INSTRUCTION`."""
    return f"{question}\n{INSTRUCTION}"


def final_answer_line(answer: int) -> str:
    """``The answer is 18.`` (no thousands separators)."""
    return FINAL_ANSWER.format(answer=answer)


def assistant_content(problem: Gsm8kProblem) -> str:
    """A worked example's assistant turn: the reference solution, a newline, the final-answer line."""
    return f"{problem.reference_solution}\n{final_answer_line(problem.gold)}"


def question_messages(question: str) -> list[dict[str, str]]:
    """A single-turn prompt: one user turn (:func:`user_content`)."""
    return [{"role": "user", "content": user_content(question)}]


def few_shot_messages(problems: Sequence[Gsm8kProblem], question: str) -> list[dict[str, str]]:
    """An N-shot prompt: a user/assistant pair per worked example, then the question's user turn.

    With no problems it is :func:`question_messages`; the messages of N examples are a
    prefix of those of N examples and any question."""
    messages: list[dict[str, str]] = []
    for problem in problems:
        messages.append({"role": "user", "content": user_content(problem.question)})
        messages.append({"role": "assistant", "content": assistant_content(problem)})
    return messages + question_messages(question)


@cache
def _shipped(split: str) -> str:
    resource = files("kvreg.app.flywheel").joinpath("data", "gsm8k", SHIPPED[split])
    try:
        return resource.read_text(encoding="utf-8")
    except OSError as e:  # an install without its package data
        raise UsageError(
            f"kvreg's GSM8K data {SHIPPED[split]} is missing: {e}", hint="reinstall kvreg, or give path="
        ) from e


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read GSM8K data {path}: {e}", hint=_HINT, path=str(path)) from e


def _problem(split: str, n: int, row: str, where: str) -> Gsm8kProblem:
    try:
        obj = json.loads(row)
    except json.JSONDecodeError as e:
        raise UsageError(f"line {n} of {where} is not JSON: {e}", hint=_HINT, path=where, line=n) from e
    fields = obj if isinstance(obj, dict) else {}
    if not (isinstance(fields.get("question"), str) and isinstance(fields.get("answer"), str)):
        raise UsageError(
            f"line {n} of {where} is not a GSM8K problem: it needs string 'question' and 'answer'",
            hint=_HINT,
            path=where,
            line=n,
        )
    return Gsm8kProblem(split, n, obj["question"], obj["answer"])
