"""Graft receipts: a strict schema, canonical payloads, self-certifying signatures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvreg.core.canonical import canonical_json
from kvreg.core.digest import Digest
from kvreg.core.envelope import sign_envelope
from kvreg.core.errors import EnvelopeInvalidError, ReceiptInvalidError, SignatureError
from kvreg.core.keys import SigningKey
from kvreg.core.receipt import RECEIPT_PAYLOAD_TYPE, Receipt, open_receipt

KEY = SigningKey.from_seed(bytes(range(32)))
DIGEST = str(Digest.of_bytes(b"manifest"))


def doc(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": "kvreg.receipt/v1",
        "artifact": {"namespace": "aime25", "ref": "p07", "digest": DIGEST},
        "host": {
            "config_fingerprint": str(Digest.of_bytes(b"c")),
            "model_fingerprint": str(Digest.of_bytes(b"m")),
            "tokenizer_fingerprint": str(Digest.of_bytes(b"t")),
            "device": "cuda",
            "gpu": "NVIDIA H200",
        },
        "witness": "pass",
        "check": {"byte_exact": True, "steps": 32, "sha256_equal_steps": 32},
        "graft": {"graft_tokens": 64, "prompt_tokens": 80, "decoded_tokens": 32, "whole": True},
        "time": "2026-11-29T15:15:28Z",
        "signer": KEY.public_key.to_text(),
    }
    base.update(over)
    return base


def test_round_trip_and_signature() -> None:
    r = Receipt.from_doc(doc())
    env = r.sign(KEY)
    assert env.payload_type == RECEIPT_PAYLOAD_TYPE and env.payload == canonical_json(doc())
    opened = open_receipt(env.to_json_bytes())
    assert opened.receipt == r and opened.digest == Digest.of_bytes(env.payload)
    assert opened.raw == env.to_json_bytes()
    assert r.byte_exact is True and r.grafted_at.isoformat() == "2026-11-29T15:15:28+00:00"
    assert Receipt.from_doc(doc(check=None, graft=None, witness="skipped")).byte_exact is None


@pytest.mark.parametrize(
    "over, words",
    [
        ({"schema": "kvreg.receipt/v2"}, "schema"),
        ({"witness": "probably"}, "witness"),
        ({"time": "yesterday"}, "time"),
        ({"time": "2026-11-29T15:15:28"}, "UTC offset"),
        ({"signer": "ed25519:nope"}, "signer"),
        ({"extra": 1}, "unknown fields"),
        ({"artifact": {"namespace": "Bad/NS", "digest": DIGEST}}, "artifact"),
        ({"artifact": {"namespace": "aime25", "digest": "sha256:00"}}, "artifact.digest"),
        ({"artifact": {"namespace": "aime25", "ref": "../x", "digest": DIGEST}}, "artifact"),
        ({"host": {"config_fingerprint": DIGEST}}, "host lacks"),
        ({"check": {"byte_exact": "yes", "steps": 1}}, "check.byte_exact"),
        ({"check": {"byte_exact": True, "steps": -1}}, "check.steps"),
        ({"graft": {"graft_tokens": 1}}, "graft lacks"),
    ],
)
def test_schema_is_strict(over: dict[str, Any], words: str) -> None:
    with pytest.raises(ReceiptInvalidError, match=words):
        Receipt.from_doc(doc(**over))


def test_payload_must_be_canonical_and_signed_by_its_signer() -> None:
    pretty = json.dumps(doc(), indent=1).encode()
    env = sign_envelope(pretty, KEY, payload_type=RECEIPT_PAYLOAD_TYPE)
    with pytest.raises(ReceiptInvalidError, match="canonical"):
        open_receipt(env.to_json_bytes())
    other = SigningKey.generate()
    forged = sign_envelope(canonical_json(doc()), other, payload_type=RECEIPT_PAYLOAD_TYPE)
    with pytest.raises(SignatureError, match="signer"):
        open_receipt(forged.to_json_bytes())
    with pytest.raises(ReceiptInvalidError, match="signed by the key it names"):
        Receipt.from_doc(doc()).sign(other)
    manifest_type = sign_envelope(canonical_json(doc()), KEY)
    with pytest.raises(ReceiptInvalidError, match="payload type"):
        open_receipt(manifest_type.to_json_bytes())
    with pytest.raises(EnvelopeInvalidError):
        open_receipt(b'{"payload": 1}')
    # A second, valid signature makes a receipt with a bad first one acceptable (DSSE).
    both = forged.with_signature(KEY)
    assert open_receipt(both.to_json_bytes()).receipt == Receipt.from_doc(doc())
