"""DSSE envelopes: PAE bytes, JSON form, strict parsing, verification outcomes."""

from __future__ import annotations

import base64
import json

import pytest

from kvreg.core.digest import Digest
from kvreg.core.envelope import PAYLOAD_TYPE, Envelope, EnvelopeSignature, pae, sign_envelope, verify_envelope
from kvreg.core.errors import (
    EnvelopeInvalidError,
    InvalidNameError,
    ManifestInvalidError,
    SignatureError,
    UntrustedKeyError,
)
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.trust import TrustPolicy

from .manifest_helpers import make_doc

# RFC 8032 §7.1 test 1 key, also key "A" of the DSSE test vectors.
SEED_A = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
IN_TOTO = "application/vnd.in-toto+json"
IN_TOTO_PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1"}'


def test_pae_spec_example() -> None:
    # DSSE protocol.md, "Test Vectors".
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_golden_bytes() -> None:
    assert pae(IN_TOTO, IN_TOTO_PAYLOAD) == b"DSSEv1 28 application/vnd.in-toto+json 43 " + IN_TOTO_PAYLOAD
    assert pae(IN_TOTO, b"") == b"DSSEv1 28 application/vnd.in-toto+json 0 "
    # LEN counts UTF-8 bytes, not characters
    assert pae("application/vnd.exämple+json", b"x") == b"DSSEv1 29 application/vnd.ex\xc3\xa4mple+json 1 x"
    assert pae(PAYLOAD_TYPE, b"{}") == b"DSSEv1 38 application/vnd.kvreg.manifest.v1+json 2 {}"


def test_dsse_vector_signatures_verify() -> None:
    # From the DSSE repository's test vectors (Ed25519 is deterministic, so signing reproduces them).
    key = SigningKey.from_seed(SEED_A)
    sig = base64.b64decode(
        "2WAfaHm5jluo0w+0rk8uVkluELJYWjSmU9x7EUzx+AyteDGJ4/nqyJXfmAUVFIAoQafWm7AxBZNw5M9ixNHiCA=="
    )
    assert sign_envelope(IN_TOTO_PAYLOAD, key, payload_type=IN_TOTO).signatures[0].sig == sig
    key.public_key.verify(sig, pae(IN_TOTO, IN_TOTO_PAYLOAD))
    # URL-safe base64 must be accepted.
    env = Envelope.from_json_bytes(
        b'{"payload":"-_-_Pj8=","payloadType":"application/vnd.in-toto+json","signatures":[{"keyid":"A",'
        b'"sig":"P-_KHICeR7tI6S_YyejJTRtrXhcQyQ2LYPaL8h90KjC9qN8HU_svOQ6TuDOT1HIrsGW886DbWNWcCmX5twLrAw=="}]}'
    )
    assert env.payload == bytes.fromhex("fbffbf3e3f")
    key.public_key.verify(env.signatures[0].sig, pae(env.payload_type, env.payload))


def _setup(namespace: str = "aime25") -> tuple[SigningKey, Manifest, Envelope, TrustPolicy]:
    key = SigningKey.generate()
    m = Manifest.from_dict(make_doc(10, 4))
    env = sign_envelope(m.raw_bytes, key)
    policy = TrustPolicy()
    policy.allow(namespace, key.public_key)
    return key, m, env, policy


def test_sign_serialize_parse_verify() -> None:
    key, m, env, policy = _setup()
    assert env.payload_type == PAYLOAD_TYPE
    assert env.signatures == (EnvelopeSignature(key.public_key.keyid, env.signatures[0].sig),)
    assert env.manifest_digest == m.digest == Digest.of_bytes(m.raw_bytes)
    data = env.to_json_bytes()
    doc = json.loads(data)
    assert set(doc) == {"payload", "payloadType", "signatures"}
    assert doc["signatures"][0]["keyid"] == key.public_key.keyid
    assert data == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()  # canonical
    parsed = Envelope.from_json_bytes(data)
    assert parsed == env
    got = verify_envelope(parsed, policy, "aime25")
    assert got.raw_bytes == m.raw_bytes and got.digest == parsed.manifest_digest


def test_manifest_comes_from_exact_payload_bytes() -> None:
    key = SigningKey.generate()
    payload = json.dumps(make_doc(10, 4), indent=3).encode()  # valid but not canonical
    env = sign_envelope(payload, key)
    policy = TrustPolicy()
    policy.allow("*", key.public_key)
    m = verify_envelope(env, policy, "anything")
    assert m.raw_bytes == payload
    assert m.digest == Digest.of_bytes(payload) == env.manifest_digest
    assert m.to_bytes() != payload


def test_tampered_payload() -> None:
    _, m, env, policy = _setup()
    tampered = Envelope(env.payload_type, m.raw_bytes.replace(b'"size":42', b'"size":43'), env.signatures)
    assert tampered.payload != env.payload
    with pytest.raises(SignatureError) as info:
        verify_envelope(tampered, policy, "aime25")
    assert not isinstance(info.value, UntrustedKeyError)


def test_tampered_signature() -> None:
    _, _, env, policy = _setup()
    sig = bytearray(env.signatures[0].sig)
    sig[10] ^= 0x40
    tampered = Envelope(
        env.payload_type, env.payload, (EnvelopeSignature(env.signatures[0].keyid, bytes(sig)),)
    )
    with pytest.raises(SignatureError):
        verify_envelope(tampered, policy, "aime25")
    truncated = Envelope(env.payload_type, env.payload, (EnvelopeSignature("", env.signatures[0].sig[:-1]),))
    with pytest.raises(SignatureError):
        verify_envelope(truncated, policy, "aime25")
    with pytest.raises(SignatureError, match="no signatures"):
        verify_envelope(Envelope(env.payload_type, env.payload, ()), policy, "aime25")


def test_wrong_payload_type() -> None:
    key, m, _, policy = _setup()
    env = sign_envelope(m.raw_bytes, key, payload_type="application/json")
    with pytest.raises(EnvelopeInvalidError, match="payload type"):
        verify_envelope(env, policy, "aime25")
    # relabelling the type breaks the signature, which covers it
    relabelled = Envelope(PAYLOAD_TYPE, env.payload, env.signatures)
    with pytest.raises(SignatureError):
        verify_envelope(relabelled, policy, "aime25")


def test_untrusted_key_in_other_namespace() -> None:
    key, _, env, policy = _setup("aime25")
    with pytest.raises(UntrustedKeyError) as info:
        verify_envelope(env, policy, "other")
    err = info.value
    assert key.public_key.keyid in err.message
    assert err.hint is not None and f"kvreg trust add other {key.public_key.to_text()}" in err.hint
    assert err.details["keyid"] == key.public_key.keyid
    assert err.exit_code == 3


def test_untrusted_known_key() -> None:
    key, _, env, _ = _setup()
    empty = TrustPolicy()
    with pytest.raises(UntrustedKeyError, match=key.public_key.keyid):
        verify_envelope(env, empty, "aime25", known_keys=[key.public_key])
    # an entirely unknown signer cannot be verified at all
    with pytest.raises(SignatureError) as info:
        verify_envelope(env, empty, "aime25")
    assert not isinstance(info.value, UntrustedKeyError)
    assert "kvreg trust add aime25" in (info.value.hint or "")
    assert key.public_key.keyid in info.value.message


def test_keyid_is_only_a_hint() -> None:
    key, _, env, policy = _setup()
    lying = Envelope(
        env.payload_type, env.payload, (EnvelopeSignature("sha256:" + "0" * 64, env.signatures[0].sig),)
    )
    verify_envelope(lying, policy, "aime25")  # verifies by the key, whatever the keyid claims
    other = SigningKey.generate()
    forged = sign_envelope(env.payload, other)
    forged = Envelope(
        forged.payload_type,
        forged.payload,
        (EnvelopeSignature(key.public_key.keyid, forged.signatures[0].sig),),
    )
    with pytest.raises(SignatureError):
        verify_envelope(forged, policy, "aime25")


def test_one_good_signature_among_others_suffices() -> None:
    key, _, env, policy = _setup()
    stranger = SigningKey.generate()
    both = sign_envelope(env.payload, stranger).with_signature(key)
    assert len(both.signatures) == 2
    verify_envelope(both, policy, "aime25")


def test_wildcard_trust_and_bad_namespace() -> None:
    key, _, env, _ = _setup()
    policy = TrustPolicy()
    policy.allow("*", key.public_key)
    verify_envelope(env, policy, "any-namespace")
    with pytest.raises(InvalidNameError):
        verify_envelope(env, policy, "../x")


def test_invalid_manifest_in_valid_envelope() -> None:
    key = SigningKey.generate()
    env = sign_envelope(b'{"schema": "kvreg.manifest/v1"}', key)
    policy = TrustPolicy()
    policy.allow("aime25", key.public_key)
    with pytest.raises(ManifestInvalidError):
        verify_envelope(env, policy, "aime25")


def _env_json(**overrides: object) -> bytes:
    doc: dict[str, object] = {
        "payload": base64.b64encode(b"{}").decode(),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": "k", "sig": base64.b64encode(b"s" * 64).decode()}],
    }
    for k, v in overrides.items():
        if v is None:
            doc.pop(k, None)
        else:
            doc[k] = v
    return json.dumps(doc).encode()


def test_parse_accepts_without_keyid() -> None:
    env = Envelope.from_json_bytes(_env_json(signatures=[{"sig": base64.b64encode(b"s" * 64).decode()}]))
    assert env.signatures[0].keyid == ""
    assert "keyid" not in json.loads(env.to_json_bytes())["signatures"][0]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"[]", "JSON object"),
        (b"{", "not valid JSON"),
        (_env_json(payload=None), "missing 'payload'"),
        (_env_json(payloadType=None), "missing 'payloadType'"),
        (_env_json(signatures=None), "missing 'signatures'"),
        (_env_json(extra=1), "unknown fields"),
        (_env_json(payloadType=1), "payloadType"),
        (_env_json(payload=1), "payload"),
        (_env_json(payload="e30"), "base64"),  # no padding
        (_env_json(payload="e3 0="), "base64"),
        (_env_json(payload="e31="), "canonical"),  # non-zero trailing bits
        (_env_json(payload="+-=="), "mixes"),
        (_env_json(signatures={}), "array"),
        (_env_json(signatures=["x"]), "object"),
        (_env_json(signatures=[{}]), "missing 'sig'"),
        (_env_json(signatures=[{"sig": "AAAA", "other": 1}]), "unknown fields"),
        (_env_json(signatures=[{"sig": "AAAA", "keyid": 5}]), "keyid"),
        (_env_json(signatures=[{"sig": "AAA"}]), "base64"),
        (_env_json(signatures=[{"sig": "AAAA"}] * 33), "more than"),
        (b'{"payload":"e30=","payload":"e30=","payloadType":"x","signatures":[]}', "duplicate"),
    ],
)
def test_parse_rejects(data: bytes, match: str) -> None:
    with pytest.raises(EnvelopeInvalidError, match=match):
        Envelope.from_json_bytes(data)


def test_parse_size_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvreg.core.envelope as envelope_mod

    monkeypatch.setattr(envelope_mod, "MAX_ENVELOPE_BYTES", 100)
    with pytest.raises(EnvelopeInvalidError, match="limit"):
        Envelope.from_json_bytes(_env_json(payload=base64.b64encode(b"x" * 200).decode()))


def test_constructor_checks_types() -> None:
    with pytest.raises(EnvelopeInvalidError):
        Envelope(PAYLOAD_TYPE, "text", ())  # type: ignore[arg-type]
    with pytest.raises(EnvelopeInvalidError):
        Envelope(PAYLOAD_TYPE, b"x", ((None, b"s"),))  # type: ignore[arg-type]
