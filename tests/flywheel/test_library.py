"""The flywheel's library: seeded sampling, the checker's verification record, the choice of
one solution per problem, and signed deposits that carry the record — all with the bundled model."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app.flywheel.library import (
    VERIFIER,
    LibraryEntry,
    choose_entries,
    deposit_entries,
    entry_ref,
    solver_entry,
    unsolved,
    verification_for,
)
from kvreg.app.router import generate
from kvreg.core.errors import UnverifiedArtifactError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.engine.flywheel import exam
from kvreg.engine.flywheel.model import model_path
from kvreg.engine.flywheel.sampling import sample
from kvreg.engine.flywheel.task import ANSWER_MARK, Problem
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import LoadedModel, load_model
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home

P = Problem(4821, 3967)
SOLUTION = "S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+1=08;=8788"
RIGHT = SOLUTION + ANSWER_MARK + "8788"


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model(model_path(), EngineSettings())


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


@pytest.fixture
def key(home: Home) -> SigningKey:
    signing = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow("*", signing.public_key)
    save_trust_policy(policy, home.trust_path)
    return signing


# --- sampling ------------------------------------------------------------------------------


def test_sampling_is_seeded(lm: LoadedModel) -> None:
    items = exam.hard_exam(4) + exam.easy_exam(2)  # several prompt lengths, so several batches
    prompts = [p.question() for p in items]
    first = sample(lm.model, lm.tokenizer, prompts, attempts=3, temperature=1.5, seed=0, max_new_tokens=120)
    again = sample(lm.model, lm.tokenizer, prompts, attempts=3, temperature=1.5, seed=0, max_new_tokens=120)
    other = sample(lm.model, lm.tokenizer, prompts, attempts=3, temperature=1.5, seed=1, max_new_tokens=120)
    assert first == again
    assert first != other
    assert [len(s) for s in first] == [3] * len(prompts)
    for drawn in first + other:
        for text, tokens in drawn:
            assert "<" not in text  # no special token in the text
            # One token per character, and a drawn special token (EOS, say) is counted, not written.
            assert len(text) <= tokens <= 120
    # A prompt's draws do not depend on the prompts batched with it or their order.
    alone = sample(
        lm.model, lm.tokenizer, prompts[:1], attempts=3, temperature=1.5, seed=0, max_new_tokens=120
    )
    assert alone[0] == first[0]


def test_cold_sampling_is_greedy(lm: LoadedModel) -> None:
    items = exam.hard_exam(3)
    drawn = sample(
        lm.model, lm.tokenizer, [p.question() for p in items], attempts=2, temperature=1e-3, seed=7
    )
    for p, attempts in zip(items, drawn, strict=True):
        [greedy] = exam.greedy(lm.model, lm.tokenizer, [p.question()])
        assert attempts == [greedy, greedy]


def test_sampling_rejects_bad_arguments(lm: LoadedModel) -> None:
    with pytest.raises(UsageError):
        sample(lm.model, lm.tokenizer, ["Q:1+2=? "], attempts=0, temperature=1.0, seed=0)
    with pytest.raises(UsageError):
        sample(lm.model, lm.tokenizer, ["Q:1+2=? "], attempts=1, temperature=0.0, seed=0)


# --- verification --------------------------------------------------------------------------


def test_verification_passes_the_exact_solution() -> None:
    record = verification_for(P, RIGHT, source="model-greedy")
    assert record == {
        "verifier": VERIFIER,
        "verdict": "pass",
        "evidence": {
            "task": "addition",
            "problem": {"a": "4821", "b": "3967", "question": "Q:4821+3967=? "},
            "expected_answer": "8788",
            "parsed_answer": "8788",
            "answer_checks": True,
            "steps_check": True,
            "well_formed": True,
            "source": "model-greedy",
        },
    }
    assert solver_entry(P).completion == RIGHT
    assert solver_entry(P).verified()


@pytest.mark.parametrize(
    ("completion", "failed"),
    [
        # the right answer, but a step adds wrong (and the result is still written right)
        ("S:1+7+0=09;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788", {"steps_check"}),
        # the right answer, but a carry is dropped
        ("S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+0=08;=8788 #### 8788", {"steps_check"}),
        # the right answer with no derivation at all
        ("S:=8788 #### 8788", {"steps_check"}),
        # a right derivation, a wrong answer
        (SOLUTION + ANSWER_MARK + "8789", {"answer_checks"}),
        # a wrong derivation and answer that agree with each other
        ("S:1+7+0=08;2+6+0=08;8+9+0=07;4+3+0=07;=7788 #### 7788", {"steps_check", "answer_checks"}),
        # no answer mark
        (SOLUTION, {"steps_check", "answer_checks", "well_formed"}),
        # something after the answer, or a second answer
        (RIGHT + " 1", {"well_formed"}),
        (SOLUTION + ANSWER_MARK + "1" + ANSWER_MARK + "8788", {"well_formed"}),
        ("", {"steps_check", "answer_checks", "well_formed"}),
    ],
)
def test_verification_fails(completion: str, failed: set[str]) -> None:
    record = verification_for(P, completion, source="model-sample")
    assert record["verdict"] == "fail"
    evidence = record["evidence"]
    assert {k for k in ("answer_checks", "steps_check", "well_formed") if not evidence[k]} == failed
    assert evidence["source"] == "model-sample"
    # The record is a valid manifest verification (canonical JSON, known verdict).
    assert not LibraryEntry(P, completion, "model-sample", 1).verified()


def test_unknown_source_is_refused() -> None:
    with pytest.raises(UsageError):
        verification_for(P, RIGHT, source="oracle")
    with pytest.raises(UsageError):
        LibraryEntry(P, RIGHT, "oracle", None)


# --- choosing entries ----------------------------------------------------------------------


def test_choose_prefers_greedy_then_sample_then_solver() -> None:
    q = Problem(35, 21)
    r = Problem(7181, 3625)
    wrong_step = "S:1+7+0=09;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788"  # right answer, wrong step
    other = "S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788 "  # trailing space: not well formed
    greedy = [(RIGHT, 44), (wrong_step, 44), ("S:5+1+0=06;3+2+0=05;=56 #### 57", 20), None]
    samples = [
        [(wrong_step, 44)],
        [(other, 45), (wrong_step, 44), (RIGHT, 43), (RIGHT, 42)],
        [("S:5+1+0=06;3+2+0=05;=56 #### 56", 31)],
        [],
    ]
    problems = [P, P, q, r]
    entries = choose_entries(problems, greedy, samples)
    assert [(e.problem, e.source, e.decoded_tokens) for e in entries] == [
        (P, "model-greedy", 44),
        (P, "model-sample", 43),  # the first sample that verifies, not the first with the right answer
        (q, "model-sample", 31),
        (r, "exact-solver", None),
    ]
    assert entries[1].completion == RIGHT
    assert entries[3] == solver_entry(r)
    assert all(e.verified() for e in entries)
    # Samples keyed by problem (only the unsolved ones were sampled) choose the same.
    assert unsolved(problems, greedy) == [P, q, r]
    keyed = {q: samples[2]}
    assert [e.source for e in choose_entries([P, q, r], [greedy[0], greedy[2], None], keyed)] == [
        "model-greedy",
        "model-sample",
        "exact-solver",
    ]
    with pytest.raises(UsageError):
        choose_entries(problems, greedy[:2], samples)


def test_choose_from_the_models_own_attempts(lm: LoadedModel) -> None:
    items = exam.easy_exam(3) + exam.hard_exam(3)
    greedy = exam.attempt(lm.model, lm.tokenizer, items)
    drawn = sample(lm.model, lm.tokenizer, [p.question() for p in items], attempts=4, temperature=1.0, seed=0)
    entries = choose_entries(items, greedy, drawn)
    assert all(e.verified() for e in entries)
    for entry, attempt, samples in zip(entries, greedy, drawn, strict=True):
        if attempt.correct:  # greedy decoded a right answer: on this model its steps check too
            assert entry.source == "model-greedy"
            assert (entry.completion, entry.decoded_tokens) == (attempt.completion, attempt.tokens)
        elif entry.source == "model-sample":
            assert (entry.completion, entry.decoded_tokens) in samples
        else:
            assert entry == solver_entry(entry.problem)
    assert entries[0].source == "model-greedy"  # the easy part is solved greedily


# --- deposits ------------------------------------------------------------------------------


def test_deposits_are_signed_and_carry_the_record(lm: LoadedModel, home: Home, key: SigningKey) -> None:
    items = exam.easy_exam(2)
    greedy = exam.attempt(lm.model, lm.tokenizer, items)
    entries = choose_entries([*items, P], [*greedy, None], [[], [], []])
    assert [e.source for e in entries] == ["model-greedy", "model-greedy", "exact-solver"]
    seen: list[tuple[int, int]] = []
    results = deposit_entries(
        lm, home, key, entries, namespace="fly", progress=lambda done, total: seen.append((done, total))
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]
    for entry, result in zip(entries, results, strict=True):
        problem = entry.problem
        ref = RefName("fly", f"add-{problem.a}-{problem.b}")
        assert result.ref == ref == entry_ref("fly", problem)
        artifact = open_artifact(home, str(ref))  # reads the envelope and checks the signature
        manifest: Manifest = artifact.manifest
        assert manifest.digest == result.manifest.digest
        verification = manifest.verification
        assert verification is not None
        assert verification.verifier == VERIFIER
        assert verification.verdict == "pass"
        assert verification.evidence == entry.verification()["evidence"]
        assert verification.evidence["source"] == entry.source
        assert manifest.annotations == {
            "title": f"{problem.a} + {problem.b}",
            "task": "addition",
            "source": entry.source,
            "answer": str(problem.answer),
            "question": problem.question(),
            "problem": f"add-{problem.a}-{problem.b}",
        }
        tokens = read_tokens(home, manifest)
        question = lm.encode(problem.question(), first=True)
        assert tokens[: len(question)] == question
        assert tokens == lm.encode(problem.question() + entry.completion, first=True)
        assert lm.tokenizer.eos_token_id not in tokens
        assert home.objects.read(manifest.text.digest) == entry.completion.encode()
        assert manifest.prompt is not None and manifest.prompt.token_count == len(question)
        # The router grafts it for its question, and the model ends the answer at once.
        routed = generate(lm, home, question, mode="knowledge", max_new_tokens=8, stop_at_eos=True)
        assert not routed.fallback and routed.plan.artifact is not None
        assert routed.plan.artifact.digest == manifest.digest
        assert routed.decoded.tokens == [lm.tokenizer.eos_token_id]
    unseen = lm.encode(Problem(4821, 3968).question(), first=True)
    assert generate(lm, home, unseen, mode="knowledge", max_new_tokens=1).fallback


def test_deposit_refuses_a_failing_entry(lm: LoadedModel, home: Home, key: SigningKey) -> None:
    good = solver_entry(Problem(35, 21))
    bad = LibraryEntry(P, "S:1+7+0=09;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788", "model-sample", 44)
    with pytest.raises(UnverifiedArtifactError, match="steps_check"):
        deposit_entries(lm, home, key, [good, bad], namespace="fly")
    assert home.refs.list() == []  # nothing was deposited, not even the good entry
