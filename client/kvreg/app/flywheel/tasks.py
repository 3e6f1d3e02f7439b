"""The flywheel's tasks: what a problem is, how it is asked, checked and kept in the library.

The loop (:mod:`kvreg.app.flywheel.loop`) knows nothing of arithmetic or word problems;
a :class:`FlywheelTask` tells it

- which problems make the exam (``split``: the *repeat* set the library will cover and
  the *unseen* set held back from it), each with a stable ``key`` (its ref name);
- how a problem is asked (``prompt``: plain text, or chat messages rendered with the
  model's template) and how many tokens an answer may take;
- whether an answer is right (``judge``), given the whole completion after the prompt
  and the part the model decoded itself (after a knowledge graft the completion begins
  with the stored solution, and the final answer must be in the model's own part);
- what goes into the library (``library_text``: a model's solution the checker passes,
  cut where the task says; ``reference_text``: the task's own verified solution).

Two tasks: :class:`AdditionTask`, the bundled model's multi-digit addition (the solution
is deposited with its answer, so a repeat question costs one decoded token), and
:class:`Gsm8kTask`, GSM8K on an instruct model through its chat template (the solution
is deposited *without* its final-answer line, so the model writes the answer itself).
Nothing here decodes, deposits or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kvreg.app.flywheel.gsm8k import (
    Gsm8kProblem,
    final_answer_line,
    load_problems,
    question_messages,
)
from kvreg.app.flywheel.gsm8k_checker import REFERENCE_ERRATA, check_completion, check_solution
from kvreg.app.prompts import ChatMessages, Prompt
from kvreg.core.errors import UsageError
from kvreg.engine.flywheel.exam import easy_exam, hard_exam
from kvreg.engine.flywheel.task import ANSWER_MARK, Problem, check_answer, extract_answer
from kvreg.engine.flywheel.task import check_solution as steps_check

__all__ = [
    "GREEDY",
    "SAMPLE",
    "SOURCES",
    "AdditionTask",
    "ExamSize",
    "FlywheelTask",
    "Gsm8kTask",
    "LibraryText",
    "task_named",
]

GREEDY, SAMPLE = "model-greedy", "model-sample"
SOURCES = (GREEDY, SAMPLE, "exact-solver", "reference")


@dataclass(frozen=True)
class ExamSize:
    """How many problems of each part; a task reads the fields that concern it."""

    repeat_easy: int = 12
    repeat_hard: int = 12
    unseen_easy: int = 4
    unseen_hard: int = 4
    repeat: int = 100  # GSM8K: test lines first_line .. first_line + repeat - 1
    unseen: int = 50  # GSM8K: the lines right after the repeat ones
    first_line: int = 1
    lines: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # GSM8K: (repeat, unseen) lines instead


@dataclass(frozen=True)
class LibraryText:
    """A verified solution as it is deposited after the question, with its verification record."""

    text: str
    verification: dict[str, Any]


class FlywheelTask(Protocol):
    name: str
    reference_source: str  # the source of a task-made solution: "exact-solver" or "reference"
    max_new_tokens: int
    # Whether a library solution holds the answer itself (then a wrong answer after a knowledge
    # graft means a wrong artifact); when False the model writes the answer after the graft.
    answer_in_library: bool

    def split(self, size: ExamSize) -> tuple[list[Any], list[Any]]: ...

    def key(self, problem: Any) -> str: ...

    def title(self, problem: Any) -> str: ...

    def group(self, problem: Any) -> str: ...

    def describe(self, problem: Any) -> dict[str, Any]: ...

    def prompt(self, problem: Any) -> Prompt: ...

    def judge(self, problem: Any, completion: str, continuation: str, ended: bool) -> bool: ...

    def library_text(self, problem: Any, completion: str, source: str) -> LibraryText | None: ...

    def reference_text(self, problem: Any) -> LibraryText | None: ...


def _record(verifier: str, passed: bool, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"verifier": verifier, "verdict": "pass" if passed else "fail", "evidence": evidence}


class AdditionTask:
    """Multi-digit addition written out per digit, for the bundled 1M-parameter model."""

    name = "addition"
    reference_source = "exact-solver"
    verifier = "kvreg.flywheel.checker/v1"
    max_new_tokens = 160
    answer_in_library = True

    def split(self, size: ExamSize) -> tuple[list[Problem], list[Problem]]:
        easy, hard = easy_exam(), hard_exam()
        repeat = easy[: size.repeat_easy] + hard[: size.repeat_hard]
        unseen = (
            easy[size.repeat_easy : size.repeat_easy + size.unseen_easy]
            + hard[size.repeat_hard : size.repeat_hard + size.unseen_hard]
        )
        return repeat, unseen

    def key(self, problem: Problem) -> str:
        return f"add-{problem.a}-{problem.b}"

    def title(self, problem: Problem) -> str:
        return f"{problem.a} + {problem.b}"

    def group(self, problem: Problem) -> str:
        return "hard" if problem.digits >= 6 else "easy"

    def describe(self, problem: Problem) -> dict[str, Any]:
        return {"question": problem.question(), "answer": problem.answer, "hard": problem.digits >= 6}

    def prompt(self, problem: Problem) -> Prompt:
        return problem.question()

    def judge(self, problem: Problem, completion: str, continuation: str, ended: bool) -> bool:
        return ended and ANSWER_MARK in completion and check_answer(problem, problem.question() + completion)

    def verification(self, problem: Problem, completion: str, source: str) -> dict[str, Any]:
        """Passes only for exactly ``solution #### answer`` with every step right and ``a + b``."""
        parsed = extract_answer(completion)
        solution, mark, tail = completion.partition(ANSWER_MARK)
        well_formed = bool(mark) and ANSWER_MARK not in tail and parsed is not None and tail == str(parsed)
        answer_checks = parsed == problem.answer
        steps = bool(mark) and steps_check(problem, solution)
        return _record(
            self.verifier,
            well_formed and answer_checks and steps,
            {
                "task": self.name,
                "problem": {"a": str(problem.a), "b": str(problem.b), "question": problem.question()},
                "expected_answer": str(problem.answer),
                "parsed_answer": None if parsed is None else str(parsed),
                "answer_checks": answer_checks,
                "steps_check": steps,
                "well_formed": well_formed,
                "source": source,
            },
        )

    def library_text(self, problem: Problem, completion: str, source: str) -> LibraryText | None:
        record = self.verification(problem, completion, source)
        return LibraryText(completion, record) if record["verdict"] == "pass" else None

    def reference_text(self, problem: Problem) -> LibraryText:
        text = problem.solution() + ANSWER_MARK + str(problem.answer)
        return LibraryText(text, self.verification(problem, text, self.reference_source))


class Gsm8kTask:
    """GSM8K word problems, asked through the model's chat template, checked strictly.

    A completion is right when the model ended its turn and :func:`check_completion` passes
    (the final answer from the model's own tokens, every arithmetic claim right). A library
    solution is the model's own (checker passed) or the GSM8K reference (``source:
    reference``, verifier ``gsm8k-gold``), deposited without its final-answer line and with a
    trailing newline, so that the model continues with the answer.
    """

    name = "gsm8k"
    reference_source = "reference"
    max_new_tokens = 256
    answer_in_library = False

    def __init__(self, path: str | None = None) -> None:
        self.path = path  # a GSM8K test .jsonl; None: the copy shipped with kvreg

    def split(self, size: ExamSize) -> tuple[list[Gsm8kProblem], list[Gsm8kProblem]]:
        path = Path(self.path) if self.path else None
        if size.lines is not None:
            repeat_lines, unseen_lines = size.lines
            if set(repeat_lines) & set(unseen_lines):
                raise UsageError("a GSM8K line cannot be both a repeat and an unseen problem")
            return load_problems("test", repeat_lines, path), load_problems("test", unseen_lines, path)
        if size.first_line < 1 or size.repeat < 0 or size.unseen < 0:
            raise UsageError("GSM8K lines start at 1, and the exam sizes cannot be negative")
        lines = list(range(size.first_line, size.first_line + size.repeat + size.unseen))
        problems = load_problems("test", lines, path)
        return problems[: size.repeat], problems[size.repeat :]

    def key(self, problem: Gsm8kProblem) -> str:
        return problem.key

    def title(self, problem: Gsm8kProblem) -> str:
        words = problem.question.split()
        return " ".join(words[:12]) + (" …" if len(words) > 12 else "")

    def group(self, problem: Gsm8kProblem) -> str:
        return self.name

    def describe(self, problem: Gsm8kProblem) -> dict[str, Any]:
        return {
            "question": problem.question,
            "answer": problem.gold,
            "split": problem.split,
            "line": problem.line,
            "key": problem.key,
        }

    def prompt(self, problem: Gsm8kProblem) -> Prompt:
        return ChatMessages.parse(question_messages(problem.question), source=problem.key)

    def judge(self, problem: Gsm8kProblem, completion: str, continuation: str, ended: bool) -> bool:
        solution = completion[: len(completion) - len(continuation)]
        return ended and check_completion(solution, continuation, problem.gold).passed

    @staticmethod
    def _without_answer_line(text: str) -> str | None:
        """The solution without its last line (the final answer); None if nothing would remain."""
        body = text.rstrip()
        head, _, _last = body.rpartition("\n")
        head = head.rstrip()
        return head + "\n" if head else None

    def library_text(self, problem: Gsm8kProblem, completion: str, source: str) -> LibraryText | None:
        result = check_solution(completion, problem.gold)
        solution = self._without_answer_line(completion)
        if not result.passed or solution is None:
            return None
        evidence = {"task": self.name, "problem": problem.key, "line": problem.line, "source": source}
        evidence.update(result.to_dict())
        return LibraryText(solution, _record(result.to_dict()["checker"], True, evidence))

    def reference_text(self, problem: Gsm8kProblem) -> LibraryText | None:
        """The reference solution, or None for the test lines whose reference states a false
        equation (:data:`REFERENCE_ERRATA`): those problems get no library entry unless the
        model's own solution passes."""
        if problem.line in REFERENCE_ERRATA and problem.split == "test":
            return None
        full = f"{problem.reference_solution}\n{final_answer_line(problem.gold)}"
        result = check_solution(full, problem.gold)
        evidence = {
            "task": self.name,
            "problem": problem.key,
            "line": problem.line,
            "source": self.reference_source,
        }
        evidence.update(result.to_dict())
        if not result.passed:
            return None
        return LibraryText(problem.reference_solution + "\n", _record("gsm8k-gold", True, evidence))


def task_named(name: str, data: str | None = None) -> FlywheelTask:
    """The task called ``name`` ("addition" or "gsm8k"); ``data`` is a GSM8K .jsonl for gsm8k."""
    if name == "addition":
        if data is not None:
            raise UsageError("--data is for --task gsm8k")
        return AdditionTask()
    if name == "gsm8k":
        return Gsm8kTask(data)
    raise UsageError(f"unknown flywheel task {name!r}", hint="one of: addition, gsm8k")
