"""The one error hierarchy of kvreg, with stable codes and exit statuses.

Every failure that kvreg reports to a user or to a script is a ``KvregError``.
Each class carries:

- ``code``: a stable upper-case string (``DIGEST_MISMATCH``), the same in the CLI's
  ``--json`` output and in the registry's HTTP error bodies. Codes are a contract:
  never rename one, only add.
- ``exit_code``: the CLI exit status (docs/design.md, "Contracts the parts rely on"): 1 error, 2 usage,
  3 integrity or signature failure.

Security paths raise one of these; they never return a bool for the caller to
forget to check. This module does not format messages for terminals: that is the
CLI's job (``kvreg.console``).
"""

from __future__ import annotations

import errno
from typing import Any, ClassVar

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTEGRITY = 3

#: The HTTP response header in which the registry repeats an error's ``code`` (the
#: client reads it before the body; both sides take the name from here).
ERROR_CODE_HEADER = "X-Kvreg-Error-Code"


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


class LogInconsistentError(MerkleProofError):
    """A registry's audit log contradicts what this client verified before, or its own proofs
    (it shrank, forked, or was rewritten)."""

    code = "LOG_INCONSISTENT"


class RefRollbackError(LogInconsistentError):
    """A registry served a ref at an older value than its own signed log, or than this client saw
    before: the ref's entry is not the ref's latest change (per-ref rollback)."""

    code = "REF_ROLLBACK"


class CheckpointStaleError(LogInconsistentError):
    """A registry's signed checkpoint is older than the remote's maximum checkpoint age, or no
    longer dated after this client saw dated ones: the registry may withhold newer state (freeze)."""

    code = "CHECKPOINT_STALE"


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


class TagImmutableError(RefConflictError):
    """The ref is an immutable tag: it can be neither moved nor deleted."""

    code = "TAG_IMMUTABLE"


class KeyFileError(KvregError):
    """A key file is missing, unreadable, malformed or has unsafe permissions."""

    code = "KEY_INVALID"


class ConfigError(KvregError):
    """A configuration value or file is invalid."""

    code = "CONFIG_INVALID"


class EngineNotInstalledError(ConfigError):
    """A command needs the engine (torch, transformers) and this install has no ``engine`` extra."""

    code = "ENGINE_NOT_INSTALLED"


# The engine extra's top-level modules (pyproject.toml, [project.optional-dependencies] engine).
ENGINE_MODULES = frozenset(
    {"torch", "transformers", "safetensors", "tokenizers", "numpy", "gguf", "accelerate"}
)


def from_missing_module(exc: ModuleNotFoundError) -> EngineNotInstalledError | None:
    """The typed error for an engine module that is not installed, else ``None`` (a real bug)."""
    name = (exc.name or "").partition(".")[0]
    if name not in ENGINE_MODULES:
        return None
    return EngineNotInstalledError(
        f"this command runs the model, and {name!r} is not installed here (kvreg without its engine)",
        hint="install the engine: pip install torch, then pip install 'kvreg[engine]'"
        " (docs/getting-started/install.md)",
        module=name,
    )


class ModelError(KvregError):
    """A model directory cannot be used (missing files, unsupported architecture)."""

    code = "MODEL_INVALID"


class FingerprintMismatchError(KvregError):
    """The local model, tokenizer or config differs from the one an artifact was made with."""

    code = "FINGERPRINT_MISMATCH"


class TokenMismatchError(KvregError):
    """An artifact's tokens do not match the prompt it was routed to."""

    code = "TOKENS_MISMATCH"


class RouteMismatchError(TokenMismatchError):
    """The router refused an artifact: its tokens are not the prompt's (a misrouted artifact).

    The request falls back to plain generation; ``details['first_difference']`` is the
    first position where they differ."""

    code = "ROUTE_MISMATCH"


class UnverifiedArtifactError(KvregError):
    """Knowledge routing needs an artifact whose signed verification verdict is ``pass``."""

    code = "ARTIFACT_UNVERIFIED"


class StoreError(KvregError):
    """The local store is damaged or cannot be written."""

    code = "STORE_ERROR"


class DiskFullError(StoreError):
    """The file system has no space (or no quota) left for a write."""

    code = "DISK_FULL"


class FileAccessError(StoreError):
    """The operating system refused a file operation: permission denied, a read-only file system."""

    code = "FILE_ACCESS"


_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_ACCESS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def from_os_error(exc: OSError) -> StoreError | None:
    """The typed error for an ``OSError`` that says the machine refused a write or a read (no
    space, no quota, no permission, a read-only file system), naming the file; ``None`` for any
    other ``OSError`` (those are not the environment's refusals, and stay unexpected)."""
    where = f" ({exc.filename})" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno in _NO_SPACE:
        return DiskFullError(
            f"{reason}{where}: the write was not completed",
            hint="free space on that file system; in a kvreg store, 'kvreg gc' and 'kvreg evict' make room",
        )
    if exc.errno in _NO_ACCESS:
        return FileAccessError(f"the file system refused the operation{where}: {reason}")
    return None


# --- registry protocol (HTTP); see docs/protocol.md for the status of each code ------


class RequestInvalidError(UsageError):
    """A request to the registry is malformed (bad JSON, fields, headers)."""

    code = "REQUEST_INVALID"


class PreconditionRequiredError(UsageError):
    """A ref change came without ``If-Match`` or ``If-None-Match: *``."""

    code = "PRECONDITION_REQUIRED"


class BodyTooLargeError(UsageError):
    """A request body, or a list in it, is over the registry's limit."""

    code = "BODY_TOO_LARGE"


class RangeNotSatisfiableError(UsageError):
    """A ``Range`` header asks for bytes outside the object."""

    code = "RANGE_NOT_SATISFIABLE"


class AuthError(KvregError):
    """Base class of authentication and authorization failures."""

    code = "AUTH"


class UnauthenticatedError(AuthError):
    """No token, or a token the registry does not know (unknown, revoked, expired): HTTP 401."""

    code = "UNAUTHENTICATED"


class UserDisabledError(UnauthenticatedError):
    """The token is known, but its user is disabled (offboarded): HTTP 401. Every token and web
    session of the user is refused until a server admin enables the user again; a new token
    does not help."""

    code = "USER_DISABLED"


class ForbiddenError(AuthError):
    """The token is valid but lacks the role this needs: HTTP 403."""

    code = "FORBIDDEN"


class NamespaceNotFoundError(NotFoundError):
    code = "NAMESPACE_UNKNOWN"


class EnvelopeNotFoundError(NotFoundError):
    code = "ENVELOPE_UNKNOWN"


class KeyNotFoundError(NotFoundError):
    code = "KEY_UNKNOWN"


class UploadNotFoundError(NotFoundError):
    code = "UPLOAD_UNKNOWN"


class UserNotFoundError(NotFoundError):
    code = "USER_UNKNOWN"


class TokenNotFoundError(NotFoundError):
    code = "TOKEN_UNKNOWN"


class ManifestUnknownError(KvregError):
    """A ref would point at a manifest that has no envelope in the namespace."""

    code = "MANIFEST_UNKNOWN"


class ObjectsMissingError(KvregError):
    """A manifest references objects the namespace does not hold (``details['missing']``)."""

    code = "OBJECTS_MISSING"


class AlreadyExistsError(KvregError):
    """A namespace, user or key that exists already."""

    code = "ALREADY_EXISTS"


class InUseError(KvregError):
    """Something still referenced (an envelope a ref points at) cannot be deleted."""

    code = "IN_USE"


class RemoteError(KvregError):
    """The registry answered with an error this client does not know, or not at all."""

    code = "REMOTE_ERROR"


class UnavailableError(RemoteError):
    """The registry, its database or its storage is unreachable (retried with backoff first)."""

    code = "UNAVAILABLE"


class RateLimitedError(UnavailableError):
    """Too many failed authentications from this client or with this token (HTTP 429 with
    ``Retry-After``; ``details["retry_after"]`` in seconds). The client retries it like a 503."""

    code = "RATE_LIMITED"


class InternalServerError(RemoteError):
    """The registry hit a bug (HTTP 500); the body never carries a stack trace."""

    code = "INTERNAL"


# --- compliance: legal holds, retention, graft receipts (docs/protocol.md) ----------------


class LegalHoldError(ForbiddenError):
    """A legal hold protects what this would delete or move (HTTP 403); the attempt is logged.

    ``details``: ``holds`` (the ids of the holds in the way), ``action`` and what it named."""

    code = "LEGAL_HOLD"


class HoldNotFoundError(NotFoundError):
    code = "HOLD_UNKNOWN"


class ReceiptNotFoundError(NotFoundError):
    code = "RECEIPT_UNKNOWN"


class ReceiptInvalidError(IntegrityError):
    """A graft receipt is malformed: not a DSSE envelope of a kvreg receipt, or a payload that
    breaks the receipt schema (docs/protocol.md)."""

    code = "RECEIPT_INVALID"


def error_classes() -> dict[str, type[KvregError]]:
    """Every error class by its stable code (the client maps HTTP error bodies with it)."""
    out: dict[str, type[KvregError]] = {}
    pending: list[type[KvregError]] = [KvregError]
    while pending:
        cls = pending.pop()
        out.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return out
