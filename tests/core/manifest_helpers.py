"""Builders of valid manifest documents for the core tests."""

from __future__ import annotations

from typing import Any

from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.merkle import chunk_merkle_root

MODEL_FP = Digest.of_bytes(b"model")
TOKENIZER_FP = Digest.of_bytes(b"tokenizer")
CONFIG_FP = Digest.of_bytes(b"config")


def d(label: str) -> Digest:
    return Digest.of_bytes(label.encode())


def make_doc(
    token_count: int = 10,
    block_size: int = 4,
    *,
    chunk_digests: list[Digest] | None = None,
    tokens: list[int] | None = None,
) -> dict[str, Any]:
    """A valid manifest document with ``ceil(token_count / block_size)`` chunks."""
    tokens = tokens if tokens is not None else list(range(1, token_count + 1))
    n = -(-token_count // block_size)
    digests = chunk_digests if chunk_digests is not None else [d(f"chunk{i}") for i in range(n)]
    keys = block_keys(MODEL_FP, TOKENIZER_FP, CONFIG_FP, tokens, block_size)
    return {
        "schema": "kvreg.manifest/v1",
        "model": {
            "fingerprint": MODEL_FP,
            "name": "tiny-llama",
            "architecture": "LlamaForCausalLM",
            "model_type": "llama",
            "num_layers": 2,
            "kv_heads": 2,
            "head_dim": 8,
            "dtype": "float32",
            "layer_types": ["full_attention", "full_attention"],
            "sliding_window": None,
        },
        "tokenizer": {"fingerprint": TOKENIZER_FP, "name": "tiny-tok"},
        "config": {"fingerprint": CONFIG_FP, "profile": "native", "fields": {"threads": 1, "attn": "eager"}},
        "schedule": {"block_size": block_size, "grid": "absolute"},
        "tokens": {"count": token_count, "digest": d("tokens")},
        "text": {"digest": d("text"), "size": 42},
        "chunks": [
            {
                "index": i,
                "start": i * block_size,
                "end": min((i + 1) * block_size, token_count),
                "digest": digests[i],
                "size": 1000 + i,
                "block_key": keys[i],
            }
            for i in range(n)
        ],
        "merkle_root": chunk_merkle_root(digests),
        "witness": {"logits_digest": d("logits"), "dtype": "float32", "shape": [32]},
        "verification": {"verifier": "exact-match", "verdict": "pass", "evidence": {"expected": "8788"}},
        "annotations": {"title": "t", "question": "q", "answer": "a", "tags": ["x"]},
        "created": "2025-01-31T12:00:00Z",
        "kvreg_version": "0.1.0",
    }
