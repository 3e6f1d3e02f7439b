"""The router: the route index, prefix mode (byte-exact against no cache), knowledge mode
(verified and trusted artifacts only), and misrouting refused with a fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app.demo.texts import QUESTION, SOLUTION
from kvreg.app.router import generate, route
from kvreg.core.blockkey import block_keys
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.engine import deposit
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.router import plain_generate
from kvreg.engine.runtime import LoadedModel, load_model, logits_digest
from kvreg.engine.tiny import build_model_dir
from kvreg.store.artifacts import read_tokens
from kvreg.store.home import Home
from kvreg.store.router_index import RouteIndex, index_path

from .conftest import TEXT

PASS = {"verifier": "checker", "verdict": "pass", "evidence": {"answer": "738"}}
FAIL = {"verifier": "checker", "verdict": "fail", "evidence": {"answer": "737"}}
OTHER = (
    "A compliance ruling: the transfer is permitted because the counterparty is registered and the "
    "amount is below the reporting threshold of 10,000 units. Reviewed and approved."
)


def _deposit(lm, home, key, ref, text=TEXT, prompt=None, verification=PASS):  # type: ignore[no-untyped-def]
    return deposit.deposit(
        lm, home, text=text, ref=RefName.parse(ref), key=key, prompt=prompt, verification=verification
    ).manifest


def _assert_same_run(routed, reference) -> None:  # type: ignore[no-untyped-def]
    """Token for token, and every step's logits SHA-256-equal (byte-exact)."""
    assert routed.tokens == reference.tokens
    assert [logits_digest(x) for x in routed.logits] == [logits_digest(x) for x in reference.logits]


# --- the index ---------------------------------------------------------------------------


def test_index_follows_the_store(llama: LoadedModel, home: Home, key: SigningKey) -> None:
    manifest = _deposit(llama, home, key, "aime25/p07")
    assert index_path(home).is_file()  # the deposit indexed it as it was stored
    keys = [c.block_key for c in manifest.chunks]
    with RouteIndex(home) as index:
        hits = index.lookup(keys)
        assert [(h.digest, h.index) for h in hits] == [(manifest.digest, i) for i in range(len(keys))]
        assert index.manifest(manifest.digest).verdict == "pass"  # type: ignore[union-attr]
    # The prompt's keys, computed locally, are the manifest's: no tokens needed in the index.
    tokens = read_tokens(home, manifest)
    ours = block_keys(llama.model_fp, llama.tokenizer_fp, llama.config.fingerprint, tokens, 16)
    assert ours == keys
    # Deleted (it is a cache) or damaged: the next sync or rebuild restores it.
    index_path(home).unlink()
    with RouteIndex(home) as index:
        assert index.sync().to_dict() == {
            "added": 1,
            "removed": 0,
            "skipped": 0,
            "manifests": 1,
            "blocks": len(keys),
        }
        assert index.rebuild().manifests == 1
    index_path(home).write_bytes(b"not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(str(index_path(home)) + suffix).unlink(missing_ok=True)
    with RouteIndex(home) as index:
        assert index.sync().added == 1
        # An artifact gone from the store is dropped.
        home.envelopes.remove(manifest.digest)
        assert index.sync().removed == 1
        assert index.lookup(keys) == []


# --- prefix mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama", "gemma3"])
def test_prefix_route_equals_no_cache_byte_exact(model: str, home: Home, key: SigningKey, request) -> None:  # type: ignore[no-untyped-def]
    lm: LoadedModel = request.getfixturevalue(model)
    manifest = _deposit(lm, home, key, "aime25/p07")
    tokens = read_tokens(home, manifest)
    # Shares 40 tokens with the artifact, then goes elsewhere: 2 full blocks of 16 graftable.
    prompt = tokens[:40] + lm.encode(" Now the same question for a + b = 2000: Step 1:", first=False)
    plan = route(home, lm, prompt, "prefix")
    assert not plan.fallback and plan.artifact is not None
    assert plan.artifact.digest == manifest.digest and str(plan.artifact.ref) == "aime25/p07"
    assert (plan.blocks, plan.graft_tokens, plan.prefill_tokens) == (2, 32, len(prompt) - 32)
    for probe in (True, False):
        routed = generate(lm, home, prompt, mode="prefix", max_new_tokens=24, probe=probe)
        assert not routed.fallback and routed.outcome is not None
        assert routed.outcome.plan.graft_tokens == 32 and routed.outcome.plan.split_at is None
        _assert_same_run(routed.decoded, plain_generate(lm, prompt, 24))


def test_prefix_route_stays_on_the_grid(llama: LoadedModel, home: Home, key: SigningKey) -> None:
    manifest = _deposit(llama, home, key, "aime25/p07")
    tokens = read_tokens(home, manifest)
    assert len(tokens) % 16  # the artifact's end is off the grid
    # The whole artifact and more: graft its full blocks only, never split at its end.
    longer = tokens + llama.encode(" Next:", first=False)
    plan = route(home, llama, longer)
    assert (plan.blocks, plan.graft_tokens, plan.whole) == (len(tokens) // 16, len(tokens) // 16 * 16, False)
    _assert_same_run(
        generate(llama, home, longer, max_new_tokens=16).decoded, plain_generate(llama, longer, 16)
    )
    # Exactly the artifact: grafted whole, nothing to prefill.
    plan = route(home, llama, tokens)
    assert plan.whole and plan.prefill_tokens == 0
    _assert_same_run(
        generate(llama, home, tokens, max_new_tokens=16).decoded, plain_generate(llama, tokens, 16)
    )
    # A prompt ending on a block boundary inside the artifact keeps its last block to prefill.
    plan = route(home, llama, tokens[:48])
    assert (plan.blocks, plan.prefill_tokens) == (2, 16)
    _assert_same_run(
        generate(llama, home, tokens[:48], max_new_tokens=8).decoded, plain_generate(llama, tokens[:48], 8)
    )


def test_prefix_route_picks_the_longest_prefix(llama: LoadedModel, home: Home, key: SigningKey) -> None:
    short = _deposit(llama, home, key, "aime25/q", text=QUESTION)
    full = _deposit(llama, home, key, "aime25/p07")
    prompt = read_tokens(home, full)[:70] + llama.encode(" and then?", first=False)
    plan = route(home, llama, prompt)
    assert plan.artifact is not None and plan.artifact.digest == full.digest and plan.blocks == 4
    assert short.digest != full.digest
    # Nothing shared: no graft, and the reason says so.
    none = route(home, llama, llama.encode(OTHER, first=True))
    assert none.fallback and none.reason == "no stored block matches the prompt" and none.skipped == []


# --- knowledge mode --------------------------------------------------------------------------


def test_knowledge_route_grafts_only_verified_trusted_artifacts(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    stranger = SigningKey.generate()  # signs, but nobody trusts it
    wrong = _deposit(llama, home, key, "kb/failed", SOLUTION + " Or 737?", QUESTION, FAIL)
    forged = _deposit(llama, home, stranger, "kb/untrusted", SOLUTION + " Trust me.", QUESTION, PASS)
    unverified = _deposit(llama, home, key, "kb/unverified", SOLUTION + " (unchecked)", QUESTION, None)
    question = llama.encode(QUESTION, first=True)
    plan = route(home, llama, question, "knowledge")
    assert plan.fallback and plan.artifact is None
    skipped = {s["manifest_digest"]: s["code"] for s in plan.skipped}
    assert skipped[str(wrong.digest)] == "ARTIFACT_UNVERIFIED"
    assert skipped[str(unverified.digest)] == "ARTIFACT_UNVERIFIED"
    assert skipped[str(forged.digest)] in ("KEY_UNTRUSTED", "SIGNATURE_INVALID")
    routed = generate(llama, home, question, mode="knowledge", max_new_tokens=8)
    assert routed.fallback and routed.outcome is None
    _assert_same_run(routed.decoded, plain_generate(llama, question, 8))

    good = _deposit(llama, home, key, "kb/p07", SOLUTION, QUESTION, PASS)
    plan = route(home, llama, question, "knowledge")
    assert plan.artifact is not None and plan.artifact.digest == good.digest
    assert plan.whole and plan.graft_tokens == good.token_count and plan.prefill_tokens == 0
    routed = generate(llama, home, question, mode="knowledge", max_new_tokens=12)
    assert not routed.fallback and routed.outcome is not None and routed.outcome.plan.whole
    artifact_tokens = read_tokens(home, good)
    assert routed.tokens == artifact_tokens[: len(artifact_tokens)]
    # The model continues from the verified solution exactly as if it had read it.
    _assert_same_run(routed.decoded, plain_generate(llama, artifact_tokens, 12))

    # The signer trusted for "kb" only: still grafted; trusted for another namespace only: skipped.
    policy = TrustPolicy()
    policy.allow("kb", key.public_key)
    assert route(home, llama, question, "knowledge", trust=policy).artifact is not None
    policy = TrustPolicy()
    policy.allow("other", key.public_key)
    assert route(home, llama, question, "knowledge", trust=policy).fallback


def test_knowledge_route_compares_the_partial_last_block(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(llama, home, key, "kb/p07", SOLUTION, QUESTION, PASS)
    question = llama.encode(QUESTION, first=True)
    assert len(question) % 16  # the question ends inside a block
    # Same full blocks, another last token: the key lookup finds the artifact, the tokens refuse it.
    other = [*question[:-1], question[-1] + 1]
    plan = route(home, llama, other, "knowledge")
    assert plan.fallback and [s["code"] for s in plan.skipped] == ["ROUTE_MISMATCH"]
    # Longer than the artifact's prompt but still inside its tokens: fine (the tokens begin with it).
    found = route(home, llama, question, "knowledge").artifact
    assert found is not None
    tokens = read_tokens(home, found.manifest)
    assert not route(home, llama, tokens[: len(question) + 5], "knowledge").fallback


# --- misrouting: refused, then plain generation --------------------------------------------


def test_forced_wrong_artifact_is_refused_and_falls_back(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(llama, home, key, "kb/p07", SOLUTION, QUESTION, PASS)
    _deposit(llama, home, key, "kb/other", OTHER, None, PASS)
    question = llama.encode(QUESTION, first=True)
    for mode in ("prefix", "knowledge"):
        plan = route(home, llama, question, mode, artifact="kb/other")
        assert plan.fallback and plan.error is not None and plan.error["code"] == "ROUTE_MISMATCH"
        assert "misrouted" in plan.reason or "no graftable block" in plan.reason  # type: ignore[operator]
        routed = generate(llama, home, question, mode=mode, artifact="kb/other", max_new_tokens=8)
        assert routed.fallback and routed.to_dict()["fallback"] is True
        _assert_same_run(routed.decoded, plain_generate(llama, question, 8))
    # A question that differs only at its end: knowledge mode refuses the forced artifact.
    variant = llama.encode(QUESTION.replace("1000", "2000"), first=True)
    plan = route(home, llama, variant, "knowledge", artifact="kb/p07")
    assert plan.error is not None and plan.error["code"] == "ROUTE_MISMATCH"
    assert plan.error["details"]["first_difference"] < len(variant)
    # The right one, forced: accepted.
    assert not route(home, llama, question, "knowledge", artifact="kb/p07").fallback


@pytest.fixture(scope="module")
def other_seed(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    d = build_model_dir(tmp_path_factory.mktemp("seed1") / "llama", "llama", seed=1)
    return load_model(d, EngineSettings(block_size=16))


@pytest.fixture(scope="module")
def bf16(llama_dir: Path) -> LoadedModel:
    return load_model(llama_dir, EngineSettings(block_size=16, dtype="bfloat16"))


@pytest.mark.parametrize("foreign", ["other_seed", "bf16"])
def test_artifact_of_another_model_or_config_is_refused(
    foreign: str, llama: LoadedModel, home: Home, key: SigningKey, request
) -> None:  # type: ignore[no-untyped-def]
    other: LoadedModel = request.getfixturevalue(foreign)
    assert (other.model_fp, other.config.fingerprint) != (llama.model_fp, llama.config.fingerprint)
    _deposit(other, home, key, "kb/foreign", SOLUTION, QUESTION, PASS)
    question = llama.encode(QUESTION, first=True)
    assert other.encode(QUESTION, first=True) == question  # same tokenizer, same tokens
    for mode in ("prefix", "knowledge"):
        # Its block keys chain other fingerprints: the lookup never finds it.
        plan = route(home, llama, question, mode)
        assert plan.fallback and plan.skipped == []
        # Forced: refused by fingerprint, naming what differs, and generation falls back.
        plan = route(home, llama, question, mode, artifact="kb/foreign")
        assert plan.error is not None and plan.error["code"] == "FINGERPRINT_MISMATCH"
        assert ("model" if foreign == "other_seed" else "config") in plan.reason  # type: ignore[operator]
        routed = generate(llama, home, question, mode=mode, artifact="kb/foreign", max_new_tokens=8)
        assert routed.fallback
        _assert_same_run(routed.decoded, plain_generate(llama, question, 8))


def test_index_is_safe_under_concurrent_writers(llama: LoadedModel, home: Home, key: SigningKey) -> None:
    from concurrent.futures import ThreadPoolExecutor

    manifest = _deposit(llama, home, key, "aime25/p07")
    index_path(home).unlink()

    def sync_and_add(_: int) -> int:
        with RouteIndex(home) as index:  # one connection each, as separate processes have
            index.sync()
            index.add(manifest)
            return len(index.lookup([manifest.chunks[-1].block_key]))

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert list(pool.map(sync_and_add, range(12))) == [1] * 12
    with RouteIndex(home) as index:
        assert [m.digest for m in index.all()] == [manifest.digest]
