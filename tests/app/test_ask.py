"""``ask`` over the local store with the bundled flywheel model: auto picks a verified
artifact (knowledge), falls back to prefix and then to no cache, ``off`` never grafts,
and what it answers is what a fresh computation of the same tokens gives, bit for bit."""

from __future__ import annotations

import pytest

from kvreg.app.ask import ask
from kvreg.core.errors import UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine import deposit
from kvreg.engine.check import check_graft
from kvreg.engine.flywheel.model import model_path
from kvreg.engine.flywheel.task import ANSWER_MARK, Problem, check_answer
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.router import plain_generate
from kvreg.engine.runtime import LoadedModel, load_model, logits_digest
from kvreg.store.home import Home

SOLVED = Problem(123456, 654329)
UNSEEN = Problem(987654, 123123)
PASS = {"verifier": "test.checker", "verdict": "pass", "evidence": {}}


@pytest.fixture(scope="module")
def fw() -> LoadedModel:
    return load_model(model_path(), EngineSettings(block_size=8))


def _trace(p: Problem) -> str:
    return p.question() + p.solution() + ANSWER_MARK + str(p.answer)


def _deposit(lm: LoadedModel, home: Home, key: SigningKey, p: Problem, verification=PASS) -> None:  # type: ignore[no-untyped-def]
    deposit.deposit(
        lm,
        home,
        text=_trace(p)[len(p.question()) :],
        prompt=p.question(),
        ref=RefName("fw", f"add-{p.a}-{p.b}"),
        key=key,
        verification=verification,
    )


def _text(lm: LoadedModel, tokens: list[int]) -> str:
    return lm.tokenizer.decode(tokens, skip_special_tokens=True)


def test_auto_grafts_the_verified_solution_and_answers_in_one_token(
    fw: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(fw, home, key, SOLVED)
    prompt = fw.encode(SOLVED.question(), first=True)
    result = ask(fw, home, prompt, mode="auto")
    assert result.used_mode == "knowledge" and not result.generation.fallback
    assert result.grafted_tokens == len(fw.encode(_trace(SOLVED), first=True))
    assert result.prefilled_tokens == 0
    # The verified trace ends with the answer: the model only closes it.
    assert result.decoded_tokens == 1
    assert result.generation.decoded.tokens == [fw.tokenizer.eos_token_id]
    completion = _text(fw, result.completion_tokens)
    assert check_answer(SOLVED, SOLVED.question() + completion)
    # Byte-exact: the same tokens computed from nothing give the same logits at every step.
    outcome = result.generation.outcome
    assert outcome is not None
    assert check_graft(fw, outcome.plan, result.generation.decoded).byte_exact
    data = result.to_dict(completion)
    assert data["artifact"]["verdict"] == "pass" and data["timings"]["total_seconds"] > 0


def test_unseen_question_falls_back_to_no_cache_with_the_same_output(
    fw: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(fw, home, key, SOLVED)
    prompt = fw.encode(UNSEEN.question(), first=True)
    result = ask(fw, home, prompt, mode="auto", max_new_tokens=120)
    plain = plain_generate(fw, prompt, 120, stop_at_eos=True)
    assert result.generation.fallback and result.used_mode == "off"
    assert result.grafted_tokens == 0 and result.prefilled_tokens == len(prompt)
    assert result.generation.decoded.tokens == plain.tokens
    assert [logits_digest(x) for x in result.generation.decoded.logits] == [
        logits_digest(x) for x in plain.logits
    ]
    # auto tried knowledge first and says why it did not use it
    assert [r["mode"] for r in result.refused] == ["knowledge"]


def test_unverified_artifact_is_not_a_knowledge_graft(fw: LoadedModel, home: Home, key: SigningKey) -> None:
    _deposit(fw, home, key, SOLVED, verification={"verifier": "t", "verdict": "fail", "evidence": {}})
    prompt = fw.encode(SOLVED.question(), first=True)
    result = ask(fw, home, prompt, mode="knowledge")
    assert result.generation.fallback
    assert result.plan.skipped and result.plan.skipped[0]["code"] == "ARTIFACT_UNVERIFIED"
    # auto then uses the shared prefix (pure acceleration, same output as no cache)
    auto = ask(fw, home, prompt, mode="auto", max_new_tokens=120)
    plain = plain_generate(fw, prompt, 120, stop_at_eos=True)
    assert auto.used_mode == "prefix" and auto.grafted_tokens > 0
    assert auto.generation.decoded.tokens == plain.tokens
    assert [logits_digest(x) for x in auto.generation.decoded.logits] == [
        logits_digest(x) for x in plain.logits
    ]


def test_off_never_grafts_and_bad_modes_are_usage_errors(
    fw: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(fw, home, key, SOLVED)
    prompt = fw.encode(SOLVED.question(), first=True)
    result = ask(fw, home, prompt, mode="off", max_new_tokens=120)
    assert result.generation.fallback and result.plan.reason == "routing is off (--mode off)"
    assert result.refused == []
    with pytest.raises(UsageError):
        ask(fw, home, prompt, mode="guess")
    with pytest.raises(UsageError):
        ask(fw, home, [], mode="auto")
    with pytest.raises(UsageError):
        ask(fw, home, prompt, max_new_tokens=0)
