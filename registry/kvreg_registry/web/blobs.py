"""Object contents for pages: the first bytes of an object read from storage, and a text to show.

Reads are capped by the caller and checked against the digest when read whole
(:func:`read_object`); :func:`text_view` says why a text cannot be shown. Shared by
the artifact page and the compare page; touches no database.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError
from kvreg_registry.storage.base import ObjectStorage


@dataclass
class Blob:
    """The first bytes of an object read from storage."""

    digest: str
    size: int  # as the manifest declares it
    data: bytes = b""
    cut: bool = False  # only the first ``cap`` bytes were read
    missing: bool = False  # the storage does not have it
    mismatch: bool = False  # read whole, the bytes do not hash to the digest

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatch

    def text(self) -> str:
        """The bytes as UTF-8 (invalid sequences replaced; a character cut at the cap dropped)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(self.data, final=not self.cut)


def read_object(storage: ObjectStorage, digest: str, size: int, cap: int) -> Blob:
    """At most ``cap`` bytes of the object ``digest``; checked against the digest when read whole."""
    blob = Blob(digest=str(digest), size=size)
    try:
        blob.data = b"".join(storage.read_range(Digest(digest), 0, cap))
    except KvregError:
        blob.missing = True
        return blob
    blob.cut = size > cap and len(blob.data) >= cap
    if not blob.cut and Digest.of_bytes(blob.data) != digest:
        blob.mismatch = True
        blob.data = b""
    return blob


@dataclass(frozen=True)
class TextView:
    """A text shown in a ``<pre>``: the text, how many bytes it has, and whether it was cut."""

    text: str
    size: int
    cut: bool
    cap: int
    problem: str | None = None  # why it cannot be shown


def text_view(blob: Blob, cap: int) -> TextView:
    if blob.missing:
        return TextView("", blob.size, False, cap, f"the object {blob.digest} is not in storage")
    if blob.mismatch:
        return TextView(
            "", blob.size, False, cap, f"the stored bytes of {blob.digest} do not hash to it: not shown"
        )
    return TextView(blob.text(), blob.size, blob.cut, cap)


def common_prefix_len(a: Any, b: Any) -> int:
    """The length of the common prefix of two str/bytes (binary search over slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
