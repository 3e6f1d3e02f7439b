"""The ``kvreg.manifest/v1`` document of a tiny synthetic artifact (6 tokens, blocks of 4, one
layer), for tests that need a real manifest in a store without running a model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.merkle import chunk_merkle_root


def tiny_manifest_doc(
    fp: Digest, tokens: Any, text: Any, chunks: Sequence[Any], logits: Any
) -> dict[str, Any]:
    """The manifest of two chunks, tokens, text and witness logits already stored (each an
    object with ``digest`` and ``size``), every fingerprint and block key ``fp``."""
    return {
        "schema": "kvreg.manifest/v1",
        "kvreg_version": "0.1.0",
        "model": {
            "fingerprint": fp,
            "name": "tiny",
            "architecture": "LlamaForCausalLM",
            "model_type": "llama",
            "num_layers": 1,
            "kv_heads": 1,
            "head_dim": 4,
            "dtype": "float32",
            "layer_types": ["full_attention"],
            "sliding_window": None,
        },
        "tokenizer": {"fingerprint": fp, "name": "tiny"},
        "config": {"fingerprint": fp, "profile": "native", "fields": {}},
        "schedule": {"block_size": 4, "grid": "absolute"},
        "tokens": {"count": 6, "digest": tokens.digest},
        "text": {"digest": text.digest, "size": text.size},
        "chunks": [
            {
                "index": i,
                "start": 4 * i,
                "end": min(4 * i + 4, 6),
                "digest": c.digest,
                "size": c.size,
                "block_key": fp,
            }
            for i, c in enumerate(chunks)
        ],
        "merkle_root": chunk_merkle_root([c.digest for c in chunks]),
        "witness": {"logits_digest": logits.digest, "dtype": "float32", "shape": [1, 8]},
        "verification": None,
        "annotations": {},
    }
