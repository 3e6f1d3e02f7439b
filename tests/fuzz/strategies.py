"""Shared pieces of the fuzz suite: settings, the "typed errors only" check, mutators and
builders of valid inputs (manifests, signed envelopes, safetensors headers).

``fuzz(n)`` gives a test ``n`` examples under the ``kvreg-fuzz`` profile of
``conftest.py`` (times ``KVREG_FUZZ_SCALE`` for long runs). ``typed`` calls a
parser and lets through only the ``KvregError`` subclasses named: any other
exception (``KeyError``, ``ValueError``, ``RecursionError``, ...) fails the test.

This module does not test anything by itself.
"""

from __future__ import annotations

import importlib
import json
import os
import struct
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError
from kvreg.core.merkle import chunk_merkle_root

T = TypeVar("T")

SCALE = max(1, int(os.environ.get("KVREG_FUZZ_SCALE", "1")))
RANDOM = os.environ.get("KVREG_FUZZ_RANDOM") == "1"


def fuzz(max_examples: int) -> settings:
    """Settings for one fuzz test: ``max_examples`` (scaled for long runs) on the fuzz profile."""
    try:
        parent = settings.get_profile("kvreg-fuzz")
    except InvalidArgument:  # imported outside pytest (a REPL): conftest registers the profile
        importlib.import_module("fuzz.conftest")
        parent = settings.get_profile("kvreg-fuzz")
    return settings(parent, max_examples=max_examples * SCALE, derandomize=not RANDOM)


def typed(
    fn: Callable[..., T],
    *args: Any,
    allowed: type[KvregError] | tuple[type[KvregError], ...] = KvregError,
    **kwargs: Any,
) -> T | None:
    """``fn(*args, **kwargs)``, or ``None`` when it raised one of ``allowed``; anything else
    propagates (and fails the test)."""
    try:
        return fn(*args, **kwargs)
    except allowed:
        return None


# --- mutators -------------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, base: bytes, max_ops: int = 4) -> bytes:
    """``base`` after 1..max_ops random edits: bit flips, byte sets, deletions, insertions."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(("flip", "set", "delete", "insert", "truncate")))
        if not data:
            op = "insert"
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.sampled_from(b'\x00\xff"{}[],:\\0-9e.\xc3\xed\xa0\x80'))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[i:]
    return bytes(data)


def flip_one(data: bytes, index: int, bit: int) -> bytes:
    """``data`` with one bit flipped (index taken modulo the length)."""
    out = bytearray(data)
    out[index % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


# JSON values, small and sometimes nasty: huge integers, floats, surrogate escapes come as text.
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


# --- valid inputs ---------------------------------------------------------------------------

MODEL_FP = Digest.of_bytes(b"fuzz-model")
TOKENIZER_FP = Digest.of_bytes(b"fuzz-tokenizer")
CONFIG_FP = Digest.of_bytes(b"fuzz-config")


def d(label: str) -> Digest:
    return Digest.of_bytes(label.encode())


def manifest_doc(token_count: int = 10, block_size: int = 4) -> dict[str, Any]:
    """A valid ``kvreg.manifest/v1`` document with ``ceil(token_count / block_size)`` chunks."""
    n = -(-token_count // block_size)
    digests = [d(f"chunk{i}") for i in range(n)]
    keys = block_keys(MODEL_FP, TOKENIZER_FP, CONFIG_FP, list(range(1, token_count + 1)), block_size)
    return {
        "schema": "kvreg.manifest/v1",
        "model": {
            "fingerprint": MODEL_FP,
            "name": "tiny",
            "architecture": "LlamaForCausalLM",
            "model_type": "llama",
            "num_layers": 2,
            "kv_heads": 2,
            "head_dim": 8,
            "dtype": "float32",
            "layer_types": ["full_attention", "full_attention"],
            "sliding_window": None,
        },
        "tokenizer": {"fingerprint": TOKENIZER_FP, "name": "tok"},
        "config": {"fingerprint": CONFIG_FP, "profile": "native", "fields": {"threads": 1}},
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


def safetensors_bytes(
    tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None
) -> bytes:
    """A valid safetensors file: ``name -> (dtype, shape)``, zero-filled data, in the given order."""
    from kvreg.core.safetensors_header import DTYPE_SIZES

    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = DTYPE_SIZES[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)
