"""DSSE v1 envelopes around manifests: sign, serialize, parse, verify.

The manifest bytes are signed with Ed25519 over the DSSE pre-authentication
encoding (https://github.com/secure-systems-lab/dsse, protocol.md)::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with ``LEN`` the ASCII decimal byte length and ``type`` UTF-8. The payload type is
``application/vnd.kvreg.manifest.v1+json``. The JSON form is the standard DSSE
envelope ``{"payload": b64, "payloadType": str, "signatures": [{"keyid": str,
"sig": b64}]}``, written as RFC 8785 canonical JSON. Parsing is strict: size
capped, no unknown fields, base64 padded and canonical (DSSE requires accepting
both the standard and the URL-safe alphabet; one string may not mix them).

The manifest digest is the SHA-256 of the exact payload bytes; nothing is ever
re-serialized to verify. ``verify_envelope`` returns the ``Manifest`` parsed from
those bytes only after a signature verified with a key that the trust policy
allows for the namespace; otherwise it raises (``EnvelopeInvalidError``,
``SignatureError``, ``UntrustedKeyError``). Key ids are unauthenticated hints
and take no part in the decision: every signature is tried against every
candidate key.

This module does not fetch envelopes or keys, and does not check that the
objects a manifest references exist.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvreg.core.canonical import canonical_json, parse_json_object
from kvreg.core.digest import Digest
from kvreg.core.errors import EnvelopeInvalidError, SignatureError, UntrustedKeyError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.manifest_schema import MAX_MANIFEST_BYTES
from kvreg.core.names import validate_namespace
from kvreg.core.trust import TrustPolicy

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "MAX_SIGNATURES",
    "PAYLOAD_TYPE",
    "Envelope",
    "EnvelopeSignature",
    "pae",
    "sign_envelope",
    "verify_envelope",
]

PAYLOAD_TYPE = "application/vnd.kvreg.manifest.v1+json"
#: base64 of the largest manifest, plus room for signatures.
MAX_ENVELOPE_BYTES = (MAX_MANIFEST_BYTES // 3 + 1) * 4 + 1024 * 1024
MAX_SIGNATURES = 32
_MAX_KEYID_CHARS = 256


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding of ``payload_type`` and ``payload``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), bytes(payload))


class EnvelopeSignature(NamedTuple):
    """One DSSE signature: ``keyid`` (``""`` when absent; a hint only) and the raw ``sig``."""

    keyid: str
    sig: bytes


def _b64decode(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise EnvelopeInvalidError(f"envelope {what} must be a base64 string")
    urlsafe = "-" in value or "_" in value
    if urlsafe and ("+" in value or "/" in value):
        raise EnvelopeInvalidError(f"envelope {what} mixes the standard and URL-safe base64 alphabets")
    altchars = b"-_" if urlsafe else None
    try:
        raw = base64.b64decode(value, altchars=altchars, validate=True)
    except (binascii.Error, ValueError) as e:
        raise EnvelopeInvalidError(f"envelope {what} is not valid base64: {e}") from e
    if base64.b64encode(raw, altchars=altchars).decode("ascii") != value:
        raise EnvelopeInvalidError(f"envelope {what} is not canonical base64 (padding or trailing bits)")
    return raw


@dataclass(frozen=True, slots=True)
class Envelope:
    """A DSSE envelope: payload type, exact payload bytes, signatures."""

    payload_type: str
    payload: bytes
    signatures: tuple[EnvelopeSignature, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.payload_type, str):
            raise EnvelopeInvalidError("envelope payloadType must be a string")
        if not isinstance(self.payload, bytes):
            raise EnvelopeInvalidError("envelope payload must be bytes")
        sigs: list[EnvelopeSignature] = []
        for item in self.signatures:
            keyid, sig = item
            if not isinstance(keyid, str) or not isinstance(sig, bytes | bytearray):
                raise EnvelopeInvalidError("an envelope signature is a (keyid: str, sig: bytes) pair")
            sigs.append(EnvelopeSignature(keyid, bytes(sig)))
        object.__setattr__(self, "signatures", tuple(sigs))

    @property
    def manifest_digest(self) -> Digest:
        """SHA-256 of the exact payload bytes."""
        return Digest.of_bytes(self.payload)

    def with_signature(self, key: SigningKey) -> Envelope:
        """A copy with one more signature by ``key`` over the same payload."""
        sig = EnvelopeSignature(key.public_key.keyid, key.sign(pae(self.payload_type, self.payload)))
        return Envelope(self.payload_type, self.payload, (*self.signatures, sig))

    def to_dict(self) -> dict[str, Any]:
        sigs: list[dict[str, str]] = []
        for s in self.signatures:
            entry = {"sig": base64.b64encode(s.sig).decode("ascii")}
            if s.keyid:
                entry["keyid"] = s.keyid
            sigs.append(entry)
        return {
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "payloadType": self.payload_type,
            "signatures": sigs,
        }

    def to_json_bytes(self) -> bytes:
        """The standard DSSE JSON envelope as RFC 8785 canonical JSON."""
        return canonical_json(self.to_dict(), error=EnvelopeInvalidError)

    @classmethod
    def from_json_bytes(cls, data: bytes | bytearray | memoryview) -> Envelope:
        """Parse a DSSE JSON envelope strictly; raise ``EnvelopeInvalidError``."""
        doc = parse_json_object(
            data, what="envelope", max_bytes=MAX_ENVELOPE_BYTES, error=EnvelopeInvalidError
        )
        unknown = sorted(set(doc) - {"payload", "payloadType", "signatures"})
        if unknown:
            raise EnvelopeInvalidError(f"envelope has unknown fields {unknown}")
        for key in ("payload", "payloadType", "signatures"):
            if key not in doc:
                raise EnvelopeInvalidError(f"envelope is missing {key!r}")
        payload_type = doc["payloadType"]
        if not isinstance(payload_type, str):
            raise EnvelopeInvalidError("envelope payloadType must be a string")
        payload = _b64decode(doc["payload"], "payload")
        raw_sigs = doc["signatures"]
        if not isinstance(raw_sigs, list):
            raise EnvelopeInvalidError("envelope signatures must be an array")
        if len(raw_sigs) > MAX_SIGNATURES:
            raise EnvelopeInvalidError(f"envelope has {len(raw_sigs)} signatures, more than {MAX_SIGNATURES}")
        sigs: list[EnvelopeSignature] = []
        for i, s in enumerate(raw_sigs):
            if not isinstance(s, dict):
                raise EnvelopeInvalidError(f"envelope signatures[{i}] must be an object")
            extra = sorted(set(s) - {"sig", "keyid"})
            if extra:
                raise EnvelopeInvalidError(f"envelope signatures[{i}] has unknown fields {extra}")
            if "sig" not in s:
                raise EnvelopeInvalidError(f"envelope signatures[{i}] is missing 'sig'")
            keyid = s.get("keyid", "")
            if not isinstance(keyid, str) or len(keyid) > _MAX_KEYID_CHARS:
                raise EnvelopeInvalidError(f"envelope signatures[{i}].keyid must be a short string")
            sigs.append(EnvelopeSignature(keyid, _b64decode(s["sig"], f"signatures[{i}].sig")))
        return cls(payload_type, payload, tuple(sigs))


def sign_envelope(payload: bytes, key: SigningKey, *, payload_type: str = PAYLOAD_TYPE) -> Envelope:
    """Sign ``payload`` (the exact manifest bytes) with ``key`` into a new envelope."""
    return Envelope(payload_type, bytes(payload), ()).with_signature(key)


def _verifying_key(envelope: Envelope, keys: Sequence[PublicKey]) -> PublicKey | None:
    message = pae(envelope.payload_type, envelope.payload)
    for s in envelope.signatures:
        for key in keys:
            try:
                key.verify(s.sig, message)
            except SignatureError:
                continue
            return key
    return None


def verify_envelope(
    envelope: Envelope,
    policy: TrustPolicy,
    namespace: str,
    *,
    known_keys: Iterable[PublicKey] = (),
) -> Manifest:
    """Verify ``envelope`` for ``namespace`` and return its manifest.

    Succeeds when at least one signature verifies with a key that ``policy``
    trusts for ``namespace``; the manifest is then parsed from the exact payload
    bytes (its digest is ``envelope.manifest_digest``). ``known_keys`` are extra,
    untrusted keys (such as ones a registry announces) used only to tell the user
    *which* untrusted key signed.

    Raises ``EnvelopeInvalidError`` for another payload type, ``UntrustedKeyError``
    when valid signatures come only from keys not trusted for the namespace,
    ``SignatureError`` when no signature verifies with any known key, and
    ``ManifestInvalidError``/``MerkleProofError`` for a bad manifest.
    """
    validate_namespace(namespace)
    if envelope.payload_type != PAYLOAD_TYPE:
        raise EnvelopeInvalidError(
            f"envelope payload type is {envelope.payload_type!r}, expected {PAYLOAD_TYPE!r}",
        )
    if not envelope.signatures:
        raise SignatureError("envelope has no signatures")
    trusted = policy.keys_for(namespace)
    if _verifying_key(envelope, trusted) is not None:
        return Manifest.from_bytes(envelope.payload)

    trusted_ids = {k.keyid for k in trusted}
    others: list[PublicKey] = []
    seen = set(trusted_ids)
    for key in [*policy.all_keys(), *known_keys]:
        if key.keyid not in seen:
            seen.add(key.keyid)
            others.append(key)
    signer = _verifying_key(envelope, others)
    if signer is not None:
        raise UntrustedKeyError(
            f"the manifest for namespace {namespace!r} is signed by key {signer.keyid}, "
            f"which is not trusted for {namespace!r}",
            hint=f"if you trust this signer for {namespace!r}: "
            f"kvreg trust add {namespace} {signer.to_text()}",
            keyid=signer.keyid,
            namespace=namespace,
        )
    claimed = sorted({s.keyid for s in envelope.signatures if s.keyid})
    if not trusted:
        hint = (
            f"no key is trusted for {namespace!r}; add the signer's key: kvreg trust add {namespace} PUBKEY"
        )
    else:
        hint = f"if the signer is legitimate, add their public key: kvreg trust add {namespace} PUBKEY"
    raise SignatureError(
        f"no signature on the manifest for namespace {namespace!r} verifies with a trusted key"
        + (f" (signatures claim key ids {', '.join(claimed)})" if claimed else ""),
        hint=hint,
        namespace=namespace,
        claimed_keyids=claimed,
    )
