"""Deposit, graft, probe and check in one process (the cross-process matrix is in tests/cli)."""

from __future__ import annotations

import pytest

from kvreg.core.envelope import sign_envelope
from kvreg.core.errors import DigestMismatchError, WitnessMismatchError
from kvreg.core.keys import SigningKey
from kvreg.core.manifest_prefix import prefix_consistency_proof, verify_prefix
from kvreg.core.names import RefName
from kvreg.engine import check, deposit, graft
from kvreg.engine.chunks import serialize_chunk
from kvreg.engine.runtime import LoadedModel
from kvreg.store.artifacts import open_artifact, read_tokens, store_artifact
from kvreg.store.home import Home

from .conftest import TEXT

REF = RefName("aime25", "p07")


def _deposit(lm: LoadedModel, home: Home, key: SigningKey, text: str = TEXT, ref: RefName = REF):
    return deposit.deposit(
        lm,
        home,
        text=text,
        ref=ref,
        key=key,
        verification={"verifier": "checker", "verdict": "pass", "evidence": {"answer": "738"}},
    )


@pytest.mark.parametrize("model", ["llama", "gemma3"])
@pytest.mark.parametrize("probe", [True, False])
def test_whole_graft_is_byte_exact(model: str, probe: bool, home: Home, key: SigningKey, request) -> None:  # type: ignore[no-untyped-def]
    lm: LoadedModel = request.getfixturevalue(model)
    _deposit(lm, home, key)
    artifact = open_artifact(home, str(REF))
    tokens = read_tokens(home, artifact.manifest)
    outcome = graft.graft(lm, home, artifact.manifest, tokens, probe=probe)
    assert outcome.plan.whole and outcome.plan.prefill_tokens == 0
    if probe:
        assert outcome.probe == {**outcome.probe, "kv_equal": True, "witness_equal": True}
    decoded = graft.continue_decoding(lm, outcome, 32)
    result = check.check_graft(lm, outcome.plan, decoded)
    assert result.to_dict()["byte_exact"] is True
    assert (result.steps, result.sha256_equal_steps, result.max_kl, result.argmax_equal_steps) == (
        32,
        32,
        0.0,
        32,
    )


def test_prefix_graft_then_new_suffix_is_byte_exact(llama: LoadedModel, home: Home, key: SigningKey) -> None:
    _deposit(llama, home, key)
    artifact = open_artifact(home, str(REF))
    tokens = read_tokens(home, artifact.manifest)
    prompt = tokens + llama.encode(" A new question follows the solution.", first=False)
    outcome = graft.graft(llama, home, artifact.manifest, tokens, prompt, blocks=2)
    assert outcome.plan.graft_tokens == 32 and outcome.plan.prefill_tokens == len(prompt) - 32
    decoded = graft.continue_decoding(llama, outcome, 32)
    assert check.check_graft(llama, outcome.plan, decoded).byte_exact


def test_a_block_graft_that_ends_the_prompt_without_the_probe_is_byte_exact(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    """The witness is for the artifact's end; for a prompt that ends on a grafted block
    boundary inside the artifact, the next-token logits come from recomputing that block."""
    _deposit(llama, home, key)
    artifact = open_artifact(home, str(REF))
    tokens = read_tokens(home, artifact.manifest)
    assert len(tokens) > 32
    outcome = graft.graft(llama, home, artifact.manifest, tokens, tokens[:32], blocks=2, probe=False)
    assert outcome.plan.graft_tokens == 32 and outcome.plan.prefill_tokens == 0 and not outcome.plan.whole
    decoded = graft.continue_decoding(llama, outcome, 16)
    assert check.check_graft(llama, outcome.plan, decoded).byte_exact


def test_graft_at_the_artifact_end_off_grid_then_suffix(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    result = _deposit(llama, home, key)
    assert result.manifest.token_count % 16 != 0  # the end is off the grid
    artifact = open_artifact(home, str(REF))
    tokens = read_tokens(home, artifact.manifest)
    prompt = tokens + llama.encode(" Next:", first=False)
    outcome = graft.graft(llama, home, artifact.manifest, tokens, prompt, probe=False)
    assert outcome.plan.whole and outcome.plan.split_at == len(tokens)
    decoded = graft.continue_decoding(llama, outcome, 16)
    assert check.check_graft(llama, outcome.plan, decoded).byte_exact


def test_same_text_same_chunks_and_prefix_artifacts_share_blocks(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    first = _deposit(llama, home, key)
    again = _deposit(llama, home, key, ref=RefName("aime25", "p07-again"))
    assert [c.digest for c in first.manifest.chunks] == [c.digest for c in again.manifest.chunks]
    assert again.new_chunks == 0
    longer_text = TEXT + " Checked twice, by two independent verifiers, who both agreed on the result."
    longer = _deposit(llama, home, key, text=longer_text, ref=RefName("aime25", "p07-long"))
    full = first.manifest.token_count // 16
    shared = [c.digest for c in first.manifest.chunks[:full]]
    assert [c.digest for c in longer.manifest.chunks[:full]] == shared
    assert longer.new_chunks == len(longer.manifest.chunks) - full
    new_chunk_bytes = sum(c.size for c in longer.manifest.chunks[full:])
    assert longer.write.bytes_new < new_chunk_bytes + 8192  # new blocks + small objects only
    verify_prefix(first.manifest, longer.manifest, prefix_consistency_proof(first.manifest, longer.manifest))


def test_recompute_matches_every_chunk_and_the_witness(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(llama, home, key)
    artifact = open_artifact(home, str(REF))
    report = check.recompute_artifact(llama, artifact.manifest, read_tokens(home, artifact.manifest))
    assert report.byte_exact and report.chunks_equal == report.chunks == len(artifact.manifest.chunks)


def test_the_probe_catches_a_depositor_with_other_numerics(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    """A correctly signed artifact whose last block has other bits (as another host would compute)."""
    tokens, _ = deposit.tokenize(llama, TEXT, None)
    computed = deposit.compute_artifact(llama, tokens)
    last = computed.chunks[-1]
    data = computed.chunk_bytes.pop(last["digest"])
    from kvreg.engine.chunks import parse_chunk

    layout = deposit.chunk_layout(llama, last["start"], last["end"])
    keys, values = parse_chunk(bytearray(data), layout)
    keys = [k.clone() for k in keys]
    keys[0][:, -1, :] += 0.01  # small, as another host's rounding would be, but visible downstream
    new = serialize_chunk(layout, keys, [v.clone() for v in values])
    from kvreg.core.digest import Digest

    computed.chunk_bytes[Digest.of_bytes(new)] = new
    last.update(digest=str(Digest.of_bytes(new)), size=len(new))
    manifest, objects = deposit.build_manifest(
        llama, computed, text=TEXT, prompt=None, verification=None, annotations={}
    )
    store_artifact(home, objects, manifest, sign_envelope(manifest.raw_bytes, key), REF)
    artifact = open_artifact(home, str(REF))
    with pytest.raises(WitnessMismatchError, match="KV differs"):
        graft.graft(llama, home, artifact.manifest, tokens, probe=True)
    outcome = graft.graft(llama, home, artifact.manifest, tokens, probe=False)
    decoded = graft.continue_decoding(llama, outcome, 4)
    assert not check.check_graft(llama, outcome.plan, decoded).byte_exact


def test_a_flipped_bit_is_caught_unless_the_store_is_trusted(
    llama: LoadedModel, home: Home, key: SigningKey
) -> None:
    _deposit(llama, home, key)
    artifact = open_artifact(home, str(REF))
    tokens = read_tokens(home, artifact.manifest)
    path = home.objects.path(artifact.manifest.chunks[0].digest)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(DigestMismatchError, match="chunk 0"):
        graft.graft(llama, home, artifact.manifest, tokens)


def test_grafted_layers_hold_exactly_the_chunk_bytes(llama: LoadedModel, home: Home, key: SigningKey) -> None:
    """The deferred concatenation gives the bytes a plain cache would hold, on read and on update."""
    import torch

    from kvreg.engine.runtime import DeferredConcatLayer, cache_from_blocks

    _deposit(llama, home, key)
    artifact = open_artifact(home, str(REF))
    chunks = graft.read_chunks(home, artifact.manifest, len(artifact.manifest.chunks))
    length = artifact.manifest.token_count
    cache = cache_from_blocks(llama, chunks.keys, chunks.values, length)
    layer = cache.layers[0]
    assert isinstance(layer, DeferredConcatLayer) and layer.get_seq_length() == length
    expected = torch.cat([block[0] for block in chunks.keys], dim=1).unsqueeze(0)
    assert torch.equal(layer.keys.view(torch.uint8), expected.view(torch.uint8))
    other = cache_from_blocks(llama, chunks.keys, chunks.values, length).layers[0]
    new = torch.ones(1, expected.shape[1], 1, expected.shape[3])
    updated, _ = other.update(new, new)
    assert torch.equal(updated, torch.cat([expected, new], dim=2)) and other.get_seq_length() == length + 1
