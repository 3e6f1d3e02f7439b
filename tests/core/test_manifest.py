"""Manifest v1: strict validation, exact bytes, unknown fields, prefix proofs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import ManifestInvalidError, MerkleProofError
from kvreg.core.manifest import Manifest
from kvreg.core.manifest_prefix import prefix_consistency_proof, verify_prefix
from kvreg.core.manifest_schema import MAX_MANIFEST_BYTES, ChunkEntry
from kvreg.core.merkle import chunk_merkle_root

from .manifest_helpers import CONFIG_FP, MODEL_FP, TOKENIZER_FP, d, make_doc

GOLDEN_SMALL = b"".join(
    [
        b'{"annotations":{"answer":"a","question":"q","tags":["x"],"title":"t"},',
        b'"chunks":[{"block_key":"sha256:4e9483f88a9c4f09caa1ce5607bf2c439d01150b9539c72c3e5592f2d797b781",',
        b'"digest":"sha256:23f0db1c88ac8544cbba8de6f02fe48523f37ea99d9ae63bf902ffcca4ebf2b3",',
        b'"end":3,"index":0,"size":1000,"start":0}],',
        b'"config":{"fields":{"attn":"eager","threads":1},',
        b'"fingerprint":"sha256:b79606fb3afea5bd1609ed40b622142f1c98125abcfe89a76a661b0e8e343910",',
        b'"profile":"native"},',
        b'"created":"2025-01-31T12:00:00Z","kvreg_version":"0.1.0",',
        b'"merkle_root":"sha256:0379ff0bc7a7f757cfb7af3419e4e42217684bf8963b1362a109b2de6e3d229d",',
        b'"model":{"architecture":"LlamaForCausalLM","dtype":"float32",',
        b'"fingerprint":"sha256:9372c470eeadd5ecd9c3c74c2b3cb633f8e2f2fad799250a0f70d652b6b825e4",',
        b'"head_dim":8,"kv_heads":2,"layer_types":["full_attention","full_attention"],',
        b'"model_type":"llama","name":"tiny-llama","num_layers":2,"sliding_window":null},',
        b'"schedule":{"block_size":4,"grid":"absolute"},"schema":"kvreg.manifest/v1",',
        b'"text":{"digest":"sha256:982d9e3eb996f559e633f4d194def3761d909f5a3b647d1a851fead67c32c9d1","size":42},',
        b'"tokenizer":{"fingerprint":"sha256:5f97e3774c51edd1d63706c2ec3826c564a067794770cdab0f8c4797971cacf9",',
        b'"name":"tiny-tok"},',
        b'"tokens":{"count":3,"digest":"sha256:c51e455b41df6c017327e16001dd064b8b6733faeaa69b23d9bd79c8079237d5"},',
        b'"verification":{"evidence":{"expected":"8788"},"verdict":"pass","verifier":"exact-match"},',
        b'"witness":{"dtype":"float32",',
        b'"logits_digest":"sha256:224834529abbd9d67917ab67be9712dfdf0a290169ca580d9cae5d904d75abef","shape":[32]}}',
    ]
)


def test_golden_canonical_bytes() -> None:
    m = Manifest.from_dict(make_doc(3, 4))
    assert m.to_bytes() == GOLDEN_SMALL
    assert m.raw_bytes == GOLDEN_SMALL
    assert m.digest == Digest.of_bytes(GOLDEN_SMALL)
    assert m.digest == "sha256:09a61fb557bed8ff7514b6c4a45e49b5bd0734dcfb39dbc7477436871fc696ed"
    assert Manifest.from_bytes(GOLDEN_SMALL) == m


def test_accessors() -> None:
    doc = make_doc(10, 4)
    doc["prompt"] = {"digest": d("prompt"), "size": 7, "token_count": 3}
    m = Manifest.from_dict(doc)
    assert m.schema == "kvreg.manifest/v1"
    assert m.model.fingerprint == MODEL_FP and m.model.num_layers == 2 and m.model.sliding_window is None
    assert m.model.layer_types == ("full_attention", "full_attention")
    assert m.tokenizer.fingerprint == TOKENIZER_FP and m.tokenizer.name == "tiny-tok"
    assert m.config.fingerprint == CONFIG_FP and m.config.profile == "native"
    assert m.config.fields == {"threads": 1, "attn": "eager"}
    assert m.block_size == 4 and m.schedule.grid == "absolute"
    assert m.token_count == 10 and m.tokens.digest == d("tokens")
    assert m.text.size == 42
    assert m.prompt is not None and m.prompt.token_count == 3
    assert m.chunks == [
        ChunkEntry(0, 0, 4, d("chunk0"), 1000, doc["chunks"][0]["block_key"]),
        ChunkEntry(1, 4, 8, d("chunk1"), 1001, doc["chunks"][1]["block_key"]),
        ChunkEntry(2, 8, 10, d("chunk2"), 1002, doc["chunks"][2]["block_key"]),
    ]
    assert m.chunks[2].n_tokens == 2
    assert m.merkle_root == chunk_merkle_root([d(f"chunk{i}") for i in range(3)])
    assert m.witness.shape == (32,) and m.witness.logits_digest == d("logits")
    assert m.verification is not None and m.verification.verdict == "pass"
    assert m.verification.evidence == {"expected": "8788"}
    assert m.annotations["tags"] == ["x"]
    assert m.created == "2025-01-31T12:00:00Z" and m.kvreg_version == "0.1.0"
    assert m.object_digests() == [
        d("chunk0"),
        d("chunk1"),
        d("chunk2"),
        d("tokens"),
        d("text"),
        d("logits"),
        d("prompt"),
    ]
    # accessors hand out copies
    m.config.fields["threads"] = 99
    m.annotations["title"] = "changed"
    m.to_dict()["model"]["name"] = "changed"
    assert m.config.fields["threads"] == 1 and m.annotations["title"] == "t" and m.model.name == "tiny-llama"


def test_a_chat_prompt_names_its_template_and_messages() -> None:
    doc = make_doc(10, 4)
    doc["prompt"] = {**PROMPT, "chat": {**CHAT, "generation_prompt": False}}
    m = Manifest.from_dict(doc)
    assert m.prompt is not None and m.prompt.chat is not None
    assert (m.prompt.chat.template, m.prompt.chat.messages) == (d("template"), d("messages"))
    assert m.prompt.chat.generation_prompt is False
    assert m.object_digests()[-2:] == [d("p"), d("messages")]  # the messages travel with the artifact
    doc["prompt"] = dict(PROMPT)  # a prompt without the field: plain text, as before
    assert Manifest.from_dict(doc).prompt.chat is None  # type: ignore[union-attr]


def test_object_digests_deduplicate() -> None:
    same = d("same")
    doc = make_doc(8, 4, chunk_digests=[same, same])
    doc["text"]["digest"] = same
    doc["prompt"] = {"digest": d("tokens"), "size": 1, "token_count": 1}
    assert Manifest.from_dict(doc).object_digests() == [same, d("tokens"), d("logits")]


def test_unknown_fields_survive_round_trips() -> None:
    doc = make_doc(10, 4)
    doc["future_top"] = {"nested": [1, {"deep": True}]}
    doc["model"]["rope_scaling"] = {"type": "linear", "factor": 2.0}
    doc["chunks"][1]["future_chunk_field"] = "kept"
    doc["witness"]["steps"] = 3
    doc["verification"]["signed_by"] = "checker"
    doc["annotations"]["source"] = {"url": "https://example.org"}
    data = json.dumps(doc, indent=2, sort_keys=False).encode()
    m1 = Manifest.from_bytes(data)
    d1 = m1.to_dict()
    assert d1 == json.loads(data)
    m2 = Manifest.from_dict(d1)
    assert m2.to_dict() == d1
    assert m2.to_bytes() == m1.to_bytes()
    m3 = Manifest.from_bytes(m2.to_bytes())
    assert m3.to_dict()["chunks"][1]["future_chunk_field"] == "kept"
    assert m3.to_dict()["future_top"] == {"nested": [1, {"deep": True}]}
    assert m3.raw_bytes == m2.raw_bytes == m2.to_bytes()


def test_from_bytes_keeps_exact_bytes() -> None:
    doc = make_doc(10, 4)
    data = json.dumps(doc, indent=1).encode()
    m = Manifest.from_bytes(data)
    assert m.raw_bytes == data
    assert m.digest == Digest.of_bytes(data)
    assert m.to_bytes() != data  # canonical form differs, and is not what the digest is of
    assert Manifest.from_dict(m.to_dict()).digest != m.digest
    assert m != Manifest.from_dict(m.to_dict())


def test_from_dict_normalizes_and_rejects_non_json() -> None:
    doc = make_doc(10, 4)
    doc["model"]["layer_types"] = ("full_attention", "full_attention")
    assert Manifest.from_dict(doc).to_dict()["model"]["layer_types"] == ["full_attention", "full_attention"]
    doc["annotations"]["bad"] = float("nan")
    with pytest.raises(ManifestInvalidError):
        Manifest.from_dict(doc)
    with pytest.raises(ManifestInvalidError):
        Manifest.from_dict([1])  # type: ignore[arg-type]


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        node: Any = doc
        parts = path.replace("]", "").replace("[", ".").split(".")
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return apply


def _del(path: str) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        node: Any = doc
        parts = path.replace("]", "").replace("[", ".").split(".")
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        del node[parts[-1]]

    return apply


PROMPT = {"digest": d("p"), "size": 1, "token_count": 1}
CHAT = {"template": d("template"), "messages": d("messages"), "generation_prompt": True}

INVALID: list[tuple[str, Mutation, str]] = [
    ("schema-other", _set("schema", "kvreg.manifest/v2"), "schema"),
    ("schema-missing", _del("schema"), "schema"),
    ("model-missing", _del("model"), "model"),
    ("model-not-object", _set("model", []), "model"),
    ("model-fp-bad", _set("model.fingerprint", "sha256:ABC"), "model.fingerprint"),
    ("model-fp-upper", _set("model.fingerprint", MODEL_FP.upper()), "model.fingerprint"),
    ("model-name-int", _set("model.name", 3), "model.name"),
    ("model-arch-missing", _del("model.architecture"), "model.architecture"),
    ("model-type-null", _set("model.model_type", None), "model.model_type"),
    ("layers-zero", _set("model.num_layers", 0), "model.num_layers"),
    ("layers-bool", _set("model.num_layers", True), "model.num_layers"),
    ("layers-string", _set("model.num_layers", "2"), "model.num_layers"),
    ("kv-heads-bool", _set("model.kv_heads", True), "model.kv_heads"),
    ("kv-heads-neg", _set("model.kv_heads", -1), "model.kv_heads"),
    ("head-dim-zero", _set("model.head_dim", 0), "model.head_dim"),
    ("dtype-other", _set("model.dtype", "float64"), "model.dtype"),
    ("layer-types-short", _set("model.layer_types", ["full_attention"]), "model.layer_types"),
    ("layer-types-not-str", _set("model.layer_types", ["full_attention", 1]), "model.layer_types[1]"),
    ("layer-types-str", _set("model.layer_types", "full_attention"), "model.layer_types"),
    ("sliding-missing", _del("model.sliding_window"), "model.sliding_window"),
    ("sliding-zero", _set("model.sliding_window", 0), "model.sliding_window"),
    ("sliding-bool", _set("model.sliding_window", True), "model.sliding_window"),
    ("tokenizer-fp", _set("tokenizer.fingerprint", None), "tokenizer.fingerprint"),
    ("tokenizer-name", _del("tokenizer.name"), "tokenizer.name"),
    ("config-profile", _set("config.profile", "fast"), "config.profile"),
    ("config-fields", _set("config.fields", []), "config.fields"),
    ("config-fp", _set("config.fingerprint", "md5:00"), "config.fingerprint"),
    ("block-size-zero", _set("schedule.block_size", 0), "schedule.block_size"),
    ("block-size-bool", _set("schedule.block_size", True), "schedule.block_size"),
    ("grid-relative", _set("schedule.grid", "relative"), "schedule.grid"),
    ("count-zero", _set("tokens.count", 0), "tokens.count"),
    ("count-bool", _set("tokens.count", True), "tokens.count"),
    ("count-mismatch", _set("tokens.count", 11), "chunks[2].end"),
    ("count-more-chunks", _set("tokens.count", 13), "chunks"),
    ("count-fewer-chunks", _set("tokens.count", 8), "chunks"),
    ("tokens-digest", _set("tokens.digest", "x"), "tokens.digest"),
    ("text-size-neg", _set("text.size", -1), "text.size"),
    ("text-size-bool", _set("text.size", False), "text.size"),
    ("text-digest", _del("text.digest"), "text.digest"),
    ("prompt-not-object", _set("prompt", None), "prompt"),
    (
        "prompt-too-long",
        _set("prompt", {"digest": d("p"), "size": 1, "token_count": 11}),
        "prompt.token_count",
    ),
    ("prompt-zero", _set("prompt", {"digest": d("p"), "size": 1, "token_count": 0}), "prompt.token_count"),
    ("prompt-size", _set("prompt", {"digest": d("p"), "size": -1, "token_count": 1}), "prompt.size"),
    ("chat-not-object", _set("prompt", {**PROMPT, "chat": True}), "prompt.chat"),
    (
        "chat-template",
        _set("prompt", {**PROMPT, "chat": {**CHAT, "template": "sha256:1"}}),
        "prompt.chat.template",
    ),
    ("chat-messages", _set("prompt", {**PROMPT, "chat": {**CHAT, "messages": None}}), "prompt.chat.messages"),
    (
        "chat-generation-prompt",
        _set("prompt", {**PROMPT, "chat": {**CHAT, "generation_prompt": 1}}),
        "prompt.chat.generation_prompt",
    ),
    (
        "chat-generation-missing",
        _set("prompt", {**PROMPT, "chat": {"template": d("t"), "messages": d("m")}}),
        "prompt.chat.generation_prompt",
    ),
    ("chunks-empty", _set("chunks", []), "chunks"),
    ("chunks-object", _set("chunks", {}), "chunks"),
    ("chunk-not-object", _set("chunks[0]", "x"), "chunks[0]"),
    ("chunk-index", _set("chunks[1].index", 2), "chunks[1].index"),
    ("chunk-index-bool", _set("chunks[0].index", False), "chunks[0].index"),
    ("chunk-index-bool-one", _set("chunks[1].index", True), "chunks[1].index"),
    ("chunk-start", _set("chunks[1].start", 3), "chunks[1].start"),
    ("chunk-end", _set("chunks[1].end", 7), "chunks[1].end"),
    ("chunk-last-end", _set("chunks[2].end", 12), "chunks[2].end"),
    ("chunk-size-zero", _set("chunks[0].size", 0), "chunks[0].size"),
    ("chunk-digest", _set("chunks[0].digest", "sha256:xyz"), "chunks[0].digest"),
    ("chunk-block-key", _del("chunks[2].block_key"), "chunks[2].block_key"),
    ("merkle-root-bad", _set("merkle_root", 1), "merkle_root"),
    ("witness-missing", _del("witness"), "witness"),
    ("witness-shape", _set("witness.shape", [32, True]), "witness.shape[1]"),
    ("witness-shape-neg", _set("witness.shape", [-1]), "witness.shape[0]"),
    ("witness-digest", _set("witness.logits_digest", ""), "witness.logits_digest"),
    ("witness-dtype", _set("witness.dtype", 32), "witness.dtype"),
    ("verification-missing", _del("verification"), "verification"),
    ("verification-list", _set("verification", []), "verification"),
    ("verdict", _set("verification.verdict", "maybe"), "verification.verdict"),
    ("verifier", _set("verification.verifier", None), "verification.verifier"),
    ("evidence", _set("verification.evidence", "text"), "verification.evidence"),
    ("annotations-missing", _del("annotations"), "annotations"),
    ("annotations-title", _set("annotations.title", 1), "annotations.title"),
    ("annotations-tags", _set("annotations.tags", "x"), "annotations.tags"),
    ("annotations-tag", _set("annotations.tags", ["x", 2]), "annotations.tags[1]"),
    ("created-local", _set("created", "2025-01-31T12:00:00+01:00"), "created"),
    ("created-date", _set("created", "2025-02-30T12:00:00Z"), "created"),
    ("created-int", _set("created", 0), "created"),
    ("version-missing", _del("kvreg_version"), "kvreg_version"),
]


@pytest.mark.parametrize(
    ("mutate", "field_path"), [(m, f) for _, m, f in INVALID], ids=[i for i, _, _ in INVALID]
)
def test_validation_errors_name_the_field(mutate: Mutation, field_path: str) -> None:
    doc = make_doc(10, 4)
    mutate(doc)
    with pytest.raises(ManifestInvalidError) as info:
        Manifest.from_dict(doc)
    assert info.value.details["field"] == field_path
    assert f"manifest field {field_path}:" in info.value.message
    # the same document as bytes fails the same way
    with pytest.raises(ManifestInvalidError):
        Manifest.from_bytes(json.dumps(doc).encode())


def test_floats_are_not_integers_in_bytes() -> None:
    doc = make_doc(10, 4)
    data = json.dumps(doc).encode().replace(b'"num_layers": 2', b'"num_layers": 2.0')
    assert b'"num_layers": 2.0' in data
    with pytest.raises(
        ManifestInvalidError, match=r"model\.num_layers: must be an integer, not a non-integer number"
    ):
        Manifest.from_bytes(data)
    # A dict is serialized first: RFC 8785 writes 2.0 as 2, and the bytes are what count.
    doc["model"]["num_layers"] = 2.0
    assert Manifest.from_dict(doc).model.num_layers == 2


def test_valid_variants() -> None:
    doc = make_doc(8, 4)  # exact multiple of the block size
    doc["model"]["sliding_window"] = 512
    doc["verification"] = None
    doc["annotations"] = {}
    del doc["created"]
    doc["created"] = "2025-01-31T12:00:00.123456Z"
    m = Manifest.from_dict(doc)
    assert m.verification is None and m.model.sliding_window == 512 and len(m.chunks) == 2
    del doc["created"]
    assert Manifest.from_dict(doc).created is None
    one = make_doc(1, 64)
    assert Manifest.from_dict(one).chunks[0].end == 1


def test_merkle_root_mismatch_is_a_proof_error() -> None:
    doc = make_doc(10, 4)
    doc["merkle_root"] = chunk_merkle_root([d("chunk0"), d("chunk1")])
    with pytest.raises(MerkleProofError, match="merkle_root"):
        Manifest.from_dict(doc)
    doc = make_doc(10, 4)
    doc["chunks"][0]["digest"] = d("swapped")
    with pytest.raises(MerkleProofError):
        Manifest.from_dict(doc)


def test_size_cap_and_strict_json() -> None:
    with pytest.raises(ManifestInvalidError, match="limit"):
        Manifest.from_bytes(b" " * (MAX_MANIFEST_BYTES + 1))
    good = json.dumps(make_doc(10, 4)).encode()
    with pytest.raises(ManifestInvalidError, match="duplicate"):
        Manifest.from_bytes(good[:-1] + b', "schema": "kvreg.manifest/v1"}')
    with pytest.raises(ManifestInvalidError, match="JSON object"):
        Manifest.from_bytes(b"[]")


# --- prefix proofs --------------------------------------------------------------------


def _pair(short_count: int, long_count: int, block: int = 4) -> tuple[Manifest, Manifest]:
    tokens = list(range(1, long_count + 1))
    n_long = -(-long_count // block)
    long_digests = [d(f"c{i}") for i in range(n_long)]
    full = short_count // block
    n_short = -(-short_count // block)
    short_digests = long_digests[:full] + ([d("partial")] if n_short > full else [])
    short = Manifest.from_dict(
        make_doc(short_count, block, chunk_digests=short_digests, tokens=tokens[:short_count])
    )
    long = Manifest.from_dict(make_doc(long_count, block, chunk_digests=long_digests, tokens=tokens))
    return short, long


@pytest.mark.parametrize(
    ("short_count", "long_count"), [(8, 14), (4, 40), (10, 14), (12, 12), (16, 33), (13, 13)]
)
def test_prefix_proof_round_trip(short_count: int, long_count: int) -> None:
    short, long = _pair(short_count, long_count)
    proof = prefix_consistency_proof(short, long)
    verify_prefix(short, long, proof)
    if proof:
        bad = copy.copy(proof)
        bad[0] = bytes(32)
        with pytest.raises(MerkleProofError):
            verify_prefix(short, long, bad)


def test_prefix_refusals() -> None:
    short, long = _pair(8, 14)
    other_short = Manifest.from_dict(make_doc(8, 4, chunk_digests=[d("c0"), d("zz")]))
    with pytest.raises(MerkleProofError, match="chunk 1 differs"):
        prefix_consistency_proof(other_short, long)
    with pytest.raises(MerkleProofError):
        verify_prefix(other_short, long, prefix_consistency_proof(short, long))
    with pytest.raises(MerkleProofError, match="tokens"):
        prefix_consistency_proof(long, short)
    tiny = Manifest.from_dict(make_doc(3, 4))
    with pytest.raises(MerkleProofError, match="no full block"):
        prefix_consistency_proof(tiny, long)
    doc = make_doc(8, 4, chunk_digests=[d("c0"), d("c1")])
    doc["model"]["fingerprint"] = d("another model")
    with pytest.raises(MerkleProofError, match="model fingerprint"):
        prefix_consistency_proof(Manifest.from_dict(doc), long)
    other_block = Manifest.from_dict(make_doc(8, 8, chunk_digests=[d("c0")]))
    with pytest.raises(MerkleProofError, match="block sizes"):
        prefix_consistency_proof(other_block, long)
