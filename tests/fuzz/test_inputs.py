"""Fuzzing the small parsers of outside input: ref and namespace names, HTTP ``Range``
headers (the registry's ``parse_range``), block-key inputs, and the client's checks of
registry replies (``kvreg.remote.http``).

Arbitrary input raises only the typed error; what is accepted is exactly what the
documented grammar allows, and round-trips.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.strategies import fuzz, mutated, typed
from kvreg.core.blockkey import block_key, block_keys, pack_tokens
from kvreg.core.digest import Digest
from kvreg.core.errors import (
    InvalidDigestError,
    InvalidNameError,
    KeyFileError,
    RangeNotSatisfiableError,
    RemoteError,
    RequestInvalidError,
    UsageError,
)
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.core.names import NAME_PATTERN, NAMESPACE_PATTERN, RefName, validate_name, validate_namespace
from kvreg.remote import http
from kvreg.remote.api import core as api_core
from kvreg_registry.api.routes_objects import parse_range

KEY_PEM = SigningKey.from_seed(bytes(32)).public_key.to_pem()
NAMESPACE_RE = re.compile(NAMESPACE_PATTERN, re.ASCII)
NAME_RE = re.compile(NAME_PATTERN, re.ASCII)

name_text = st.text(
    alphabet=st.sampled_from([*"aZ09._-/\\ \x00:", "\uff0f", "\u0131", "\u212a", "\n"]) | st.characters(),
    max_size=140,
)


# --- names ----------------------------------------------------------------------------------


@fuzz(500)
@given(name_text)
def test_ref_name_parse(text: str) -> None:
    ref = typed(RefName.parse, text, allowed=InvalidNameError)
    if ref is None:
        return
    assert str(ref) == text and RefName.parse(str(ref)) == ref
    assert text.isascii() and ".." not in ref.name and ref.name not in (".", "..")
    assert NAMESPACE_RE.fullmatch(ref.namespace) and NAME_RE.fullmatch(ref.name)


@fuzz(300)
@given(name_text)
def test_namespace_and_name(text: str) -> None:
    if typed(validate_namespace, text, allowed=InvalidNameError) is not None:
        assert NAMESPACE_RE.fullmatch(text) and len(text) <= 63
    if typed(validate_name, text, allowed=InvalidNameError) is not None:
        assert NAME_RE.fullmatch(text) and ".." not in text and len(text) <= 128


@pytest.mark.parametrize("bad", [None, 1, b"ns", ["ns"]])
def test_names_of_other_types_are_typed_errors(bad: object) -> None:
    for fn in (validate_namespace, validate_name, RefName.parse):
        with pytest.raises(InvalidNameError):
            fn(bad)  # type: ignore[arg-type]


# --- HTTP Range -----------------------------------------------------------------------------

range_text = st.text(alphabet=st.sampled_from(list("bytes=-,0123456789 B\u00b2\u0661\uff11\t")), max_size=30)


@fuzz(500)
@given(range_text | st.text(max_size=30), st.integers(0, 2**40))
def test_range_header(header: str, size: int) -> None:
    span = typed(parse_range, header, size, allowed=(RequestInvalidError, RangeNotSatisfiableError))
    if span is not None:
        start, end = span
        assert 0 <= start < end <= size


@fuzz(300)
@given(st.integers(0, 10**21), st.integers(0, 10**21) | st.none(), st.integers(0, 2**63))
def test_range_well_formed(first: int, last: int | None, size: int) -> None:
    header = f"bytes={first}-" + ("" if last is None else str(last))
    span = typed(parse_range, header, size, allowed=(RequestInvalidError, RangeNotSatisfiableError))
    if span is not None:
        assert span[0] == first and span[1] == (size if last is None else min(last + 1, size))


@pytest.mark.parametrize(
    ("header", "error"),
    [
        ("bytes=\u00b2-", RequestInvalidError),
        ("bytes=\u0661-", RequestInvalidError),
        ("bytes=0-\uff19", RequestInvalidError),
        ("bytes=" + "9" * 21 + "-", RequestInvalidError),
        ("bytes=-5", RangeNotSatisfiableError),  # on an empty object
    ],
)
def test_range_refusals(header: str, error: type[UsageError]) -> None:
    with pytest.raises(error):
        parse_range(header, 0)


def test_range_beyond_the_object_is_clamped_without_a_huge_read() -> None:
    assert parse_range("bytes=0-99999999999999999999", 10) == (0, 10)


# --- block keys -----------------------------------------------------------------------------

FP = Digest.of_bytes(b"fp")
token_values = st.integers(-(2**40), 2**40) | st.booleans() | st.floats() | st.text(max_size=2) | st.none()


@fuzz(300)
@given(st.lists(token_values, max_size=20))
def test_pack_tokens(tokens: list) -> None:
    packed = typed(pack_tokens, tokens, allowed=UsageError)
    if packed is not None:
        assert len(packed) == 4 * len(tokens)


@fuzz(200)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=40), st.integers(-2, 12) | st.booleans())
def test_block_keys(tokens: list[int], block: int) -> None:
    keys = typed(block_keys, FP, FP, FP, tokens, block, allowed=UsageError)
    if keys is None:
        return
    assert len(keys) == -(-len(tokens) // block)
    # Chained: a prefix on the grid has exactly the first keys.
    cut = (len(tokens) // block) * block
    assert block_keys(FP, FP, FP, tokens[:cut], block) == keys[: cut // block]


@fuzz(200)
@given(st.text(max_size=80) | st.none() | st.integers(), st.lists(st.integers(0, 9), max_size=3))
def test_block_key_fingerprints(fp: object, tokens: list[int]) -> None:
    typed(block_key, fp, FP, FP, None, tokens, allowed=(InvalidDigestError, UsageError))
    typed(block_key, FP, FP, FP, fp, tokens, allowed=(InvalidDigestError, UsageError))


# --- the client's checks of registry replies ------------------------------------------------


@fuzz(300)
@given(st.text(max_size=60) | st.integers() | st.booleans() | st.none() | st.floats() | st.binary(max_size=8))
def test_reply_validators(value: object) -> None:
    raw = typed(api_core.parse_b64_hash, value, "root", allowed=RemoteError)
    assert raw is None or len(raw) == 32
    n = typed(api_core.parse_size, value, "size", allowed=RemoteError)
    assert n is None or (type(n) is int and n >= 0)
    typed(api_core.parse_log_index, value, "index", allowed=RemoteError)
    typed(http.RegistryClient._digest, value, "x", allowed=RemoteError)


# --- public keys (kvreg trust add, trust.json, receipts) ------------------------------------


@fuzz(300)
@given(st.text(max_size=60) | st.builds(lambda b: "ed25519:" + b, st.text(max_size=50)))
def test_public_key_text(text: str) -> None:
    key = typed(PublicKey.from_text, text, allowed=KeyFileError)
    if key is not None:
        assert key.to_text() == text


@fuzz(200)
@given(mutated(KEY_PEM) | st.binary(max_size=120))
def test_key_pem(data: bytes) -> None:
    key = typed(PublicKey.from_pem, data, allowed=KeyFileError)
    if key is not None:
        assert PublicKey.from_pem(key.to_pem()) == key
    typed(SigningKey.from_pem, data, allowed=KeyFileError)
