"""The flywheel loop on the bundled model, in one home: the library lifts the repeat
questions, unseen questions fall back to plain generation with the baseline's exact
output, every graft is checked byte for byte, and an untrusted library is never used."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app.flywheel.loop import FlywheelSpec, run_flywheel, summarize
from kvreg.core.keys import SigningKey
from kvreg.core.trust import TrustPolicy
from kvreg.engine.flywheel.exam import easy_exam, hard_exam
from kvreg.engine.flywheel.model import model_path
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import LoadedModel, load_model
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.artifacts import open_artifact
from kvreg.store.home import Home

SPEC = FlywheelSpec(repeat_easy=2, repeat_hard=2, unseen_easy=1, unseen_hard=1, attempts=2)


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model(model_path(), EngineSettings(block_size=8))


def _home(path: Path, key: SigningKey | None) -> Home:
    home = Home(path).ensure()
    policy = TrustPolicy()
    if key is not None:
        policy.allow(SPEC.namespace, key.public_key)
    save_trust_policy(policy, home.trust_path)
    return home


def test_spec_slices_the_exam_into_disjoint_sets() -> None:
    repeat, unseen = SPEC.problems()
    assert repeat == easy_exam()[:2] + hard_exam()[:2]
    assert unseen == easy_exam()[2:3] + hard_exam()[2:3]
    assert not set(repeat) & set(unseen)


def test_the_library_answers_repeat_questions_and_leaves_unseen_ones_alone(
    lm: LoadedModel, tmp_path: Path
) -> None:
    key = SigningKey.generate()
    home = _home(tmp_path / "home", key)
    report = run_flywheel(lm, home, key, SPEC)
    m = report.metrics()
    data = report.to_dict()

    # One verified, signed artifact per repeat question, with its verification record.
    assert data["library"]["entries"] == 4
    for ref in data["library"]["refs"]:
        manifest = open_artifact(home, ref).manifest
        assert manifest.verification is not None and manifest.verification.verdict == "pass"
        assert manifest.annotations["source"] in ("model-greedy", "model-sample", "exact-solver")

    # Every repeat question is answered from its own artifact, in one decoded token (EOS).
    repeat_after = [a for a in report.after if a.repeat]
    assert all(a.mode == "knowledge" and a.correct and a.decoded_tokens == 1 for a in repeat_after)
    assert all(a.artifact == f"flywheel/add-{a.problem.a}-{a.problem.b}" for a in repeat_after)
    assert m["repeat_accuracy_after"] == 1.0
    assert m["accuracy_goal_met"] is True
    assert m["wrong_grafts"] == 0
    # Unseen questions: never a knowledge graft; the output is the baseline's, bit for bit.
    unseen_after = [a for a in report.after if not a.repeat]
    assert all(a.mode != "knowledge" for a in unseen_after)
    assert m["unseen_accuracy_after"] == m["unseen_accuracy_before"]
    assert m["byte_exact_checks"] == len(report.after) == m["byte_exact_passed"]
    # The measurements are there and consistent.
    assert m["repeat_decoded_tokens_before"] > m["repeat_decoded_tokens_after"] == 1.0
    assert m["grafted_tokens"] == sum(a.grafted_tokens for a in report.after) > 0
    assert m["graft_seconds"] > 0 and m["fresh_prefill_seconds"] > 0
    assert summarize(report.baseline)["questions"] == 6
    assert data["answers"]["after"][0]["question"].startswith("Q:")


def test_an_untrusted_library_is_never_grafted(lm: LoadedModel, tmp_path: Path) -> None:
    key = SigningKey.generate()
    home = _home(tmp_path / "home", None)  # the store trusts nobody for the namespace
    report = run_flywheel(lm, home, key, SPEC)
    m = report.metrics()
    assert m["knowledge_grafts"] == 0 and m["wrong_grafts"] == 0
    assert [a.mode for a in report.after] == ["off"] * len(report.after)
    # With no graft, the second exam is the first one, bit for bit.
    assert m["accuracy_after"] == m["accuracy_before"]
    assert m["byte_exact_passed"] == m["byte_exact_checks"] == len(report.after)
    assert m["accuracy_goal_met"] is (m["repeat_missed_by_baseline"] == 0)
