"""The one error hierarchy of kvreg, with stable codes and exit statuses.

Every failure that kvreg reports to a user or to a script is a ``KvregError``.
Each class carries:

- ``code``: a stable upper-case string (``DIGEST_MISMATCH``), the same in the CLI's
  ``--json`` output and in the registry's HTTP error bodies. Codes are a contract:
  never rename one, only add.
- ``exit_code``: the CLI exit status (DESIGN.md §4): 1 error, 2 usage,
  3 integrity or signature failure.

Security paths raise one of these; they never return a bool for the caller to
forget to check. This module does not format messages for terminals: that is the
CLI's job (``kvreg.cli.output``).
"""

from __future__ import annotations

from typing import Any, ClassVar

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTEGRITY = 3


class KvregError(Exception):
    """Base class of every error kvreg raises on purpose."""

    code: ClassVar[str] = "KVREG_ERROR"
    exit_code: ClassVar[int] = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details: dict[str, Any] = details

    def diagnostics(self) -> str:
        """A human-readable explanation, with the hint if there is one."""
        text = f"{self.message}"
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``--json`` output and HTTP error bodies."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint:
            body["hint"] = self.hint
        if self.details:
            body["details"] = self.details
        return body


# --- usage (exit 2) -------------------------------------------------------------


class UsageError(KvregError):
    """The command or its arguments are wrong; nothing was attempted."""

    code = "USAGE"
    exit_code = EXIT_USAGE


class InvalidNameError(UsageError):
    """A ref, namespace or tag name is not allowed (traversal, bad characters)."""

    code = "NAME_INVALID"


class InvalidDigestError(UsageError):
    """A string is not a well-formed ``sha256:<64 hex>`` digest."""

    code = "DIGEST_INVALID"


# --- integrity and signatures (exit 3) ------------------------------------------


class IntegrityError(KvregError):
    """Stored or received bytes are not what they claim to be."""

    code = "INTEGRITY"
    exit_code = EXIT_INTEGRITY


class DigestMismatchError(IntegrityError):
    """Bytes hash to another digest than the one expected."""

    code = "DIGEST_MISMATCH"


class MerkleProofError(IntegrityError):
    """A Merkle root, inclusion proof or consistency proof does not verify."""

    code = "PROOF_INVALID"


class ManifestInvalidError(IntegrityError):
    """A manifest is malformed or violates the schema."""

    code = "MANIFEST_INVALID"


class ChunkInvalidError(IntegrityError):
    """A KV chunk is malformed or does not match its manifest entry."""

    code = "CHUNK_INVALID"


class EnvelopeInvalidError(IntegrityError):
    """A DSSE envelope is malformed."""

    code = "ENVELOPE_INVALID"


class SignatureError(IntegrityError):
    """A signature does not verify."""

    code = "SIGNATURE_INVALID"


class UntrustedKeyError(SignatureError):
    """A signature verifies, but the key is not trusted for this namespace."""

    code = "KEY_UNTRUSTED"


class WitnessMismatchError(IntegrityError):
    """The witness probe after a graft produced other logits than the deposit."""

    code = "WITNESS_MISMATCH"


class NotByteExactError(IntegrityError):
    """A check found that a graft is not byte-exact against a fresh computation."""

    code = "NOT_BYTE_EXACT"


# --- other errors (exit 1) -------------------------------------------------------


class NotFoundError(KvregError):
    """Something asked for does not exist."""

    code = "NOT_FOUND"


class ObjectNotFoundError(NotFoundError):
    """No object with this digest is in the store."""

    code = "OBJECT_UNKNOWN"


class RefNotFoundError(NotFoundError):
    """No ref with this name exists."""

    code = "REF_UNKNOWN"


class RefConflictError(KvregError):
    """A compare-and-swap on a ref failed: it moved since it was read, or is a tag."""

    code = "REF_CONFLICT"


class KeyFileError(KvregError):
    """A key file is missing, unreadable, malformed or has unsafe permissions."""

    code = "KEY_INVALID"


class ConfigError(KvregError):
    """A configuration value or file is invalid."""

    code = "CONFIG_INVALID"


class ModelError(KvregError):
    """A model directory cannot be used (missing files, unsupported architecture)."""

    code = "MODEL_INVALID"


class FingerprintMismatchError(KvregError):
    """The local model, tokenizer or config differs from the one an artifact was made with."""

    code = "FINGERPRINT_MISMATCH"


class TokenMismatchError(KvregError):
    """An artifact's tokens do not match the prompt it was routed to."""

    code = "TOKENS_MISMATCH"


class StoreError(KvregError):
    """The local store is damaged or cannot be written."""

    code = "STORE_ERROR"
