"""Typed SHA-256 digests, written ``sha256:<64 lowercase hex>``.

``Digest`` is the only way kvreg names content. Parsing is strict (no upper case,
no other algorithms, no whitespace), so a digest string can never smuggle a path
separator or a traversal into a file name. This module hashes bytes and files;
it does not know what the bytes mean.
"""

from __future__ import annotations

import hashlib
import re
from typing import BinaryIO

from kvreg.core.errors import DigestMismatchError, InvalidDigestError

ALGORITHM = "sha256"
_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
_READ_SIZE = 1 << 20


class Digest(str):
    """A validated ``sha256:<hex>`` string. Compares and hashes like ``str``."""

    __slots__ = ()

    def __new__(cls, value: str) -> Digest:
        if isinstance(value, Digest):
            return value
        if not isinstance(value, str) or _PATTERN.fullmatch(value) is None:
            raise InvalidDigestError(
                f"not a valid digest: {value!r}",
                hint="expected 'sha256:' followed by 64 lowercase hex digits",
            )
        return super().__new__(cls, value)

    @classmethod
    def from_hex(cls, hexdigest: str) -> Digest:
        return cls(f"{ALGORITHM}:{hexdigest}")

    @classmethod
    def of_bytes(cls, data: bytes | bytearray | memoryview) -> Digest:
        return cls.from_hex(hashlib.sha256(data).hexdigest())

    @classmethod
    def of_stream(cls, stream: BinaryIO) -> Digest:
        h = hashlib.sha256()
        while block := stream.read(_READ_SIZE):
            h.update(block)
        return cls.from_hex(h.hexdigest())

    @property
    def hex(self) -> str:
        return self[len(ALGORITHM) + 1 :]

    @property
    def raw(self) -> bytes:
        """The 32 digest bytes."""
        return bytes.fromhex(self.hex)

    def short(self, n: int = 12) -> str:
        return f"{ALGORITHM}:{self.hex[:n]}"

    def verify(self, data: bytes | bytearray | memoryview, *, what: str = "object") -> None:
        """Raise ``DigestMismatchError`` unless ``data`` hashes to this digest."""
        actual = Digest.of_bytes(data)
        if actual != self:
            raise DigestMismatchError(
                f"{what} hashes to {actual}, expected {self}", expected=str(self), actual=str(actual)
            )


def is_digest(value: object) -> bool:
    """True when ``value`` is a well-formed digest string (for parsers choosing a branch)."""
    return isinstance(value, str) and _PATTERN.fullmatch(value) is not None
