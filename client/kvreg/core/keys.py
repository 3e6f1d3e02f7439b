"""Ed25519 signing and public keys.

``SigningKey`` holds a private key and converts it to and from unencrypted PEM
(PKCS#8); its files are read and written by ``kvreg.fileio.keyfiles``.
``PublicKey`` is the verifying half; besides PEM
(SubjectPublicKeyInfo) it has a compact text form ``ed25519:<base64 of the 32
raw bytes>`` used in trust policies and on the command line, and a ``keyid``
``sha256:<hex of SHA-256 of the 32 raw bytes>``.

``PublicKey.verify`` returns nothing and raises ``SignatureError``. This module
does not decide which keys are trusted for what (``kvreg.core.trust``) and does
not know about envelopes (``kvreg.core.envelope``). It never logs key material.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kvreg.core.errors import KeyFileError, SignatureError

__all__ = ["KEY_TEXT_PREFIX", "PublicKey", "SigningKey"]

KEY_TEXT_PREFIX = "ed25519:"
_RAW_SIZE = 32
_SIGNATURE_SIZE = 64


@dataclass(frozen=True, slots=True)
class PublicKey:
    """An Ed25519 public key, compared and hashed by its 32 raw bytes."""

    raw: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != _RAW_SIZE:
            raise KeyFileError(f"an Ed25519 public key is {_RAW_SIZE} raw bytes")

    @classmethod
    def from_raw(cls, raw: bytes) -> PublicKey:
        return cls(bytes(raw))

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        """Parse ``ed25519:<base64 of 32 raw bytes>`` (standard alphabet, padded)."""
        hint = "expected 'ed25519:' followed by the standard base64 of 32 bytes (44 characters)"
        if not isinstance(text, str) or not text.startswith(KEY_TEXT_PREFIX):
            raise KeyFileError(f"not an ed25519 public key: {text!r}", hint=hint)
        body = text[len(KEY_TEXT_PREFIX) :]
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as e:
            raise KeyFileError(f"public key {text!r} is not valid base64", hint=hint) from e
        if len(raw) != _RAW_SIZE or base64.b64encode(raw).decode("ascii") != body:
            raise KeyFileError(f"public key {text!r} is not the canonical base64 of 32 bytes", hint=hint)
        return cls(raw)

    def to_text(self) -> str:
        return KEY_TEXT_PREFIX + base64.b64encode(self.raw).decode("ascii")

    @classmethod
    def from_pem(cls, data: bytes) -> PublicKey:
        """Parse a PEM SubjectPublicKeyInfo holding an Ed25519 key."""
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError, UnsupportedAlgorithm) as e:
            raise KeyFileError("not a PEM public key") from e
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f"public key is {type(key).__name__}, not Ed25519")
        return cls(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))

    def to_pem(self) -> bytes:
        return self._key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def keyid(self) -> str:
        """``sha256:<hex>`` of the 32 raw public bytes."""
        return "sha256:" + hashlib.sha256(self.raw).hexdigest()

    def _key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.raw)

    def verify(self, signature: bytes, data: bytes) -> None:
        """Raise ``SignatureError`` unless ``signature`` is this key's signature of ``data``."""
        if not isinstance(signature, bytes | bytearray) or len(signature) != _SIGNATURE_SIZE:
            raise SignatureError(f"an Ed25519 signature is {_SIGNATURE_SIZE} bytes", keyid=self.keyid)
        try:
            self._key().verify(bytes(signature), bytes(data))
        except InvalidSignature as e:
            raise SignatureError(f"signature does not verify with key {self.keyid}", keyid=self.keyid) from e

    def __repr__(self) -> str:
        return f"PublicKey({self.to_text()!r})"


class SigningKey:
    """An Ed25519 private key. ``repr`` shows only the public keyid."""

    __slots__ = ("_key",)

    def __init__(self, key: Ed25519PrivateKey) -> None:
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"signing key must be Ed25519, not {type(key).__name__}")
        self._key = key

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """The key whose 32-byte RFC 8032 private seed is ``seed`` (tests, vectors)."""
        if len(seed) != _RAW_SIZE:
            raise KeyFileError(f"an Ed25519 seed is {_RAW_SIZE} bytes")
        return cls(Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @classmethod
    def from_pem(cls, data: bytes) -> SigningKey:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as e:
            raise KeyFileError("not an unencrypted PEM (PKCS#8) private key") from e
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"private key is {type(key).__name__}, not Ed25519")
        return cls(key)

    def to_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def public_key(self) -> PublicKey:
        return PublicKey(
            self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data``."""
        return self._key.sign(bytes(data))

    def __repr__(self) -> str:
        return f"SigningKey(keyid={self.public_key.keyid!r})"
