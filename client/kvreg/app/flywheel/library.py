"""The flywheel's library: verify attempts, choose one solution per problem, deposit it.

Part 5(b) of the flywheel (docs/flywheel.md): after the baseline exam, every
problem gets one *verified* solution in the library —

1. ``verification_for`` checks a completion with the task's checker
   (:func:`~kvreg.engine.flywheel.task.check_answer` and
   :func:`~kvreg.engine.flywheel.task.check_solution`) and returns the manifest's
   ``verification`` record (``verifier``, ``verdict``, ``evidence``). The verdict
   is ``pass`` only when the completion is exactly ``solution #### answer``, every
   step of the solution checks, and the answer is ``a + b``: a right answer
   reached through a wrong step fails.
2. ``choose_entries`` picks, per problem, the greedy attempt if it verifies, else
   the first verifying sampled attempt (:func:`kvreg.engine.flywheel.sampling.sample`),
   else the exact solver's trace, marked ``source: exact-solver``.
3. ``deposit_entries`` deposits each entry through the engine
   (:func:`kvreg.engine.deposit.deposit`): the question is the prompt, the
   completion is the text, so the artifact's tokens are the question's tokens
   followed by the completion's — the prefix that knowledge routing matches. It
   re-verifies every entry first and refuses the whole batch if one does not pass.

This module does not decode with the model (``sampling`` and ``exam`` do), does
not push to a registry and does not route or graft; the flywheel loop does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvreg.core.errors import UnverifiedArtifactError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine.deposit import DepositResult, deposit
from kvreg.engine.flywheel.exam import Attempt
from kvreg.engine.flywheel.task import ANSWER_MARK, Problem, check_solution, extract_answer
from kvreg.engine.runtime import LoadedModel
from kvreg.store.home import Home

__all__ = [
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

VERIFIER = "kvreg.flywheel.checker/v1"
TASK = "addition"
GREEDY, SAMPLE, SOLVER = "model-greedy", "model-sample", "exact-solver"
SOURCES = (GREEDY, SAMPLE, SOLVER)

Completion = tuple[str, int]  # (text after the question, decoded tokens incl. EOS)


def _source(source: str) -> str:
    if source not in SOURCES:
        raise UsageError(f"unknown solution source {source!r}", hint=f"one of: {', '.join(SOURCES)}")
    return source


def verification_for(problem: Problem, completion: str, *, source: str) -> dict[str, Any]:
    """The manifest verification record of ``completion`` (the text after the question).

    ``evidence`` holds the problem, the expected and the parsed answer (decimal
    strings, so that any size fits canonical JSON), whether the answer checks,
    whether every step of the solution (the part before `` #### ``) checks,
    whether the completion is well formed (exactly one `` #### ``, followed by
    the answer alone), and the source of the completion.
    """
    _source(source)
    parsed = extract_answer(completion)
    solution, mark, tail = completion.partition(ANSWER_MARK)
    well_formed = bool(mark) and ANSWER_MARK not in tail and parsed is not None and tail == str(parsed)
    answer_checks = parsed == problem.answer
    steps_check = bool(mark) and check_solution(problem, solution)
    passed = well_formed and answer_checks and steps_check
    return {
        "verifier": VERIFIER,
        "verdict": "pass" if passed else "fail",
        "evidence": {
            "task": TASK,
            "problem": {"a": str(problem.a), "b": str(problem.b), "question": problem.question()},
            "expected_answer": str(problem.answer),
            "parsed_answer": None if parsed is None else str(parsed),
            "answer_checks": answer_checks,
            "steps_check": steps_check,
            "well_formed": well_formed,
            "source": source,
        },
    }


@dataclass(frozen=True)
class LibraryEntry:
    """One problem's chosen solution: the completion exactly as the model or the solver wrote it.

    ``completion`` is ``solution + " #### " + answer`` (no EOS); ``decoded_tokens``
    is what the model decoded for it (EOS included), None for the exact solver.
    """

    problem: Problem
    completion: str
    source: str
    decoded_tokens: int | None

    def __post_init__(self) -> None:
        _source(self.source)

    @property
    def question(self) -> str:
        return self.problem.question()

    def verification(self) -> dict[str, Any]:
        return verification_for(self.problem, self.completion, source=self.source)

    def verified(self) -> bool:
        return bool(self.verification()["verdict"] == "pass")


def solver_entry(problem: Problem) -> LibraryEntry:
    """The exact solver's trace of ``problem``, marked ``exact-solver``."""
    return LibraryEntry(problem, problem.solution() + ANSWER_MARK + str(problem.answer), SOLVER, None)


def _completion(item: Completion | Attempt | None) -> Completion | None:
    if item is None or isinstance(item, tuple):
        return item
    return (item.completion, item.tokens)


def _passes(problem: Problem, text: str, source: str) -> bool:
    return bool(verification_for(problem, text, source=source)["verdict"] == "pass")


def unsolved(
    problems: Sequence[Problem], greedy_attempts: Sequence[Completion | Attempt | None]
) -> list[Problem]:
    """The problems whose greedy attempt does not verify (the ones worth sampling)."""
    if len(problems) != len(greedy_attempts):
        raise UsageError(f"{len(problems)} problems but {len(greedy_attempts)} greedy attempts")
    out = []
    for problem, item in zip(problems, greedy_attempts, strict=True):
        got = _completion(item)
        if got is None or not _passes(problem, got[0], GREEDY):
            out.append(problem)
    return out


def choose_entries(
    problems: Sequence[Problem],
    greedy_attempts: Sequence[Completion | Attempt | None],
    samples: Sequence[Sequence[Completion]] | Mapping[Problem, Sequence[Completion]],
) -> list[LibraryEntry]:
    """One verified entry per problem: greedy if it verifies, else the first verifying sample, else solver.

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
        greedy = _completion(greedy_attempts[index])
        drawn = samples.get(problem, ()) if isinstance(samples, Mapping) else samples[index]
        entry: LibraryEntry | None = None
        if greedy is not None and _passes(problem, greedy[0], GREEDY):
            entry = LibraryEntry(problem, greedy[0], GREEDY, greedy[1])
        else:
            for text, tokens in drawn:
                if _passes(problem, text, SAMPLE):
                    entry = LibraryEntry(problem, text, SAMPLE, tokens)
                    break
        entries.append(entry if entry is not None else solver_entry(problem))
    return entries


def entry_ref(namespace: str, problem: Problem) -> RefName:
    """``namespace/add-a-b``: the ref of a problem's library entry."""
    return RefName(namespace, f"add-{problem.a}-{problem.b}")


def deposit_entries(
    lm: LoadedModel,
    home: Home,
    key: SigningKey,
    entries: Sequence[LibraryEntry],
    *,
    namespace: str,
    progress: Callable[[int, int], None] | None = None,
) -> list[DepositResult]:
    """Deposit every entry as a signed artifact with its verification record; aligned with ``entries``.

    Each artifact's prompt is the question and its text the completion (no EOS),
    so its tokens are ``BOS question completion``; its ref is
    ``namespace/add-a-b``. Every entry is verified again before anything is
    written, and ``UnverifiedArtifactError`` is raised (depositing nothing) if one
    does not pass. ``progress(done, total)`` is called after each deposit.
    """
    checked: list[tuple[LibraryEntry, dict[str, Any], RefName]] = []
    for entry in entries:
        record = entry.verification()
        if record["verdict"] != "pass":
            evidence = record["evidence"]
            failed = [k for k in ("well_formed", "answer_checks", "steps_check") if not evidence[k]]
            raise UnverifiedArtifactError(
                f"refusing to deposit the {entry.source} solution of {entry.problem.a} + {entry.problem.b}: "
                f"it does not verify ({', '.join(failed)} failed)",
                hint="only solutions whose checker verdict is pass go into the library",
            )
        checked.append((entry, record, entry_ref(namespace, entry.problem)))
    results: list[DepositResult] = []
    for done, (entry, record, ref) in enumerate(checked, start=1):
        problem = entry.problem
        results.append(
            deposit(
                lm,
                home,
                text=entry.completion,
                prompt=entry.question,
                ref=ref,
                key=key,
                verification=record,
                annotations={
                    "title": f"{problem.a} + {problem.b}",
                    "task": TASK,
                    "source": entry.source,
                    "answer": str(problem.answer),
                },
            )
        )
        if progress is not None:
            progress(done, len(checked))
    return results
