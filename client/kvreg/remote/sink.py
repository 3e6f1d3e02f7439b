"""Where downloaded bytes go, and the files uploads read: sizes checked, every byte hashed.

- :class:`Sink`: the file a download writes to, through pooled aligned buffers
  (``kvreg.fileio.directio``), with the SHA-256 of everything in it; it keeps what
  arrived when a transfer breaks, so that a ``Range`` request resumes after it;
- :func:`sink_file`: a :class:`Sink` on a path, finished or abandoned with the block;
- :func:`check_body_size`: refuse an upload whose file does not hold the bytes it claims;
- :class:`Download`: what a finished download reports.

This module knows files and hashes, not HTTP requests (``kvreg.remote.session`` and
``kvreg.remote.downloads`` send them).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, StoreError
from kvreg.fileio.directio import AlignedWriter
from kvreg.remote.bulk import BulkResponse

__all__ = ["Download", "ProgressCallback", "Sink", "check_body_size", "sink_file"]

ProgressCallback = Callable[[int], None]
"""Called with a number of bytes moved (negative: bytes that will be moved again)."""


@dataclass(frozen=True, slots=True)
class Download:
    """A finished download: the SHA-256 of the *whole* file, its size, and where this call started."""

    digest: Digest
    size: int
    resumed_from: int


class Sink:
    """The file a download writes to (through pooled aligned buffers, a full one written by a
    disk thread while the next fills, ``kvreg.fileio.directio``), the hash of everything in it,
    and the progress callback."""

    def __init__(self, fd: int, start: int, progress_cb: ProgressCallback | None) -> None:
        self.fd = fd
        self.hasher = hashlib.sha256()
        self.progress_cb = progress_cb
        # Keep at most ``start`` bytes, and hash them: the digest covers the whole file.
        if os.fstat(fd).st_size > start:
            os.ftruncate(fd, start)
        if start > 0:
            with open(fd, "rb", closefd=False) as kept:
                self.hasher = hashlib.file_digest(kept, "sha256")
        done = os.fstat(fd).st_size
        self.offset = done
        self.writer = AlignedWriter(fd, offset=done)

    def receive(self, response: BulkResponse, digest: Digest, max_size: int | None) -> None:
        """Read the rest of ``response``'s body into the file, hashing every byte."""
        if max_size is not None and response.remaining is not None:
            self._refuse_past(max_size, self.offset + response.remaining, digest)
        while True:
            view = self.writer.free()
            n = response.readinto(view, on_idle=self.writer.flush)
            if n == 0:
                return
            if max_size is not None:
                self._refuse_past(max_size, self.offset + n, digest)
            self.hasher.update(view[:n])
            self.writer.advance(n)
            self.offset += n
            if self.progress_cb is not None:
                self.progress_cb(n)

    def receive_exactly(self, response: BulkResponse, count: int) -> None:
        """Read the next ``count`` bytes of ``response``'s body into the file, hashing every byte
        (one object of a fetch pack); a body that ends before raises ``IncompleteRead``."""
        left = count
        while left:
            view = self.writer.free()
            n = response.readinto(view[: min(len(view), left)], on_idle=self.writer.flush)
            if n == 0:
                raise http.client.IncompleteRead(b"", left)
            self.hasher.update(view[:n])
            self.writer.advance(n)
            self.offset += n
            left -= n
            if self.progress_cb is not None:
                self.progress_cb(n)

    @staticmethod
    def _refuse_past(max_size: int, size: int, digest: Digest) -> None:
        if size > max_size:
            raise DigestMismatchError(
                f"the registry sent more than {max_size} bytes for object {digest}",
                expected=str(digest),
                max_size=max_size,
            )

    def restart(self) -> None:
        if self.progress_cb is not None and self.offset:
            self.progress_cb(-self.offset)
        self.writer.release()
        os.ftruncate(self.fd, 0)
        self.hasher = hashlib.sha256()
        self.offset = 0
        self.writer = AlignedWriter(self.fd, offset=0)

    def finish(self, *, fsync: bool = True) -> None:
        """Write what is buffered, cut the file to the bytes received, fsync it (unless the
        caller fsyncs it later, see ``HttpSession.download``)."""
        self.writer.close()
        os.ftruncate(self.fd, self.offset)
        if fsync:
            os.fsync(self.fd)

    def abandon(self) -> None:
        """Keep what was received in the file (a later call resumes from it); drop the buffers."""
        try:
            self.writer.close()  # what was counted is good: write it, so the resume starts after it
        finally:
            # If the close failed (a full disk), only the bytes written are kept: a resume must
            # not hash a hole as if it had arrived.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, min(self.offset, self.writer.offset))

    def digest(self) -> Digest:
        return Digest.from_hex(self.hasher.hexdigest())


@contextlib.contextmanager
def sink_file(dest: Path, start: int, progress_cb: ProgressCallback | None, *, fsync: bool) -> Iterator[Sink]:
    """A :class:`Sink` on the file ``dest`` (created if absent; its first ``start`` bytes kept):
    finished (fsynced unless ``fsync`` is false) when the block ends, abandoned (what was
    received stays, for a resume) when it raises."""
    fd = os.open(dest, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        sink = Sink(fd, start, progress_cb)
        try:
            yield sink
        except BaseException:
            sink.abandon()
            raise
        sink.finish(fsync=fsync)
    finally:
        os.close(fd)


def check_body_size(
    source: Path | BinaryIO, origin: int, size: int, digest: Digest, *, piece: bool = False
) -> None:
    """Refuse (``StoreError``) a file that does not hold exactly ``size`` bytes after ``origin``."""
    if isinstance(source, Path):
        try:
            total = source.stat().st_size
        except OSError as e:
            raise StoreError(f"cannot read object {digest}: {e.strerror or e}", digest=str(digest)) from e
    else:
        total = source.seek(0, os.SEEK_END)
    if total - origin < size:
        raise StoreError(
            f"object {digest} ended after {max(0, total - origin)} of {size} bytes while uploading it",
            hint="run 'kvreg fsck' on the local store",
            digest=str(digest),
        )
    if total - origin > size and not piece:
        raise StoreError(
            f"object {digest} is longer than {size} bytes while uploading it",
            hint="run 'kvreg fsck' on the local store",
            digest=str(digest),
        )
