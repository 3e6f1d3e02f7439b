"""Block keys: names for "the KV this model computes, under this config, for this
token prefix up to block i", without revealing the tokens (docs/design.md, "Objects").

Definition (``kvreg.blockkey/v1``). For block ``i`` of an artifact::

    key_i = SHA-256( F("domain",    b"kvreg.blockkey/v1")
                  || F("model",     model fingerprint, 32 raw digest bytes)
                  || F("tokenizer", tokenizer fingerprint, 32 raw digest bytes)
                  || F("config",    config fingerprint, 32 raw digest bytes)
                  || F("parent",    key_{i-1} as 32 raw bytes, or b"" for block 0)
                  || F("tokens",    the token ids of block i, each a little-endian uint32) )

    F(tag, value) = u8(len(tag)) || tag as ASCII || u64_le(len(value)) || value

``u8`` is one unsigned byte, ``u64_le`` eight bytes little-endian; lengths are
byte counts. The field order above is fixed, every field is always present (the
block-0 parent is present with length 0), and raw digest bytes are the 32 bytes
of the SHA-256, not the ``sha256:<hex>`` text. The tokens field of a block of n
tokens is ``4 * n`` bytes (Python ``struct.pack("<%dI" % n, *ids)``); every id
must be in ``0 .. 2**32 - 1``, and a block holds at least one token.

Blocks lie on the absolute grid: for P tokens and block size B, block i covers
tokens ``[i*B, min((i+1)*B, P))``; the last block may be partial. Because each key
chains its parent, two artifacts share ``key_i`` exactly when they share model,
tokenizer, config and the first ``min((i+1)*B, P)`` tokens with the same block
boundaries.

This module only computes keys; it does not tokenize, look keys up, or store
anything.
"""

from __future__ import annotations

import hashlib
import operator
import struct
from collections.abc import Sequence

from kvreg.core.digest import Digest
from kvreg.core.errors import UsageError

__all__ = ["DOMAIN", "block_key", "block_key_preimage", "block_keys", "encode_field", "pack_tokens"]

DOMAIN = b"kvreg.blockkey/v1"
_UINT32_LIMIT = 2**32


def encode_field(tag: bytes, value: bytes) -> bytes:
    """``u8(len(tag)) || tag || u64_le(len(value)) || value``."""
    if not 0 < len(tag) < 256:
        raise UsageError(f"block key field tag must be 1-255 bytes, got {len(tag)}")
    return bytes([len(tag)]) + tag + struct.pack("<Q", len(value)) + value


def pack_tokens(tokens: Sequence[int]) -> bytes:
    """Token ids as consecutive little-endian uint32; raise ``UsageError`` on a bad id."""
    ids: list[int] = []
    for i, t in enumerate(tokens):
        if isinstance(t, bool):
            raise UsageError(f"token id at position {i} is a bool, not an integer")
        try:
            v = operator.index(t)
        except TypeError as e:
            raise UsageError(f"token id at position {i} is not an integer: {t!r}") from e
        if not 0 <= v < _UINT32_LIMIT:
            raise UsageError(f"token id {v} at position {i} is outside 0..2**32-1")
        ids.append(v)
    return struct.pack(f"<{len(ids)}I", *ids)


def block_key_preimage(
    model_fp: Digest,
    tokenizer_fp: Digest,
    config_fp: Digest,
    parent: Digest | None,
    tokens: Sequence[int],
) -> bytes:
    """The exact bytes hashed into a block key (see the module docstring)."""
    if len(tokens) == 0:
        raise UsageError("a block holds at least one token")
    return b"".join(
        (
            encode_field(b"domain", DOMAIN),
            encode_field(b"model", Digest(model_fp).raw),
            encode_field(b"tokenizer", Digest(tokenizer_fp).raw),
            encode_field(b"config", Digest(config_fp).raw),
            encode_field(b"parent", b"" if parent is None else Digest(parent).raw),
            encode_field(b"tokens", pack_tokens(tokens)),
        )
    )


def block_key(
    model_fp: Digest,
    tokenizer_fp: Digest,
    config_fp: Digest,
    parent: Digest | None,
    tokens: Sequence[int],
) -> Digest:
    """``key_i`` for one block, given ``key_{i-1}`` (``None`` for block 0)."""
    preimage = block_key_preimage(model_fp, tokenizer_fp, config_fp, parent, tokens)
    return Digest.from_hex(hashlib.sha256(preimage).hexdigest())


def block_keys(
    model_fp: Digest,
    tokenizer_fp: Digest,
    config_fp: Digest,
    tokens: Sequence[int],
    block_size: int,
) -> list[Digest]:
    """One key per block of ``tokens`` on the absolute grid of ``block_size``.

    Returns ``ceil(len(tokens) / block_size)`` keys; an empty token list has none.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise UsageError(f"block size must be a positive integer, got {block_size!r}")
    keys: list[Digest] = []
    parent: Digest | None = None
    for start in range(0, len(tokens), block_size):
        parent = block_key(model_fp, tokenizer_fp, config_fp, parent, tokens[start : start + block_size])
        keys.append(parent)
    return keys
