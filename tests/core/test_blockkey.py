"""Block keys: exact encoding, golden values, and sensitivity to every field."""

from __future__ import annotations

import hashlib
import struct

import pytest

from kvreg.core.blockkey import DOMAIN, block_key, block_key_preimage, block_keys, pack_tokens
from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, UsageError

M = Digest.of_bytes(b"model")
T = Digest.of_bytes(b"tokenizer")
C = Digest.of_bytes(b"config")


def _field(tag: bytes, value: bytes) -> bytes:
    # Written out independently of the module: u8 tag length, tag, u64-LE value length, value.
    return bytes([len(tag)]) + tag + len(value).to_bytes(8, "little") + value


def test_exact_encoding_of_a_tiny_block() -> None:
    expected = (
        b"\x06domain" + b"\x11\x00\x00\x00\x00\x00\x00\x00" + b"kvreg.blockkey/v1"
        + b"\x05model" + b"\x20" + b"\x00" * 7 + M.raw
        + b"\x09tokenizer" + b"\x20" + b"\x00" * 7 + T.raw
        + b"\x06config" + b"\x20" + b"\x00" * 7 + C.raw
        + b"\x06parent" + b"\x00" * 8
        + b"\x06tokens" + b"\x08" + b"\x00" * 7 + b"\x01\x00\x00\x00" + b"\x02\x01\x00\x00"
    )  # fmt: skip
    assert block_key_preimage(M, T, C, None, [1, 258]) == expected
    assert block_key(M, T, C, None, [1, 258]) == Digest.of_bytes(expected)


def test_encoding_with_parent() -> None:
    parent = Digest.of_bytes(b"parent")
    expected = b"".join(
        [
            _field(b"domain", DOMAIN),
            _field(b"model", M.raw),
            _field(b"tokenizer", T.raw),
            _field(b"config", C.raw),
            _field(b"parent", parent.raw),
            _field(b"tokens", struct.pack("<3I", 7, 0, 2**32 - 1)),
        ]
    )
    assert block_key_preimage(M, T, C, parent, [7, 0, 2**32 - 1]) == expected
    assert block_key(M, T, C, parent, [7, 0, 2**32 - 1]).hex == hashlib.sha256(expected).hexdigest()


def test_golden_values() -> None:
    assert block_key(M, T, C, None, [1, 2, 3]) == (
        "sha256:4e9483f88a9c4f09caa1ce5607bf2c439d01150b9539c72c3e5592f2d797b781"
    )
    assert block_keys(M, T, C, list(range(10)), 4) == [
        "sha256:762b6e8beecd5fa56bbd551e73c83e69e1c41babdc5636e7e3f9f1da8e7790b9",
        "sha256:8f0fb07883d5cee8a6b964423b5c7ad6c05f8e86c32d88e0d6c5db64452f122d",
        "sha256:214f8535db33394ae06b6b30008ecf2160dd22dcfaa26f2a8fdb9ad23ab51871",
    ]


def test_block_keys_chain_on_the_absolute_grid() -> None:
    tokens = list(range(100, 111))  # 11 tokens, B=4: [0,4) [4,8) [8,11)
    keys = block_keys(M, T, C, tokens, 4)
    assert len(keys) == 3
    k0 = block_key(M, T, C, None, tokens[0:4])
    k1 = block_key(M, T, C, k0, tokens[4:8])
    k2 = block_key(M, T, C, k1, tokens[8:11])
    assert keys == [k0, k1, k2]
    assert all(isinstance(k, Digest) for k in keys)
    # a longer artifact shares the keys of its full blocks, not the partial one
    longer = block_keys(M, T, C, [*tokens, 5, 6], 4)
    assert longer[:2] == keys[:2]
    assert longer[2] != keys[2]
    assert block_keys(M, T, C, [], 4) == []
    assert block_keys(M, T, C, tokens, 11) == [block_key(M, T, C, None, tokens)]
    assert len(block_keys(M, T, C, tokens, 1)) == 11


def test_every_field_changes_the_key() -> None:
    other = Digest.of_bytes(b"other")
    parent = Digest.of_bytes(b"p")
    base = block_key(M, T, C, parent, [1, 2, 3])
    variants = [
        block_key(other, T, C, parent, [1, 2, 3]),
        block_key(M, other, C, parent, [1, 2, 3]),
        block_key(M, T, other, parent, [1, 2, 3]),
        block_key(M, T, C, other, [1, 2, 3]),
        block_key(M, T, C, None, [1, 2, 3]),
        block_key(M, T, C, parent, [1, 2, 4]),
        block_key(M, T, C, parent, [1, 2]),
        block_key(M, T, C, parent, [1, 2, 3, 0]),
        block_key(M, T, C, parent, [3, 2, 1]),
        # fingerprints are not interchangeable
        block_key(T, M, C, parent, [1, 2, 3]),
        block_key(M, C, T, parent, [1, 2, 3]),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_no_ambiguous_concatenation() -> None:
    tokens = [1, 2, 3, 4, 5, 6]
    # same tokens, different block boundaries: different keys for the covering block
    a = block_keys(M, T, C, tokens, 2)
    b = block_keys(M, T, C, tokens, 3)
    c = block_keys(M, T, C, tokens, 6)
    assert len({a[-1], b[-1], c[-1]}) == 3
    # a one-block artifact is not the two-block one with the parent folded in
    two = block_keys(M, T, C, tokens, 3)
    assert two[1] != block_key(M, T, C, None, tokens)
    # token bytes cannot masquerade as a parent key: 8 tokens are exactly 32 bytes
    fake_parent_tokens = list(struct.unpack("<8I", Digest.of_bytes(b"x").raw))
    assert block_key(M, T, C, Digest.of_bytes(b"x"), [9]) != block_key(
        M, T, C, None, [*fake_parent_tokens, 9]
    )


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40, 1.0, "1", None, True, False])
def test_bad_token_ids_are_refused(bad: object) -> None:
    with pytest.raises(UsageError) as info:
        block_key(M, T, C, None, [1, bad])  # type: ignore[list-item]
    assert isinstance(info.value, KvregError)
    with pytest.raises(UsageError):
        pack_tokens([bad])  # type: ignore[list-item]


def test_bad_arguments() -> None:
    with pytest.raises(UsageError, match="at least one token"):
        block_key(M, T, C, None, [])
    for size in (0, -1, True, 2.0):
        with pytest.raises(UsageError, match="block size"):
            block_keys(M, T, C, [1, 2], size)  # type: ignore[arg-type]
    with pytest.raises(KvregError):
        block_key("sha256:nope", T, C, None, [1])  # type: ignore[arg-type]


def test_index_like_integers_are_accepted() -> None:
    class Index:
        def __index__(self) -> int:
            return 7

    assert pack_tokens([Index()]) == struct.pack("<I", 7)  # type: ignore[list-item]
