"""Builders of synthetic manifests and signed artifacts, shared by the test packages.

``manifest_doc`` makes a ``kvreg.manifest/v1`` document of a tiny two-layer llama from
token ids and the digests (and sizes) of the objects it names: one chunk per block
(with the real block keys of the tokens), the tokens, the text, the witness logits,
and the merkle root of the chunks. ``signed_artifact`` makes one from the objects'
bytes (adding a prompt if given) and signs it into a DSSE envelope; ``make_doc`` is the
core tests' document, whose digests stand for no bytes (``test_manifest`` pins its
digest). Their keyword options (``Options``) cover what the tests vary: fingerprints,
model name, block size, config fields, verdict and verifier, evidence, annotations,
creation time.

They do not check the document (``Manifest.from_dict`` does, in ``signed_artifact``),
make real KV tensors (chunks are whatever bytes the caller gives), or publish or
store anything (``web.library.Library.push``, ``remote.helpers.publish`` do).
Other packages import this module as ``core.manifest_helpers`` (``tests/`` is on
pytest's import path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from kvreg.core.blockkey import block_keys, pack_tokens
from kvreg.core.digest import Digest
from kvreg.core.envelope import sign_envelope
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.merkle import chunk_merkle_root

MODEL_FP = Digest.of_bytes(b"model")
TOKENIZER_FP = Digest.of_bytes(b"tokenizer")
CONFIG_FP = Digest.of_bytes(b"config")


def d(label: str) -> Digest:
    return Digest.of_bytes(label.encode())


class Options(TypedDict, total=False):
    """The keyword options of ``manifest_doc`` and ``signed_artifact`` (defaults: ``manifest_doc``)."""

    block_size: int
    model_fp: Digest
    model_name: str
    tokenizer_fp: Digest
    config_fp: Digest
    config_fields: dict[str, Any]
    verdict: str | None
    verifier: str
    evidence: dict[str, Any]
    annotations: dict[str, Any]
    created: str


def manifest_doc(
    tokens: Sequence[int],
    chunk_digests: Sequence[Digest],
    chunk_sizes: Sequence[int],
    *,
    tokens_digest: Digest,
    text_digest: Digest,
    text_size: int,
    logits_digest: Digest,
    block_size: int = 4,
    model_fp: Digest = MODEL_FP,
    model_name: str = "tiny-llama",
    tokenizer_fp: Digest = TOKENIZER_FP,
    config_fp: Digest = CONFIG_FP,
    config_fields: dict[str, Any] | None = None,
    verdict: str | None = "pass",
    verifier: str = "exact-match",
    evidence: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    created: str = "2025-01-31T12:00:00Z",
) -> dict[str, Any]:
    """A manifest document of ``tokens`` cut into blocks of ``block_size``: chunk ``i`` has
    ``chunk_digests[i]``, ``chunk_sizes[i]`` and the block key of the tokens up to its end.

    ``config_fields`` defaults to ``{"threads": 1}``, ``evidence`` and ``annotations`` to
    ``{}``; ``verdict`` None leaves the artifact unverified. No ``prompt`` field.
    """
    count = len(tokens)
    n = -(-count // block_size)
    keys = block_keys(model_fp, tokenizer_fp, config_fp, tokens, block_size)
    return {
        "schema": "kvreg.manifest/v1",
        "model": {
            "fingerprint": model_fp,
            "name": model_name,
            "architecture": "LlamaForCausalLM",
            "model_type": "llama",
            "num_layers": 2,
            "kv_heads": 2,
            "head_dim": 8,
            "dtype": "float32",
            "layer_types": ["full_attention", "full_attention"],
            "sliding_window": None,
        },
        "tokenizer": {"fingerprint": tokenizer_fp, "name": "tiny-tok"},
        "config": {
            "fingerprint": config_fp,
            "profile": "native",
            "fields": {"threads": 1} if config_fields is None else config_fields,
        },
        "schedule": {"block_size": block_size, "grid": "absolute"},
        "tokens": {"count": count, "digest": tokens_digest},
        "text": {"digest": text_digest, "size": text_size},
        "chunks": [
            {
                "index": i,
                "start": i * block_size,
                "end": min((i + 1) * block_size, count),
                "digest": chunk_digests[i],
                "size": chunk_sizes[i],
                "block_key": keys[i],
            }
            for i in range(n)
        ],
        "merkle_root": chunk_merkle_root(list(chunk_digests)),
        "witness": {"logits_digest": logits_digest, "dtype": "float32", "shape": [32]},
        "verification": None
        if verdict is None
        else {"verifier": verifier, "verdict": verdict, "evidence": evidence or {}},
        "annotations": annotations or {},
        "created": created,
        "kvreg_version": "0.1.0",
    }


@dataclass(frozen=True)
class Built:
    """A signed artifact: its manifest, its DSSE envelope as JSON bytes, and the objects the
    manifest names (chunks, tokens, text, logits, prompt), by digest; not the manifest's bytes."""

    manifest: Manifest
    envelope_bytes: bytes
    objects: dict[Digest, bytes]

    @property
    def digest(self) -> Digest:
        return self.manifest.digest


def signed_artifact(
    key: SigningKey,
    tokens: Sequence[int],
    chunks: Sequence[bytes],
    *,
    text: bytes,
    logits: bytes,
    prompt: tuple[bytes, int] | None = None,
    **options: Unpack[Options],
) -> Built:
    """The artifact of ``tokens`` whose objects are ``chunks`` (one per block), the packed
    token ids, ``text``, the witness ``logits`` and ``prompt`` (its bytes and token count),
    its manifest (``manifest_doc`` with ``options``) signed with ``key``."""
    tokens_bytes = pack_tokens(tokens)
    digests = [Digest.of_bytes(c) for c in chunks]
    doc = manifest_doc(
        tokens,
        digests,
        [len(c) for c in chunks],
        tokens_digest=Digest.of_bytes(tokens_bytes),
        text_digest=Digest.of_bytes(text),
        text_size=len(text),
        logits_digest=Digest.of_bytes(logits),
        **options,
    )
    blobs = [*chunks, tokens_bytes, text, logits]
    if prompt is not None:
        prompt_bytes, prompt_tokens = prompt
        doc["prompt"] = {
            "digest": Digest.of_bytes(prompt_bytes),
            "size": len(prompt_bytes),
            "token_count": prompt_tokens,
        }
        blobs.append(prompt_bytes)
    manifest = Manifest.from_dict(doc)
    envelope = sign_envelope(manifest.raw_bytes, key)
    return Built(manifest, envelope.to_json_bytes(), {Digest.of_bytes(b): b for b in blobs})


def make_doc(
    token_count: int = 10,
    block_size: int = 4,
    *,
    chunk_digests: list[Digest] | None = None,
    tokens: list[int] | None = None,
) -> dict[str, Any]:
    """A valid manifest document with ``ceil(token_count / block_size)`` chunks of stand-in
    digests (``tokens``: ``token_count`` ids, by default 1, 2, ...)."""
    tokens = tokens if tokens is not None else list(range(1, token_count + 1))
    n = -(-token_count // block_size)
    digests = chunk_digests if chunk_digests is not None else [d(f"chunk{i}") for i in range(n)]
    return manifest_doc(
        tokens,
        digests,
        [1000 + i for i in range(n)],
        tokens_digest=d("tokens"),
        text_digest=d("text"),
        text_size=42,
        logits_digest=d("logits"),
        block_size=block_size,
        config_fields={"threads": 1, "attn": "eager"},
        evidence={"expected": "8788"},
        annotations={"title": "t", "question": "q", "answer": "a", "tags": ["x"]},
    )
