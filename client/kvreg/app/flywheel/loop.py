"""The flywheel loop: exam the frozen model, build a verified library, exam again through ``ask``.

:func:`run_flywheel` runs the three phases of docs/flywheel.md on the bundled
model (or any model that speaks the addition task):

a. **Baseline.** Every exam question — the *repeat* set (questions the library
   will cover) and the *unseen* set (held back from the library) — is answered
   greedily with no cache (:func:`kvreg.app.ask.ask` with ``mode="off"``):
   accuracy, decoded tokens, wall and CPU seconds per answer.
b. **Library.** For each repeat question the greedy answer is kept if the checker
   verifies it; otherwise ``attempts`` seeded samples are drawn and the first
   that verifies is kept; otherwise the exact solver's trace is used, marked
   ``exact-solver`` (:mod:`kvreg.app.flywheel.library`). Each is deposited as a
   signed artifact with its verification record and, with a registry, pushed.
c. **Exam again** with ``ask`` in ``auto`` mode on the repeat and unseen
   questions — in another home that pulls from the registry on demand when one
   is given. Each graft is checked byte for byte against a fresh computation of
   the same tokens (every decode step's logits SHA-256-equal), the fresh prefill
   of the grafted tokens is timed next to the graft, and a fallback's output is
   compared with the baseline's (same tokens, same logits digests). A *wrong
   graft* is a knowledge graft whose artifact is another question, or, where the
   library holds the answer (addition), whose answer is wrong: the goal is zero.
   Where the model writes the answer after the graft (GSM8K), a wrong answer there
   is counted as ``missed_after_graft``.

With a server (:class:`kvreg.app.flywheel.served.ServedExam`), both exams go through a
running ``kvreg engine serve``'s OpenAI API instead of ``ask`` in this process, so the
figures are those of the path applications use; the library is still built here, and
each graft the server made is checked by making it here too (same artifact, same text,
logits SHA-256-equal to a fresh run); a plain answer's text must be the baseline's.

The task (:mod:`kvreg.app.flywheel.tasks`) decides the problems, how they are asked
and checked, and what the library keeps.

It returns a :class:`FlywheelReport` (``to_dict`` for JSON); nothing here prints.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.app.ask import AskResult, ask
from kvreg.app.discovery import RemoteSource
from kvreg.app.flywheel.library import (
    choose_entries,
    deposit_entries,
    entry_ref,
    unsolved,
)
from kvreg.app.flywheel.served import ServedExam
from kvreg.app.flywheel.tasks import ExamSize, FlywheelTask, task_named
from kvreg.app.prompts import encode_prompt
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine.check import check_graft
from kvreg.engine.flywheel.sampling import sample
from kvreg.engine.runtime import LoadedModel, logits_digest, new_cache, prefill
from kvreg.remote.pushing import push
from kvreg.store.home import Home

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")


@dataclass(frozen=True)
class FlywheelSpec(ExamSize):
    """The task, the exam's size (:class:`ExamSize`: ``repeat_*``/``unseen_*`` for addition;
    ``repeat``, ``unseen``, ``first_line`` or ``lines`` for GSM8K) and the library's sampling;
    the defaults are ``kvreg demo``'s. ``data`` is a GSM8K test ``.jsonl`` (None: the copy
    shipped with kvreg); ``max_new_tokens`` None is the task's own limit.
    """

    attempts: int = 8  # samples per repeat question the greedy answer missed
    temperature: float = 1.0
    seed: int = 0
    max_new_tokens: int | None = None
    namespace: str = "flywheel"
    task: str = "addition"
    data: str | None = None

    def the_task(self) -> FlywheelTask:
        return task_named(self.task, self.data)

    def token_limit(self) -> int:
        return self.max_new_tokens if self.max_new_tokens is not None else self.the_task().max_new_tokens

    def problems(self) -> tuple[list[Any], list[Any]]:
        """(repeat, unseen): disjoint slices of the held-out exam."""
        return self.the_task().split(self)


@dataclass
class Answer:
    """One question answered once: what was used and what it cost."""

    problem: Any
    repeat: bool
    mode: str  # knowledge | prefix | off
    correct: bool
    decoded_tokens: int
    grafted_tokens: int
    prefilled_tokens: int
    wall_seconds: float
    cpu_seconds: float
    completion: str
    artifact: str | None = None
    source: str | None = None  # the library entry's source, for a knowledge graft
    wrong_graft: bool = False
    byte_exact: bool | None = (
        None  # graft: every step SHA-256-equal to a fresh run; fallback: same as baseline
    )
    graft_seconds: float | None = None
    fresh_prefill_seconds: float | None = None
    fetched_bytes: int = 0
    joules: float | None = None  # RAPL package energy over the answer, where exposed
    logits: list[str] = field(default_factory=list, repr=False)
    output_tokens: list[int] = field(default_factory=list, repr=False)
    group: str = ""  # the task's partition of its problems (addition: easy, hard)
    about: dict[str, Any] = field(default_factory=dict, repr=False)  # the task's description of the problem

    @property
    def hard(self) -> bool:
        return self.group == "hard"

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.about,
            "repeat": self.repeat,
            "group": self.group,
            "mode": self.mode,
            "correct": self.correct,
            "decoded_tokens": self.decoded_tokens,
            "grafted_tokens": self.grafted_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "wall_seconds": round(self.wall_seconds, 6),
            "cpu_seconds": round(self.cpu_seconds, 6),
            "artifact": self.artifact,
            "source": self.source,
            "wrong_graft": self.wrong_graft,
            "byte_exact": self.byte_exact,
            "graft_seconds": None if self.graft_seconds is None else round(self.graft_seconds, 6),
            "fresh_prefill_seconds": None
            if self.fresh_prefill_seconds is None
            else round(self.fresh_prefill_seconds, 6),
            "fetched_bytes": self.fetched_bytes,
            "joules": None if self.joules is None else round(self.joules, 6),
            "completion": self.completion,
        }


def summarize(answers: Sequence[Answer]) -> dict[str, Any]:
    n = len(answers)
    if n == 0:
        return {"questions": 0, "correct": 0, "accuracy": None, "mean_decoded_tokens": None}
    return {
        "questions": n,
        "correct": sum(a.correct for a in answers),
        "accuracy": sum(a.correct for a in answers) / n,
        "mean_decoded_tokens": sum(a.decoded_tokens for a in answers) / n,
        "mean_wall_seconds": sum(a.wall_seconds for a in answers) / n,
        "mean_cpu_seconds": sum(a.cpu_seconds for a in answers) / n,
        "mean_joules": None
        if any(a.joules is None for a in answers)
        else sum(a.joules or 0.0 for a in answers) / n,
    }


@dataclass
class FlywheelReport:
    spec: FlywheelSpec
    baseline: list[Answer]
    library: dict[str, Any]
    after: list[Answer]
    push: dict[str, Any] | None
    energy: dict[str, Any]
    seconds: dict[str, float]

    def _part(self, answers: Sequence[Answer], repeat: bool | None, group: str | None = None) -> list[Answer]:
        return [
            a
            for a in answers
            if (repeat is None or a.repeat == repeat) and (group is None or a.group == group)
        ]

    def groups(self) -> list[str]:
        """The task's groups of problems, in order of first appearance (addition: easy, hard)."""
        return list(dict.fromkeys(a.group for a in self.baseline))

    def metrics(self) -> dict[str, Any]:
        """The headline figures: accuracy, decoded tokens, graft vs prefill, checks, goals."""
        base_repeat = self._part(self.baseline, True)
        after_repeat = self._part(self.after, True)
        after_unseen = self._part(self.after, False)
        missed = sum(not a.correct for a in base_repeat)
        grafts = [a for a in self.after if a.mode != "off"]
        knowledge = [a for a in self.after if a.mode == "knowledge"]
        checked = [a for a in self.after if a.byte_exact is not None]
        timed = [a for a in knowledge if a.graft_seconds and a.fresh_prefill_seconds]
        graft_s = sum(a.graft_seconds or 0.0 for a in timed)
        prefill_s = sum(a.fresh_prefill_seconds or 0.0 for a in timed)
        base_tokens = summarize(base_repeat)["mean_decoded_tokens"]
        after_tokens = summarize(after_repeat)["mean_decoded_tokens"]
        n_all = len(self.baseline)
        accuracy_before = summarize(self.baseline)["accuracy"]
        accuracy_after = summarize(self.after)["accuracy"]
        goal_accuracy = None if accuracy_before is None or n_all == 0 else accuracy_before + missed / n_all
        ratio = None if not base_tokens or not after_tokens else base_tokens / after_tokens
        return {
            "accuracy_before": accuracy_before,
            "accuracy_after": accuracy_after,
            "accuracy_goal": goal_accuracy,
            "accuracy_goal_met": None
            if goal_accuracy is None or accuracy_after is None
            else accuracy_after >= goal_accuracy - 1e-12,
            "repeat_accuracy_before": summarize(base_repeat)["accuracy"],
            "repeat_accuracy_after": summarize(after_repeat)["accuracy"],
            "unseen_accuracy_before": summarize(self._part(self.baseline, False))["accuracy"],
            "unseen_accuracy_after": summarize(after_unseen)["accuracy"],
            "repeat_missed_by_baseline": missed,
            "repeat_decoded_tokens_before": base_tokens,
            "repeat_decoded_tokens_after": after_tokens,
            "repeat_decoded_tokens_ratio": ratio,
            # the bundled model's goal (docs/flywheel.md); a GSM8K answer's final line is ~7 tokens
            "decoded_tokens_goal_met": None
            if ratio is None or self.spec.task != "addition"
            else ratio >= 20.0,
            "knowledge_grafts": len(knowledge),
            "prefix_grafts": sum(a.mode == "prefix" for a in self.after),
            "fallbacks": sum(a.mode == "off" for a in self.after),
            "unseen_knowledge_grafts": sum(a.mode == "knowledge" for a in after_unseen),
            "wrong_grafts": sum(a.wrong_graft for a in self.after),
            "missed_after_graft": sum(a.mode == "knowledge" and not a.correct for a in self.after),
            "byte_exact_checks": len(checked),
            "byte_exact_passed": sum(bool(a.byte_exact) for a in checked),
            "grafted_tokens": sum(a.grafted_tokens for a in grafts),
            "graft_seconds": graft_s,
            "fresh_prefill_seconds": prefill_s,
            "prefill_over_graft": None if graft_s <= 0 else prefill_s / graft_s,
            "wall_seconds_per_answer_before": summarize(base_repeat).get("mean_wall_seconds"),
            "wall_seconds_per_answer_after": summarize(after_repeat).get("mean_wall_seconds"),
            "cpu_seconds_per_answer_before": summarize(base_repeat).get("mean_cpu_seconds"),
            "cpu_seconds_per_answer_after": summarize(after_repeat).get("mean_cpu_seconds"),
            "joules_per_answer_before": summarize(base_repeat).get("mean_joules"),
            "joules_per_answer_after": summarize(after_repeat).get("mean_joules"),
            "fetched_bytes": sum(a.fetched_bytes for a in self.after),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.__dict__,
            "metrics": self.metrics(),
            "baseline": {
                "all": summarize(self.baseline),
                "repeat": summarize(self._part(self.baseline, True)),
                "unseen": summarize(self._part(self.baseline, False)),
                **{g: summarize(self._part(self.baseline, None, g)) for g in self.groups()},
            },
            "after": {
                "all": summarize(self.after),
                "repeat": summarize(self._part(self.after, True)),
                "unseen": summarize(self._part(self.after, False)),
            },
            "problems": {
                "repeat": [
                    a.about.get("key", a.about.get("question")) for a in self._part(self.baseline, True)
                ],
                "unseen": [
                    a.about.get("key", a.about.get("question")) for a in self._part(self.baseline, False)
                ],
            },
            "library": self.library,
            "push": self.push,
            "energy": self.energy,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "answers": {
                "baseline": [a.to_dict() for a in self.baseline],
                "after": [a.to_dict() for a in self.after],
            },
        }


# --- measuring ---------------------------------------------------------------------------


def read_energy_uj() -> int | None:
    """The package energy counter (RAPL, microjoules), or None where the machine does not expose it."""
    try:
        return int(RAPL.read_text().strip())
    except (OSError, ValueError):
        return None


def _completion_text(lm: LoadedModel, result: AskResult) -> str:
    return str(lm.tokenizer.decode(result.completion_tokens, skip_special_tokens=True))


def _answer_one(
    lm: LoadedModel,
    home: Home,
    task: FlywheelTask,
    problem: Any,
    *,
    repeat: bool,
    mode: str,
    remote: RemoteSource | None,
    max_new_tokens: int,
) -> tuple[Answer, AskResult]:
    prompt = encode_prompt(lm, task.prompt(problem))
    energy = read_energy_uj()
    wall, cpu = time.perf_counter(), time.process_time()
    result = ask(lm, home, prompt, mode=mode, remote=remote, max_new_tokens=max_new_tokens)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    energy_after = read_energy_uj()
    completion = _completion_text(lm, result)
    ended = (
        bool(result.generation.decoded.tokens)
        and result.generation.decoded.tokens[-1] == lm.tokenizer.eos_token_id
    )
    continuation = str(lm.tokenizer.decode(result.generation.decoded.tokens, skip_special_tokens=True))
    correct = task.judge(problem, completion, continuation, ended)
    answer = Answer(
        problem=problem,
        repeat=repeat,
        mode=result.used_mode,
        correct=correct,
        decoded_tokens=result.decoded_tokens,
        grafted_tokens=result.grafted_tokens,
        prefilled_tokens=result.prefilled_tokens,
        wall_seconds=wall,
        cpu_seconds=cpu,
        completion=completion,
        logits=[str(logits_digest(x)) for x in result.generation.decoded.logits],
        output_tokens=list(result.generation.decoded.tokens),
        group=task.group(problem),
        about=task.describe(problem),
    )
    if result.remote is not None:
        answer.fetched_bytes = result.remote.fetched_bytes
    if energy is not None and energy_after is not None and energy_after >= energy:
        answer.joules = (energy_after - energy) / 1e6
    return answer, result


def _check_graft(
    lm: LoadedModel, task: FlywheelTask, problem: Any, answer: Answer, result: AskResult
) -> None:
    """Byte-exactness, the fresh prefill next to the graft, and whether the graft was wrong."""
    outcome = result.generation.outcome
    artifact = result.plan.artifact
    if outcome is None or artifact is None:
        return
    answer.artifact = str(artifact.ref) if artifact.ref else str(artifact.digest)
    answer.source = artifact.manifest.annotations.get("source")
    answer.byte_exact = check_graft(lm, outcome.plan, result.generation.decoded).byte_exact
    answer.graft_seconds = outcome.timings.get("read_seconds", 0.0) + outcome.timings.get(
        "graft_seconds", 0.0
    )
    tokens = result.generation.tokens[: outcome.plan.graft_tokens]
    t = time.perf_counter()
    prefill(lm, new_cache(lm), tokens, 0)
    answer.fresh_prefill_seconds = time.perf_counter() - t
    if answer.mode == "knowledge":
        notes = artifact.manifest.annotations
        stored = notes.get("problem")
        same_question = (
            stored == task.key(problem) if stored is not None else notes.get("title") == task.title(problem)
        )
        # A wrong graft is another problem's artifact; where the library holds the answer (addition)
        # a wrong answer after the graft is one too. Where the model writes the answer itself
        # (GSM8K), a wrong answer after the right problem's solution is an answer missed, counted
        # in the accuracy and in ``missed_after_graft``.
        answer.wrong_graft = not same_question or (task.answer_in_library and not answer.correct)


def _answer_served(
    server: ServedExam,
    task: FlywheelTask,
    problem: Any,
    *,
    repeat: bool,
    mode: str,
    max_new_tokens: int,
) -> Answer:
    """One question through the server's OpenAI API (``mode`` off: a plain run, the baseline)."""
    energy = read_energy_uj()
    served = server.answer(task.prompt(problem), max_tokens=max_new_tokens, plain=mode == "off")
    energy_after = read_energy_uj()
    facts = served.facts
    artifact = facts.get("artifact") or {}
    answer = Answer(
        problem=problem,
        repeat=repeat,
        mode=served.mode,
        correct=task.judge(problem, served.completion, served.continuation, served.ended),
        decoded_tokens=int(facts["decoded_tokens"]),
        grafted_tokens=int(facts["grafted_tokens"]),
        prefilled_tokens=int(facts["prefilled_tokens"]),
        wall_seconds=served.wall_seconds,
        cpu_seconds=float(facts.get("cpu_seconds") or 0.0),  # the server's, not this client's
        completion=served.completion,
        artifact=artifact.get("ref") or artifact.get("digest"),
        group=task.group(problem),
        about=task.describe(problem),
    )
    remote = facts.get("remote") or {}
    answer.fetched_bytes = int(remote.get("fetched_bytes") or 0)
    if energy is not None and energy_after is not None and energy_after >= energy:
        answer.joules = (energy_after - energy) / 1e6
    return answer


def _check_served_graft(
    lm: LoadedModel,
    home: Home,
    task: FlywheelTask,
    answer: Answer,
    *,
    remote: RemoteSource | None,
    max_new_tokens: int,
) -> None:
    """A server's graft, checked here: the same question asked in this process (``ask``, auto) must
    graft the same artifact and give the same text, and that graft must pass :func:`_check_graft`."""
    local, result = _answer_one(
        lm,
        home,
        task,
        answer.problem,
        repeat=answer.repeat,
        mode="auto",
        remote=remote,
        max_new_tokens=max_new_tokens,
    )
    if local.mode != "off":
        _check_graft(lm, task, answer.problem, local, result)
    same = local.mode == answer.mode and local.artifact == answer.artifact
    same = same and local.completion == answer.completion
    if not same:
        log.warning(
            "flywheel: the server's answer to %s differs from this process's (%s %s vs %s %s)",
            task.key(answer.problem),
            answer.mode,
            answer.artifact,
            local.mode,
            local.artifact,
        )
    answer.byte_exact = bool(local.byte_exact) and same
    answer.source, answer.wrong_graft = local.source, local.wrong_graft or not same
    answer.graft_seconds, answer.fresh_prefill_seconds = local.graft_seconds, local.fresh_prefill_seconds


def exam(
    lm: LoadedModel,
    home: Home,
    repeat: Sequence[Any],
    unseen: Sequence[Any],
    *,
    task: FlywheelTask,
    mode: str,
    remote: RemoteSource | None = None,
    max_new_tokens: int = 160,
    baseline: Sequence[Answer] | None = None,
    say: Progress | None = None,
    server: ServedExam | None = None,
) -> list[Answer]:
    """Answer every question once with ``ask`` in ``mode``; with ``baseline``, check each answer.

    With ``server``, each question goes to the server instead; a graft there is checked by
    asking the same question here (:func:`_check_served_graft`), a plain answer by comparing its
    text with the baseline's."""
    items = [(p, True) for p in repeat] + [(p, False) for p in unseen]
    reference = {a.problem: a for a in baseline or ()}
    out: list[Answer] = []
    for i, (problem, is_repeat) in enumerate(items, start=1):
        if server is not None:
            answer = _answer_served(
                server, task, problem, repeat=is_repeat, mode=mode, max_new_tokens=max_new_tokens
            )
            if answer.mode != "off":
                _check_served_graft(lm, home, task, answer, remote=remote, max_new_tokens=max_new_tokens)
            elif problem in reference:  # no graft: the same text as the baseline's plain run
                answer.byte_exact = answer.completion == reference[problem].completion
            out.append(answer)
            if say is not None and (i % 10 == 0 or i == len(items)):
                say(f"{mode} exam through {server.url}: {i}/{len(items)} answered")
            continue
        answer, result = _answer_one(
            lm, home, task, problem, repeat=is_repeat, mode=mode, remote=remote, max_new_tokens=max_new_tokens
        )
        if answer.mode != "off":
            _check_graft(lm, task, problem, answer, result)
        elif problem in reference:  # no graft: the output must be the baseline's, bit for bit
            base = reference[problem]
            answer.byte_exact = answer.output_tokens == base.output_tokens and answer.logits == base.logits
        out.append(answer)
        if say is not None and (i % 10 == 0 or i == len(items)):
            say(f"{mode} exam: {i}/{len(items)} answered")
    return out


# --- the loop ----------------------------------------------------------------------------


def build_library(
    lm: LoadedModel,
    home: Home,
    key: SigningKey,
    spec: FlywheelSpec,
    repeat: Sequence[Any],
    baseline: Sequence[Answer],
    say: Progress | None = None,
) -> tuple[dict[str, Any], list[RefName]]:
    """Greedy answers that verify, else seeded samples that verify, else the task's own; deposited."""
    task = spec.the_task()
    greedy = {a.problem: (a.completion, a.decoded_tokens) for a in baseline if a.repeat}
    attempts = [greedy.get(p) for p in repeat]
    missing = unsolved(repeat, attempts, task)
    samples: dict[Any, list[tuple[str, int]]] = {}
    t = time.perf_counter()
    if missing and spec.attempts > 0:
        if say is not None:
            say(f"sampling {spec.attempts} attempts for each of the {len(missing)} questions greedy missed")
        prompts = [task.prompt(p) for p in missing]
        drawn = sample(
            lm.model,
            lm.tokenizer,
            [p if isinstance(p, str) else str(p.to_list()) for p in prompts],
            attempts=spec.attempts,
            temperature=spec.temperature,
            seed=spec.seed,
            max_new_tokens=spec.token_limit(),
            ids=[encode_prompt(lm, p) for p in prompts],
        )
        samples = dict(zip(missing, drawn, strict=True))
    sample_seconds = time.perf_counter() - t
    entries = choose_entries(repeat, attempts, samples, task)
    if say is not None:
        say(f"depositing {len(entries)} verified solutions")
    t = time.perf_counter()
    results = deposit_entries(lm, home, key, entries, namespace=spec.namespace, task=task)
    deposit_seconds = time.perf_counter() - t
    sources: dict[str, int] = {}
    for e in entries:
        sources[e.source] = sources.get(e.source, 0) + 1
    report = {
        "entries": len(entries),
        "sources": sources,
        "exact_solver": sources.get("exact-solver", 0),
        "reference": sources.get("reference", 0),
        "from_the_model": sources.get("model-greedy", 0) + sources.get("model-sample", 0),
        "without_entry": [task.key(p) for p in repeat if p not in {e.problem for e in entries}],
        "sampled_questions": len(missing),
        "samples_drawn": len(missing) * spec.attempts if spec.attempts > 0 else 0,
        "tokens": sum(r.manifest.token_count for r in results),
        "chunks": sum(len(r.manifest.chunks) for r in results),
        "bytes_written": sum(r.write.bytes_written for r in results),
        "sample_seconds": sample_seconds,
        "deposit_seconds": deposit_seconds,
        "refs": [str(entry_ref(spec.namespace, e.problem, task)) for e in entries],
    }
    return report, [entry_ref(spec.namespace, e.problem, task) for e in entries]


@dataclass
class Registry:
    """Where the library goes and where the second exam reads from."""

    push_client: Any  # RegistryClient with write access to the namespace
    reader: RemoteSource  # the asking home's view of the registry
    home: Home  # the asking home: its own store, trusting the signer for the namespace
    jobs: int = 4


def run_flywheel(
    lm: LoadedModel,
    home: Home,
    key: SigningKey,
    spec: FlywheelSpec | None = None,
    *,
    registry: Registry | None = None,
    progress: Progress | None = None,
    server: ServedExam | None = None,
) -> FlywheelReport:
    """Baseline exam, library, (push), exam again through ``ask``; see the module docstring.

    With ``server`` (a running ``kvreg engine serve`` over ``home``, or over the registry the
    library is pushed to), both exams go through its OpenAI API; the library is built here."""
    spec = spec or FlywheelSpec()
    task = spec.the_task()
    limit = spec.token_limit()
    say = progress or (lambda _m: None)
    repeat, unseen = spec.problems()
    seconds: dict[str, float] = {}
    energy: dict[str, Any] = {"available": read_energy_uj() is not None, "source": str(RAPL)}

    through = "" if server is None else f", through the server at {server.url}"
    say(f"baseline exam: {len(repeat)} repeat + {len(unseen)} unseen questions, greedy, no cache{through}")
    t = time.perf_counter()
    baseline = exam(
        lm, home, repeat, unseen, task=task, mode="off", max_new_tokens=limit, say=say, server=server
    )
    seconds["baseline"] = time.perf_counter() - t

    t = time.perf_counter()
    library, refs = build_library(lm, home, key, spec, repeat, baseline, say)
    seconds["library"] = time.perf_counter() - t

    push_report: dict[str, Any] | None = None
    ask_home, source = home, None
    if registry is not None:
        say(f"pushing {len(refs)} artifacts to the registry")
        t = time.perf_counter()
        sent_objects = sent_bytes = 0
        for ref in refs:
            r = push(home, registry.push_client, ref, jobs=registry.jobs)
            sent_objects += r.objects_sent
            sent_bytes += r.bytes_sent
        seconds["push"] = time.perf_counter() - t
        push_report = {"refs": len(refs), "objects_sent": sent_objects, "bytes_sent": sent_bytes}
        ask_home, source = registry.home, registry.reader

    where = "a second home, pulling on demand from the registry" if source else "the same home"
    if server is not None:
        where += f", through the server at {server.url}"
    say(f"exam again with kvreg ask (auto) in {where}")
    t = time.perf_counter()
    after = exam(
        lm,
        ask_home,
        repeat,
        unseen,
        task=task,
        mode="auto",
        remote=source,
        max_new_tokens=limit,
        baseline=baseline,
        say=say,
        server=server,
    )
    seconds["after"] = time.perf_counter() - t
    return FlywheelReport(spec, baseline, library, after, push_report, energy, seconds)
