"""Fuzzing the JSON parsers of outside input: strict JSON, manifests, DSSE envelopes,
trust policies (trust.json) and graft receipts.

Each parser gets arbitrary bytes, arbitrary JSON values, and mutations of a valid
document, and may only raise its own typed error. Signed objects with one bit
changed are refused; valid objects round-trip to the same bytes.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.strategies import flip_one, fuzz, json_values, manifest_doc, mutated, typed
from kvreg.core.canonical import MAX_DEPTH, canonical_json, parse_json_object
from kvreg.core.envelope import PAYLOAD_TYPE, Envelope, sign_envelope, verify_envelope
from kvreg.core.errors import (
    ConfigError,
    EnvelopeInvalidError,
    InvalidNameError,
    KvregError,
    ManifestInvalidError,
    MerkleProofError,
    ReceiptInvalidError,
    SignatureError,
)
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.receipt import RECEIPT_SCHEMA, Receipt, open_receipt
from kvreg.core.trust import TrustPolicy

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
POLICY = TrustPolicy({"ns": [KEY.public_key]})
MANIFEST = Manifest.from_dict(manifest_doc())
ENVELOPE = sign_envelope(MANIFEST.raw_bytes, KEY)
ENVELOPE_BYTES = ENVELOPE.to_json_bytes()
MANIFEST_ERRORS = (ManifestInvalidError, MerkleProofError)


# --- strict JSON ------------------------------------------------------------------------------


@fuzz(300)
@given(st.binary(max_size=200))
def test_parse_json_object_arbitrary_bytes(data: bytes) -> None:
    typed(parse_json_object, data, what="doc", max_bytes=1 << 20, allowed=ManifestInvalidError)


@fuzz(200)
@given(st.text(alphabet='[]{}"\\:,0123456789eE.+-truefalsn \ud800\udc00\x00', max_size=80))
def test_parse_json_object_json_like_text(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    typed(parse_json_object, data, what="doc", max_bytes=1 << 20, allowed=ManifestInvalidError)


@fuzz(200)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_parse_json_object_round_trip(doc: dict) -> None:
    try:
        raw = canonical_json(doc)
    except KvregError:
        return  # integers outside I-JSON, say: refused on the way out
    # What the writer accepts, the strict reader reads back to the same bytes (the writer
    # refuses a float such as 2.0**53, which it would write as an out-of-range integer).
    parsed = parse_json_object(raw, what="doc", max_bytes=1 << 20)
    assert canonical_json(parsed) == raw


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000, 200_000])
def test_deep_nesting_is_refused(depth: int) -> None:
    data = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(ManifestInvalidError):
        parse_json_object(data, what="doc", max_bytes=1 << 22)


def test_size_cap_is_checked_before_parsing() -> None:
    with pytest.raises(ManifestInvalidError, match="limit"):
        parse_json_object(b"{}" + b" " * 1000, what="doc", max_bytes=100)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1e999}',
        b'{"a":NaN}',
        b'{"a":-Infinity}',
        b'{"a":1,"a":2}',
        b'{"a":9007199254740992}',
        b'{"a":"\\ud800"}',
        b"\xef\xbb\xbf{}",
        b'{"a":' + b"9" * 5000 + b"}",
        b"[]",
        b'"x"',
    ],
)
def test_strict_json_refusals(data: bytes) -> None:
    with pytest.raises(ManifestInvalidError):
        parse_json_object(data, what="doc", max_bytes=1 << 20)


# --- manifests ----------------------------------------------------------------------------------


@fuzz(300)
@given(mutated(MANIFEST.raw_bytes))
def test_manifest_mutated_bytes(data: bytes) -> None:
    m = typed(Manifest.from_bytes, data, allowed=MANIFEST_ERRORS)
    if m is not None:  # a mutation may land in free text; then the bytes are kept exactly
        assert m.raw_bytes == data
        assert (m.digest == MANIFEST.digest) == (data == MANIFEST.raw_bytes)


def _paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


MANIFEST_PATHS = _paths(MANIFEST.to_dict())[1:]


@fuzz(400)
@given(st.sampled_from(MANIFEST_PATHS), json_values, st.booleans())
def test_manifest_field_replaced_or_deleted(path: tuple, value: object, delete: bool) -> None:
    doc = MANIFEST.to_dict()
    node = doc
    for p in path[:-1]:
        node = node[p]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    m = typed(Manifest.from_dict, doc, allowed=MANIFEST_ERRORS)
    if m is not None:
        # Accepted: it must be stable (the same bytes parse to the same document again).
        again = Manifest.from_bytes(m.raw_bytes)
        assert again.to_dict() == m.to_dict() and again.to_bytes() == m.to_bytes()


@fuzz(60)
@given(st.integers(1, 40), st.integers(1, 9))
def test_manifest_round_trip(count: int, block: int) -> None:
    m = Manifest.from_dict(manifest_doc(count, block))
    again = Manifest.from_bytes(m.raw_bytes)
    assert again == m and again.to_bytes() == m.raw_bytes and again.chunks == m.chunks


@pytest.mark.parametrize("count", [2**53 - 1, 2**53, 2**63, 10**30])
def test_manifest_huge_counts_allocate_nothing(count: int) -> None:
    doc = manifest_doc()
    doc["tokens"]["count"] = count
    doc["schedule"]["block_size"] = 1
    with pytest.raises(ManifestInvalidError):
        Manifest.from_dict(doc)


# --- envelopes ----------------------------------------------------------------------------------


@fuzz(300)
@given(mutated(ENVELOPE_BYTES))
def test_envelope_mutated_bytes(data: bytes) -> None:
    env = typed(Envelope.from_json_bytes, data, allowed=EnvelopeInvalidError)
    if env is None:
        return
    if (
        env.payload == ENVELOPE.payload
        and env.payload_type == PAYLOAD_TYPE
        and env.signatures == ENVELOPE.signatures
    ):
        return  # an edit that kept the meaning (inside a key id, say) verifies as before
    m = typed(verify_envelope, env, POLICY, "ns", allowed=(KvregError,))
    assert m is None or (m.raw_bytes == ENVELOPE.payload and env.payload_type == PAYLOAD_TYPE)


@fuzz(200)
@given(st.integers(0, 10**6), st.integers(0, 7), st.sampled_from(("payload", "sig")))
def test_envelope_one_bit_changed_is_refused(index: int, bit: int, part: str) -> None:
    sig = ENVELOPE.signatures[0]
    if part == "payload":
        env = Envelope(PAYLOAD_TYPE, flip_one(ENVELOPE.payload, index, bit), ENVELOPE.signatures)
    else:
        env = Envelope(PAYLOAD_TYPE, ENVELOPE.payload, ((sig.keyid, flip_one(sig.sig, index, bit)),))
    with pytest.raises(SignatureError):
        verify_envelope(Envelope.from_json_bytes(env.to_json_bytes()), POLICY, "ns")


@fuzz(200)
@given(st.dictionaries(st.sampled_from(("payload", "payloadType", "signatures", "x")), json_values))
def test_envelope_arbitrary_documents(doc: dict) -> None:
    try:
        data = json.dumps(doc).encode()
    except ValueError:
        return
    typed(Envelope.from_json_bytes, data, allowed=EnvelopeInvalidError)


def test_envelope_round_trip_and_trust() -> None:
    again = Envelope.from_json_bytes(ENVELOPE_BYTES)
    assert again == ENVELOPE and again.to_json_bytes() == ENVELOPE_BYTES
    assert verify_envelope(again, POLICY, "ns") == MANIFEST
    with pytest.raises(SignatureError):  # trusted for another namespace only
        verify_envelope(again, POLICY, "other")
    with pytest.raises(SignatureError):
        verify_envelope(sign_envelope(MANIFEST.raw_bytes, OTHER), POLICY, "ns")


def test_envelope_too_many_signatures_refused_without_verifying() -> None:
    sig = {"sig": base64.b64encode(bytes(64)).decode()}
    doc = {"payload": "", "payloadType": PAYLOAD_TYPE, "signatures": [sig] * 10_000}
    with pytest.raises(EnvelopeInvalidError, match="signatures"):
        Envelope.from_json_bytes(json.dumps(doc).encode())


# --- trust policies ---------------------------------------------------------------------------

TRUST_BYTES = TrustPolicy({"ns": [KEY.public_key], "*": [OTHER.public_key]}).to_json_bytes()


@fuzz(200)
@given(mutated(TRUST_BYTES))
def test_trust_policy_mutated_bytes(data: bytes) -> None:
    policy = typed(TrustPolicy.from_json_bytes, data, allowed=ConfigError)
    if policy is not None:
        assert TrustPolicy.from_json_bytes(policy.to_json_bytes()).to_dict() == policy.to_dict()


@fuzz(200)
@given(st.dictionaries(st.text(max_size=10), json_values | st.lists(st.text(max_size=50), max_size=3)))
def test_trust_policy_arbitrary_namespaces(namespaces: dict) -> None:
    data = json.dumps({"version": 1, "namespaces": namespaces}).encode()
    typed(TrustPolicy.from_json_bytes, data, allowed=ConfigError)


def test_trust_policy_round_trip() -> None:
    assert TrustPolicy.from_json_bytes(TRUST_BYTES).to_json_bytes() == TRUST_BYTES
    with pytest.raises(ConfigError):
        TrustPolicy.from_json_bytes(TRUST_BYTES.replace(b'"ns"', b'"../x"'))
    assert not issubclass(ConfigError, InvalidNameError)  # the policy reports its own code


# --- graft receipts -----------------------------------------------------------------------------


def _receipt_doc() -> dict:
    return {
        "schema": RECEIPT_SCHEMA,
        "artifact": {"namespace": "ns", "ref": "p07", "digest": str(MANIFEST.digest)},
        "host": {
            "config_fingerprint": str(MANIFEST.config.fingerprint),
            "model_fingerprint": str(MANIFEST.model.fingerprint),
            "tokenizer_fingerprint": str(MANIFEST.tokenizer.fingerprint),
            "device": "cpu",
        },
        "witness": "pass",
        "check": {"byte_exact": True, "steps": 4},
        "graft": {"graft_tokens": 8, "prompt_tokens": 10, "decoded_tokens": 4, "whole": False},
        "time": "2025-01-31T12:00:00Z",
        "signer": KEY.public_key.to_text(),
    }


RECEIPT = Receipt.from_doc(_receipt_doc())
RECEIPT_BYTES = RECEIPT.sign(KEY).to_json_bytes()
RECEIPT_PATHS = _paths(_receipt_doc())[1:]


def test_receipt_round_trip() -> None:
    opened = open_receipt(RECEIPT_BYTES)
    assert opened.receipt == RECEIPT and opened.receipt.to_payload() == RECEIPT.to_payload()


@fuzz(300)
@given(mutated(RECEIPT_BYTES))
def test_receipt_mutated_envelope(data: bytes) -> None:
    opened = typed(open_receipt, data, allowed=(ReceiptInvalidError, EnvelopeInvalidError, SignatureError))
    if opened is not None:  # only edits that leave payload and signature as they were
        assert opened.envelope.payload == RECEIPT.to_payload()


@fuzz(300)
@given(st.sampled_from(RECEIPT_PATHS), json_values | st.text(max_size=40), st.booleans())
def test_receipt_field_replaced_or_deleted(path: tuple, value: object, delete: bool) -> None:
    doc = _receipt_doc()
    node = doc
    for p in path[:-1]:
        node = node[p]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    receipt = typed(Receipt.from_doc, doc, allowed=ReceiptInvalidError)
    if receipt is None:
        return
    payload = receipt.to_payload()
    assert Receipt.from_payload(payload) == receipt
    if payload != RECEIPT.to_payload():  # the old signature does not carry over to a changed receipt
        env = Envelope(RECEIPT.sign(KEY).payload_type, payload, RECEIPT.sign(KEY).signatures)
        with pytest.raises(SignatureError):
            open_receipt(env.to_json_bytes())


@pytest.mark.parametrize(
    "time",
    [
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "2025-01-31",
        "2025-01-31T12:00:00",
        "2025-02-30T00:00:00Z",
        "\u0662025-01-31T12:00:00Z",
    ],
)
def test_receipt_times_out_of_range_are_refused(time: str) -> None:
    doc = _receipt_doc()
    doc["time"] = time
    with pytest.raises(ReceiptInvalidError):
        Receipt.from_doc(doc)
