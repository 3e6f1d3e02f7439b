"""Graft receipts: a host's signed statement that it grafted an artifact, and how that went.

A receipt is a DSSE envelope (``kvreg.core.envelope``) with payload type
``application/vnd.kvreg.receipt.v1+json`` whose payload is RFC 8785 canonical JSON::

    {"schema": "kvreg.receipt/v1",
     "artifact": {"namespace": NS, "ref": NAME | null, "digest": "sha256:..."},
     "host": {"config_fingerprint": D, "model_fingerprint": D, "tokenizer_fingerprint": D,
              "device": ..., "cpu_capability": ..., "gpu": ..., "profile": ..., "dtype": ...,
              "hostname": ..., "kvreg": VERSION},          # the last seven optional strings
     "witness": "pass" | "fail" | "skipped",
     "check": {"byte_exact": bool, "steps": N, "sha256_equal_steps": N} | null,
     "graft": {"graft_tokens": N, "prompt_tokens": N, "decoded_tokens": N, "whole": bool} | null,
     "time": "2026-11-29T15:15:28Z",
     "signer": "ed25519:<base64>"}

It is self-certifying: ``signer`` is the public key, and :func:`open_receipt` accepts
the receipt only if a signature verifies with it. Who that key belongs to is for
the reader to judge (the registry says whether it is a key registered for the
namespace). The receipt's digest is the SHA-256 of the exact payload bytes.

Parsing is strict (unknown fields, wrong types, a payload that is not canonical JSON
are ``ReceiptInvalidError``), so that every stored receipt means one thing. This
module is shared by the client (building and signing) and the registry (checking);
it does not send anything.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from kvreg.core.canonical import canonical_json, parse_json_object
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope, pae, sign_envelope
from kvreg.core.errors import KvregError, ReceiptInvalidError, SignatureError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.core.names import validate_name, validate_namespace
from kvreg.core.timestamps import rfc3339

__all__ = [
    "MAX_RECEIPT_BYTES",
    "RECEIPT_PAYLOAD_TYPE",
    "RECEIPT_SCHEMA",
    "WITNESS_RESULTS",
    "OpenedReceipt",
    "Receipt",
    "open_receipt",
]

RECEIPT_PAYLOAD_TYPE = "application/vnd.kvreg.receipt.v1+json"
RECEIPT_SCHEMA = "kvreg.receipt/v1"
WITNESS_RESULTS = ("pass", "fail", "skipped")
MAX_RECEIPT_BYTES = 64 * 1024
_HOST_DIGESTS = ("config_fingerprint", "model_fingerprint", "tokenizer_fingerprint")
_HOST_TEXT = ("device", "cpu_capability", "gpu", "profile", "dtype", "hostname", "kvreg")
_MAX_TEXT = 200
_INT_MAX = 2**53 - 1


def _fail(message: str) -> ReceiptInvalidError:
    return ReceiptInvalidError(f"receipt: {message}")


def _object(
    value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(f"{where} must be an object")
    missing = [k for k in required if k not in value]
    if missing:
        raise _fail(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise _fail(f"{where} has unknown fields {unknown}")
    return value


def _digest(value: Any, where: str) -> str:
    try:
        return str(Digest(value))
    except KvregError:
        raise _fail(f"{where} is not a digest sha256:<64 hex>") from None


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT_MAX:
        raise _fail(f"{where} must be a non-negative integer")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(f"{where} must be true or false")
    return value


def format_time(t: dt.datetime) -> str:
    """RFC 3339, UTC, whole seconds: ``2026-11-29T15:15:28Z``."""
    return rfc3339(t)


def parse_time(value: Any, where: str = "time") -> dt.datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise _fail(f"{where} must be an RFC 3339 time string")
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _fail(f"{where} {value!r} is not an RFC 3339 time") from None
    if t.tzinfo is None or "T" not in value:
        raise _fail(f"{where} {value!r} needs a date, a time and a UTC offset (e.g. ...Z)")
    try:
        return t.astimezone(dt.UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise _fail(f"{where} {value!r} is out of range in UTC") from None


@dataclass(frozen=True)
class Receipt:
    """The payload of a graft receipt. Make one with :meth:`from_doc` (which checks every
    field); the constructor checks nothing."""

    namespace: str
    ref: str | None
    digest: str
    host: dict[str, str | None]
    witness: str
    check: dict[str, Any] | None
    graft: dict[str, Any] | None
    time: str
    signer: str

    @property
    def signer_key(self) -> PublicKey:
        return PublicKey.from_text(self.signer)

    @property
    def grafted_at(self) -> dt.datetime:
        return parse_time(self.time)

    @property
    def byte_exact(self) -> bool | None:
        return None if self.check is None else bool(self.check["byte_exact"])

    def to_doc(self) -> dict[str, Any]:
        return {
            "schema": RECEIPT_SCHEMA,
            "artifact": {"namespace": self.namespace, "ref": self.ref, "digest": self.digest},
            "host": dict(self.host),
            "witness": self.witness,
            "check": None if self.check is None else dict(self.check),
            "graft": None if self.graft is None else dict(self.graft),
            "time": self.time,
            "signer": self.signer,
        }

    def to_payload(self) -> bytes:
        return canonical_json(self.to_doc(), error=ReceiptInvalidError)

    def sign(self, key: SigningKey) -> Envelope:
        """The DSSE envelope of this receipt signed by ``key`` (which must be ``signer``)."""
        if key.public_key.to_text() != self.signer:
            raise ReceiptInvalidError("a receipt is signed by the key it names as its signer")
        return sign_envelope(self.to_payload(), key, payload_type=RECEIPT_PAYLOAD_TYPE)

    @classmethod
    def from_doc(cls, doc: Any) -> Receipt:
        d = _object(
            doc,
            "the receipt",
            ("schema", "artifact", "host", "witness", "check", "time", "signer"),
            ("graft",),
        )
        if d["schema"] != RECEIPT_SCHEMA:
            raise _fail(f"schema is {d['schema']!r}, not {RECEIPT_SCHEMA!r}")
        a = _object(d["artifact"], "artifact", ("namespace", "digest"), ("ref",))
        try:
            namespace = validate_namespace(a["namespace"])
            ref = a.get("ref")
            if ref is not None:
                validate_name(ref)
        except KvregError as e:
            raise _fail(f"artifact: {e.message}") from None
        digest = _digest(a["digest"], "artifact.digest")
        h = _object(d["host"], "host", _HOST_DIGESTS, _HOST_TEXT)
        host: dict[str, str | None] = {k: _digest(h[k], f"host.{k}") for k in _HOST_DIGESTS}
        for k in _HOST_TEXT:
            if k in h:
                v = h[k]
                if v is not None and (not isinstance(v, str) or len(v) > _MAX_TEXT):
                    raise _fail(f"host.{k} must be a string of at most {_MAX_TEXT} characters, or null")
                host[k] = v
        if d["witness"] not in WITNESS_RESULTS:
            raise _fail(f"witness must be one of {', '.join(WITNESS_RESULTS)}")
        check: dict[str, Any] | None = None
        if d["check"] is not None:
            c = _object(d["check"], "check", ("byte_exact", "steps"), ("sha256_equal_steps",))
            check = {
                "byte_exact": _flag(c["byte_exact"], "check.byte_exact"),
                "steps": _count(c["steps"], "check.steps"),
            }
            if "sha256_equal_steps" in c:
                check["sha256_equal_steps"] = _count(c["sha256_equal_steps"], "check.sha256_equal_steps")
        graft: dict[str, Any] | None = None
        if d.get("graft") is not None:
            g = _object(d["graft"], "graft", ("graft_tokens", "prompt_tokens", "decoded_tokens", "whole"))
            graft = {
                "graft_tokens": _count(g["graft_tokens"], "graft.graft_tokens"),
                "prompt_tokens": _count(g["prompt_tokens"], "graft.prompt_tokens"),
                "decoded_tokens": _count(g["decoded_tokens"], "graft.decoded_tokens"),
                "whole": _flag(g["whole"], "graft.whole"),
            }
        parse_time(d["time"])
        try:
            signer = PublicKey.from_text(d["signer"]).to_text()
        except KvregError:
            raise _fail("signer must be an ed25519:<base64> public key") from None
        return cls(namespace, ref, digest, host, d["witness"], check, graft, d["time"], signer)

    @classmethod
    def from_payload(cls, payload: bytes) -> Receipt:
        """Parse the exact payload bytes; they must be the canonical JSON of a valid receipt."""
        doc = parse_json_object(
            payload, what="receipt", max_bytes=MAX_RECEIPT_BYTES, error=ReceiptInvalidError
        )
        receipt = cls.from_doc(doc)
        if canonical_json(doc, error=ReceiptInvalidError) != bytes(payload):
            raise _fail("the payload is not canonical JSON (RFC 8785)")
        return receipt


@dataclass(frozen=True)
class OpenedReceipt:
    """A receipt whose signature verified with the key it names."""

    receipt: Receipt
    envelope: Envelope
    digest: Digest  # SHA-256 of the payload bytes
    raw: bytes  # the envelope exactly as received


def open_receipt(data: bytes) -> OpenedReceipt:
    """Parse a receipt envelope and check its signature with the key the receipt names.

    Raises ``ReceiptInvalidError`` (malformed; ``EnvelopeInvalidError`` for a bad DSSE
    envelope) or ``SignatureError`` (no signature verifies with ``signer``)."""
    if len(data) > 4 * MAX_RECEIPT_BYTES:
        raise _fail(f"the envelope is more than {4 * MAX_RECEIPT_BYTES} bytes")
    envelope = Envelope.from_json_bytes(data)
    if envelope.payload_type != RECEIPT_PAYLOAD_TYPE:
        raise _fail(f"payload type {envelope.payload_type!r} is not {RECEIPT_PAYLOAD_TYPE!r}")
    receipt = Receipt.from_payload(envelope.payload)
    if not envelope.signatures:
        raise SignatureError("the receipt has no signatures")
    key = receipt.signer_key
    message = pae(envelope.payload_type, envelope.payload)
    for sig in envelope.signatures:
        try:
            key.verify(sig.sig, message)
        except SignatureError:
            continue
        return OpenedReceipt(receipt, envelope, Digest.of_bytes(envelope.payload), bytes(data))
    raise SignatureError(
        f"no signature on the receipt verifies with its signer {key.keyid}",
        hint="the receipt was changed after it was signed, or signed with another key",
        keyid=key.keyid,
    )
