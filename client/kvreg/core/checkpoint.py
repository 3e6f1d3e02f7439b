"""Signed checkpoints of the audit log: C2SP tlog-checkpoint inside a C2SP signed note.

A checkpoint commits to the log's state::

    <origin>\\n<tree size>\\n<base64 root hash>\\n

and the log signs that body as a *signed note* (c2sp.org/signed-note)::

    <body>\\n— <key name> <base64(key id (4 bytes) || Ed25519 signature (64 bytes))>\\n

with ``key id = SHA-256(key name || 0x0A || 0x01 || public key)[:4]``. The
signature covers the body including its final newline. A *verifier key* is the
text ``<name>+<hex key id>+<base64(0x01 || public key)>``, which clients pin.

Written by hand because no maintained Python package implements signed notes; it
follows the Go reference (``golang.org/x/mod/sumdb/note``) rules that matter for
security: the signature block starts after the LAST blank line, a signature line
from a known key that fails to verify rejects the note, lines from unknown keys
are ignored, and at most 100 signature lines are read. Failures raise
``SignatureError`` or ``MerkleProofError``; nothing returns a bool.

**Timestamps.** A kvreg registry adds one extension line after the root,
``timestamp <unix seconds>``, the time it signed the note (it signs a fresh one on
every request, so that a client can tell a frozen registry from an idle one);
:func:`checkpoint_timestamp` reads it from a verified body.

This module does not fetch checkpoints or decide which key to pin (the client's
``kvreg.remote.auditlog`` does), and does not store them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from kvreg.core.errors import KvregError, SignatureError
from kvreg.core.keys import PublicKey, SigningKey

__all__ = [
    "Checkpoint",
    "NoteVerifier",
    "checkpoint_timestamp",
    "open_note",
    "parse_checkpoint_body",
    "sign_checkpoint",
    "sign_note",
    "verify_signed_checkpoint",
]

ALG_ED25519 = 0x01
SIGNATURE_PREFIX = "\u2014 "  # EM DASH, then one space
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
_NAME = re.compile(r"[^\s+]+")
TIMESTAMP_PREFIX = "timestamp "
_SIZE = re.compile(r"0|[1-9][0-9]{0,19}", re.ASCII)  # ASCII digits only: str.isdigit() also takes '²'


def _key_id(name: str, public: PublicKey) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public.raw).digest()[:4]


def _check_name(name: str) -> str:
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise SignatureError(f"invalid signed-note key name {name!r}: non-empty, no spaces, no '+'")
    return name


@dataclass(frozen=True)
class NoteVerifier:
    """A log's public key under its name: what a client pins for a registry."""

    name: str
    public_key: PublicKey

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def key_id(self) -> bytes:
        return _key_id(self.name, self.public_key)

    def to_text(self) -> str:
        raw = base64.b64encode(bytes([ALG_ED25519]) + self.public_key.raw).decode("ascii")
        return f"{self.name}+{self.key_id.hex()}+{raw}"

    @classmethod
    def from_text(cls, text: str) -> NoteVerifier:
        # The name has no '+' and the key id is hex; the base64 key may hold '+'.
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise SignatureError(f"a verifier key is NAME+KEYID+KEY, not {text!r}")
        name, hexid, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
            key_id = bytes.fromhex(hexid)
        except (binascii.Error, ValueError) as e:
            raise SignatureError(f"malformed verifier key {text!r}: {e}") from None
        if len(hexid) != 8 or len(raw) != 33 or raw[0] != ALG_ED25519:
            raise SignatureError(f"verifier key {text!r} is not an Ed25519 key")
        try:
            verifier = cls(name, PublicKey.from_raw(raw[1:]))
        except KvregError as e:
            raise SignatureError(f"malformed verifier key {text!r}: {e.message}") from None
        if verifier.key_id != key_id:
            raise SignatureError(f"verifier key {text!r} has a key id that does not match its key")
        return verifier


@dataclass(frozen=True)
class Checkpoint:
    """``origin``, ``size`` and the 32-byte ``root`` of the log at that size."""

    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or self.origin != self.origin.strip():
            raise SignatureError(f"invalid checkpoint origin {self.origin!r}")
        if not isinstance(self.size, int) or self.size < 0:
            raise SignatureError(f"invalid checkpoint size {self.size!r}")
        if not isinstance(self.root, bytes) or len(self.root) != 32:
            raise SignatureError("a checkpoint root is 32 bytes")

    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode('ascii')}\n"


def parse_checkpoint_body(body: str) -> Checkpoint:
    """A checkpoint from its note body (extension lines after the root are ignored)."""
    lines = body.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise SignatureError("a checkpoint body is origin, size and root hash, each on its own line")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if _SIZE.fullmatch(size_text) is None:
        raise SignatureError(f"invalid checkpoint size {size_text!r}")
    try:
        root = base64.b64decode(root_text, validate=True)
    except ValueError:  # binascii.Error, or a non-ASCII str
        raise SignatureError("the checkpoint root is not base64") from None
    if base64.b64encode(root).decode("ascii") != root_text:  # unused bits set: another text, same root
        raise SignatureError("the checkpoint root is not canonical base64")
    return Checkpoint(origin, int(size_text), root)


def sign_note(body: str, key: SigningKey, name: str) -> str:
    """``body`` (newline-terminated text) signed by ``key`` under ``name``, as a signed note."""
    _check_name(name)
    if not body.endswith("\n") or "\n\n" in body:
        raise SignatureError("a note body ends with a newline and has no blank line")
    sig = key.sign(body.encode("utf-8"))
    blob = base64.b64encode(_key_id(name, key.public_key) + sig).decode("ascii")
    return f"{body}\n{SIGNATURE_PREFIX}{name} {blob}\n"


def sign_checkpoint(
    checkpoint: Checkpoint, key: SigningKey, name: str, *, timestamp: int | None = None
) -> str:
    """The signed note of ``checkpoint`` by ``key`` under ``name``; ``timestamp`` (unix seconds)
    adds the ``timestamp`` extension line."""
    body = checkpoint.body()
    if timestamp is not None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
            raise SignatureError(f"invalid checkpoint timestamp {timestamp!r}")
        body += f"{TIMESTAMP_PREFIX}{timestamp}\n"
    return sign_note(body, key, name)


def checkpoint_timestamp(body: str) -> int | None:
    """The ``timestamp`` extension of a (verified) checkpoint body, in unix seconds; None when
    it has none. Two timestamp lines or a malformed one raise ``SignatureError``."""
    lines = body.split("\n")[3:]
    found = [line[len(TIMESTAMP_PREFIX) :] for line in lines if line.startswith(TIMESTAMP_PREFIX)]
    if not found:
        return None
    if len(found) > 1:
        raise SignatureError("a checkpoint has at most one timestamp line")
    if _SIZE.fullmatch(found[0]) is None:
        raise SignatureError(f"invalid checkpoint timestamp {found[0][:40]!r}")
    return int(found[0])


def verify_signed_checkpoint(note: str, verifier: NoteVerifier) -> Checkpoint:
    """Verify ``note`` with ``verifier`` and return its checkpoint; raise ``SignatureError``."""
    return parse_checkpoint_body(open_note(note, verifier))


def open_note(note: str, verifier: NoteVerifier) -> str:
    """Verify a signed note with ``verifier`` and return its body; raise ``SignatureError``."""
    if not isinstance(note, str) or len(note) > MAX_NOTE_BYTES:
        raise SignatureError("a signed note is text of at most 1 MiB")
    try:
        size = len(note.encode("utf-8"))
    except UnicodeEncodeError:
        raise SignatureError("a signed note is UTF-8 text (it holds an unpaired surrogate)") from None
    if size > MAX_NOTE_BYTES:
        raise SignatureError("a signed note is text of at most 1 MiB")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise SignatureError("not a signed note: no blank line before the signatures")
    body, block = note[: cut + 1], note[cut + 2 :]
    if not block.endswith("\n"):
        raise SignatureError("the signature block of a signed note ends with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise SignatureError(f"a signed note has at most {MAX_SIGNATURES} signatures")
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise SignatureError(f"malformed signature line {line[:60]!r}")
        name, sep, blob = line[len(SIGNATURE_PREFIX) :].partition(" ")
        if not sep or _NAME.fullmatch(name) is None:
            raise SignatureError(f"malformed signature line {line[:60]!r}")
        try:
            raw = base64.b64decode(blob, validate=True)
        except ValueError:  # binascii.Error, or a non-ASCII str
            raise SignatureError("a signature line is not base64") from None
        if len(raw) < 5:
            raise SignatureError("a signature line is too short")
        if name != verifier.name or raw[:4] != verifier.key_id:
            continue  # another signer (a witness, say): not ours to judge
        if base64.b64encode(raw).decode("ascii") != blob:
            # Unused trailing bits set: the same signature in another text. Refused so that a
            # checkpoint has one signed note per key, as the log writes it.
            raise SignatureError(f"the signature by {name!r} is not canonical base64")
        try:
            verifier.public_key.verify(raw[4:], body.encode("utf-8"))
        except SignatureError:
            raise SignatureError(
                f"the checkpoint's signature by {name!r} does not verify: the note was altered or forged"
            ) from None
        return body
    raise SignatureError(
        f"the checkpoint is not signed by the pinned log key {verifier.name}+{verifier.key_id.hex()}",
        hint="if the registry rotated its log key on purpose, its operators will say so; "
        "otherwise someone else is answering for it",
    )
