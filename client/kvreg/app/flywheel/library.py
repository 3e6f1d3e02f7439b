"""The flywheel's library: verify attempts, choose one solution per problem, deposit it.

Part 5(b) of the flywheel (docs/flywheel.md): after the baseline exam, every
problem gets one *verified* solution in the library, by the rules of its task
(:mod:`kvreg.app.flywheel.tasks`) —

1. ``choose_entries`` picks, per problem, the greedy attempt if the task's checker
   passes it, else the first passing sampled attempt
   (:func:`kvreg.engine.flywheel.sampling.sample`), else the task's own solution
   (the exact solver's trace for addition, marked ``exact-solver``; the GSM8K
   reference, marked ``reference``). A GSM8K solution is kept without its
   final-answer line; an addition solution with its answer.
2. ``deposit_entries`` deposits each entry through the engine
   (:func:`kvreg.engine.deposit.deposit`): the question, as the task asks it (text, or
   chat messages rendered with the model's template), is the prompt and the solution
   the text, so the artifact's tokens are the question's followed by the solution's —
   the prefix that knowledge routing matches. It refuses the whole batch if one entry
   does not pass.

``verification_for`` and ``solver_entry`` are the addition task's checker record and
exact-solver entry. This module does not decode with the model (``sampling`` and
``exam`` do), does not push to a registry and does not route or graft; the flywheel
loop does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvreg.app.flywheel.tasks import GREEDY, SAMPLE, SOURCES, AdditionTask, FlywheelTask
from kvreg.app.prompts import engine_prompt
from kvreg.core.errors import UnverifiedArtifactError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine.deposit import DepositResult, deposit
from kvreg.engine.flywheel.exam import Attempt
from kvreg.engine.flywheel.task import Problem
from kvreg.engine.runtime import LoadedModel
from kvreg.store.home import Home

__all__ = [
    "ADDITION",
    "SOURCES",
    "TASK",
    "VERIFIER",
    "LibraryEntry",
    "choose_entries",
    "deposit_entries",
    "entry_ref",
    "solver_entry",
    "unsolved",
    "verification_for",
]

ADDITION = AdditionTask()
VERIFIER = ADDITION.verifier
TASK = ADDITION.name
SOLVER = ADDITION.reference_source

Completion = tuple[str, int]  # (text after the question, decoded tokens incl. EOS)


def _source(source: str) -> str:
    if source not in SOURCES:
        raise UsageError(f"unknown solution source {source!r}", hint=f"one of: {', '.join(SOURCES)}")
    return source


def verification_for(problem: Problem, completion: str, *, source: str) -> dict[str, Any]:
    """The addition task's manifest verification record of ``completion`` (the text after the question).

    ``evidence`` holds the problem, the expected and the parsed answer (decimal
    strings, so that any size fits canonical JSON), whether the answer checks,
    whether every step of the solution (the part before `` #### ``) checks,
    whether the completion is well formed (exactly one `` #### ``, followed by
    the answer alone), and the source of the completion.
    """
    return ADDITION.verification(problem, completion, _source(source))


@dataclass(frozen=True)
class LibraryEntry:
    """One problem's chosen solution, as deposited after the question.

    For addition ``completion`` is ``solution + " #### " + answer`` (no EOS); GSM8K keeps the
    solution without its final-answer line. ``record`` is the verification the task's checker
    made when the entry was chosen (of the whole text, for a cut solution); without one, the
    addition checker computes it on demand.
    ``decoded_tokens`` is what the model decoded for it (EOS included), None for a
    task-made solution.
    """

    problem: Any
    completion: str
    source: str
    decoded_tokens: int | None
    record: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _source(self.source)

    def verification(self) -> dict[str, Any]:
        if self.record is not None:
            return self.record
        return verification_for(self.problem, self.completion, source=self.source)

    def verified(self) -> bool:
        return bool(self.verification()["verdict"] == "pass")


def solver_entry(problem: Problem) -> LibraryEntry:
    """The exact solver's trace of an addition ``problem``, marked ``exact-solver``."""
    made = ADDITION.reference_text(problem)
    return LibraryEntry(problem, made.text, SOLVER, None)


def _completion(item: Completion | Attempt | None) -> Completion | None:
    if item is None or isinstance(item, tuple):
        return item
    return (item.completion, item.tokens)


def _entry(task: FlywheelTask, problem: Any, got: Completion | None, source: str) -> LibraryEntry | None:
    if got is None:
        return None
    kept = task.library_text(problem, got[0], source)
    if kept is None:
        return None
    return LibraryEntry(problem, kept.text, source, got[1], kept.verification)


def unsolved(
    problems: Sequence[Any],
    greedy_attempts: Sequence[Completion | Attempt | None],
    task: FlywheelTask = ADDITION,
) -> list[Any]:
    """The problems whose greedy attempt does not verify (the ones worth sampling)."""
    if len(problems) != len(greedy_attempts):
        raise UsageError(f"{len(problems)} problems but {len(greedy_attempts)} greedy attempts")
    return [
        problem
        for problem, item in zip(problems, greedy_attempts, strict=True)
        if _entry(task, problem, _completion(item), GREEDY) is None
    ]


def choose_entries(
    problems: Sequence[Any],
    greedy_attempts: Sequence[Completion | Attempt | None],
    samples: Sequence[Sequence[Completion]] | Mapping[Any, Sequence[Completion]],
    task: FlywheelTask = ADDITION,
) -> list[LibraryEntry]:
    """One verified entry per problem: greedy if it verifies, else the first verifying sample, else
    the task's own solution; a problem with none of these (a GSM8K reference in the errata) gets
    no entry.

    ``greedy_attempts`` is aligned with ``problems`` (``(text, tokens)`` pairs as
    ``exam.greedy`` returns them, ``exam.Attempt`` objects, or None for a problem
    not attempted). ``samples`` is either aligned with ``problems`` (as
    ``sampling.sample`` returns it) or a mapping from problem to its samples, in
    which a problem may be missing (sampled only where greedy failed, say).
    """
    if len(problems) != len(greedy_attempts):
        raise UsageError(f"{len(problems)} problems but {len(greedy_attempts)} greedy attempts")
    if not isinstance(samples, Mapping) and len(samples) != len(problems):
        raise UsageError(f"{len(problems)} problems but samples for {len(samples)}")
    entries: list[LibraryEntry] = []
    for index, problem in enumerate(problems):
        drawn = samples.get(problem, ()) if isinstance(samples, Mapping) else samples[index]
        entry = _entry(task, problem, _completion(greedy_attempts[index]), GREEDY)
        for got in drawn:
            if entry is not None:
                break
            entry = _entry(task, problem, got, SAMPLE)
        if entry is None:
            made = task.reference_text(problem)
            if made is not None:
                entry = LibraryEntry(problem, made.text, task.reference_source, None, made.verification)
        if entry is not None:
            entries.append(entry)
    return entries


def entry_ref(namespace: str, problem: Any, task: FlywheelTask = ADDITION) -> RefName:
    """``namespace/<key>`` (``add-a-b``, ``gsm8k-test-0042``): the ref of a problem's library entry."""
    return RefName(namespace, task.key(problem))


def deposit_entries(
    lm: LoadedModel,
    home: Home,
    key: SigningKey,
    entries: Sequence[LibraryEntry],
    *,
    namespace: str,
    task: FlywheelTask = ADDITION,
    progress: Callable[[int, int], None] | None = None,
) -> list[DepositResult]:
    """Deposit every entry as a signed artifact with its verification record; aligned with ``entries``.

    Each artifact's prompt is the question as the task asks it and its text the solution
    (no EOS); its ref is ``namespace/<key>``. Every entry's record is checked before
    anything is written, and ``UnverifiedArtifactError`` is raised (depositing nothing) if
    one does not pass. ``progress(done, total)`` is called after each deposit.
    """
    checked: list[tuple[LibraryEntry, dict[str, Any], RefName]] = []
    for entry in entries:
        record = entry.verification()
        if record["verdict"] != "pass":
            evidence = record.get("evidence", {})
            failed = [k for k in ("well_formed", "answer_checks", "steps_check") if not evidence.get(k, True)]
            why = f" ({', '.join(failed)} failed)" if failed else ""
            raise UnverifiedArtifactError(
                f"refusing to deposit the {entry.source} solution of {task.title(entry.problem)}: "
                f"it does not verify{why}",
                hint="only solutions whose checker verdict is pass go into the library",
            )
        checked.append((entry, record, entry_ref(namespace, entry.problem, task)))
    results: list[DepositResult] = []
    for done, (entry, record, ref) in enumerate(checked, start=1):
        problem = entry.problem
        results.append(
            deposit(
                lm,
                home,
                text=entry.completion,
                prompt=engine_prompt(lm, task.prompt(problem)),
                ref=ref,
                key=key,
                verification=record,
                annotations={
                    "title": task.title(problem),
                    "task": task.name,
                    "source": entry.source,
                    "answer": str(task.describe(problem)["answer"]),
                    "problem": task.key(problem),
                },
            )
        )
        if progress is not None:
            progress(done, len(checked))
    return results
