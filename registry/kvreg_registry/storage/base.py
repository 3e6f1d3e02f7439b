"""The interface of the registry's object storage, and what every backend shares.

An :class:`ObjectStorage` keeps immutable byte strings under their SHA-256 digest.
Bytes arrive through a :class:`PendingObject`, which hashes them while they are
written and makes them visible under a digest only if they hash to it: readers
never see an object whose bytes are partial or wrong, and a refused upload leaves
nothing behind (no object, no temp file, no pending multipart upload). Committing
the same digest from many threads or processes at once is safe: all commits
succeed and the object is stored once.

Backends: :class:`~kvreg_registry.storage.folder.FolderStorage` (a local folder,
the embedded default) and :class:`~kvreg_registry.storage.s3.S3Storage` (any
S3-compatible store). Keys and paths are built only from :class:`Digest` values,
which are validated lowercase hex: a digest cannot name anything outside the
storage's object area.

This module does not know which namespace holds an object, or whether anything
references it: that is the database's job (``kvreg_registry.services.objects``).
Storage never deletes on its own; garbage collection calls :meth:`ObjectStorage.delete`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO, ClassVar, Protocol

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, ObjectNotFoundError
from kvreg.fileio.directio import BufferPool, default_pool
from kvreg.fileio.faults import crash_point

log = logging.getLogger(__name__)

#: The largest piece :meth:`ObjectStorage.read_range` yields.
READ_PIECE = 1 << 20
#: The folder (or key prefix) of :meth:`ObjectStorage.probe`'s objects, beside ``objects`` and ``tmp``.
PROBE_AREA = "probe"


def probe_bytes(name: str) -> bytes:
    """What a probe object named ``name`` holds (its name in it: a stale read is caught)."""
    return f"kvreg readiness probe {name}\n".encode("ascii")


_SHARD = re.compile(r"[0-9a-f]{2}")
_REST = re.compile(r"[0-9a-f]{62}")


def shard_parts(digest: Digest | str) -> tuple[str, str]:
    """``("ab", "<62 hex>")`` of a digest, validated (``InvalidDigestError`` otherwise)."""
    h = Digest(digest).hex
    return h[:2], h[2:]


def digest_from_parts(shard: str, rest: str) -> Digest | None:
    """The digest stored under ``<shard>/<rest>``, or ``None`` if the names are not an object's."""
    if _SHARD.fullmatch(shard) is None or _REST.fullmatch(rest) is None:
        return None
    return Digest.from_hex(shard + rest)


def check_range(start: int, end: int | None) -> None:
    """Refuse a range that no object has: negative offsets, or ``end`` before ``start``."""
    if start < 0:
        raise ValueError(f"range start must be >= 0, not {start}")
    if end is not None and end < start:
        raise ValueError(f"range end {end} is before its start {start}")


def not_found(digest: Digest) -> ObjectNotFoundError:
    return ObjectNotFoundError(f"object {digest} is not in storage", digest=str(digest))


@dataclass(frozen=True)
class StoredObject:
    """An object in storage: its digest, its size, and when it became visible."""

    digest: Digest
    size: int
    mtime: float  # seconds since the epoch


class Fillable(Protocol):
    """Buffers that :meth:`PendingObject.receive` reads into (``kvreg.fileio.directio.AlignedWriter``
    is one): the free part of the current buffer, and how many bytes were put at its start."""

    def free(self) -> memoryview: ...

    def advance(self, n: int) -> None: ...


class _Staged:
    """One pooled buffer whose contents go to ``write`` when it is full and when drained."""

    def __init__(self, pool: BufferPool, write: Callable[[memoryview], None]) -> None:
        self._pool = pool
        self._buffer = pool.acquire()
        self._view = memoryview(self._buffer)
        self._fill = 0
        self._write = write

    def free(self) -> memoryview:
        if self._fill == len(self._view):
            self.drain()
        return self._view[self._fill :]

    def advance(self, n: int) -> None:
        self._fill += n

    def drain(self) -> None:
        if self._fill:
            with self._view[: self._fill] as full:
                self._write(full)
            self._fill = 0

    def release(self) -> None:
        self._view.release()
        self._pool.release(self._buffer)


class PendingObject(ABC):
    """Bytes being uploaded whose digest is not yet verified; not visible until :meth:`commit`.

    Use it as a context manager: leaving the block without a commit (an
    exception, a client that went away) aborts it::

        with storage.begin_upload() as pending:
            for piece in body:
                pending.write(piece)
            new = pending.commit(expected)

    Backends implement :meth:`_write` (store a piece), :meth:`_publish` (make the
    verified bytes visible) and :meth:`_discard` (drop everything), and may offer
    their own buffers to :meth:`receive` (:meth:`_receiving`); hashing, the size
    and the state machine (open → committed | aborted) live here. A pending
    object is used by one thread at a time.
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._size = 0
        self._state = "open"  # open -> sealed -> committed, or aborted from open or sealed
        self._sealed_as: Digest | None = None

    # --- the interface --------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hash and store one piece of the object."""
        if self._state != "open":
            raise ValueError(f"cannot write to an upload that is {self._state}")
        if not data:
            return
        self._hash.update(data)
        self._size += len(data)
        try:
            self._write(data)
        except BaseException:
            self.abort()
            raise

    def receive(self, read_into: Callable[[memoryview], int], *, pool: BufferPool | None = None) -> None:
        """Write everything ``read_into`` gives (it fills the start of a view and returns the count,
        0 at the end). Blocking: call it from a worker thread.

        The pieces are read into large buffers (the backend's own, see :meth:`_receiving`, or
        one from ``pool``) and each is hashed as soon as it is read, while it is still in the
        CPU's cache; a full buffer is stored while the socket is read into the next (on the
        folder storage a disk thread writes it, ``kvreg.fileio.directio``).
        """
        if self._state != "open":
            raise ValueError(f"cannot write to an upload that is {self._state}")
        try:
            with self._receiving(pool or default_pool()) as target:
                while True:
                    with target.free() as view:
                        n = read_into(view)
                        if n == 0:
                            return
                        self._hash.update(view[:n])
                    target.advance(n)
                    self._size += n
        except BaseException:
            self.abort()
            raise

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._size

    @property
    def digest(self) -> Digest:
        """The digest of the bytes written so far."""
        return Digest.from_hex(self._hash.hexdigest())

    def seal(self, expected: Digest) -> None:
        """Check that the bytes hash to ``expected`` and make them durable where they wait
        (a file is flushed and fsynced), without making them visible: the slow part of a
        :meth:`commit`, done before the caller takes any lock. Writing ends here.

        A mismatch discards everything and raises ``DigestMismatchError``; an ``expected``
        that is not a digest raises ``InvalidDigestError``. Idempotent for the same digest.
        """
        if self._state == "sealed" and self._sealed_as == Digest(expected):
            return
        if self._state != "open":
            raise ValueError(f"cannot seal an upload that is {self._state}")
        try:
            want = Digest(expected)
            actual = self.digest
            if actual != want:
                raise DigestMismatchError(
                    f"uploaded bytes hash to {actual}, expected {want}",
                    expected=str(want),
                    actual=str(actual),
                    size=self._size,
                )
            self._seal()
        except BaseException:
            self.abort()
            raise
        self._state = "sealed"
        self._sealed_as = want

    def commit(self, expected: Digest) -> bool:
        """Make the bytes visible under ``expected`` if they hash to it (sealing them first
        unless :meth:`seal` did).

        Returns ``True`` if the bytes were new to the storage, ``False`` if an
        object with that digest was stored already (the copy is discarded). If
        the bytes hash to anything else, everything is discarded and
        ``DigestMismatchError`` is raised; an ``expected`` that is not a digest
        raises ``InvalidDigestError``. Either way, and on any other failure,
        nothing stays behind.
        """
        self.seal(expected)
        sealed_as = self._sealed_as
        if self._state != "sealed" or sealed_as is None:  # pragma: no cover - seal() raised otherwise
            raise ValueError(f"cannot commit an upload that is {self._state}")
        try:
            crash_point("registry.object.before_publish")
            new = self._publish(sealed_as)
        except BaseException:
            self.abort()
            raise
        self._state = "committed"
        return new

    def abort(self) -> None:
        """Discard the upload. Idempotent; a committed upload stays committed."""
        if self._state not in ("open", "sealed"):
            return
        self._state = "aborted"
        self._discard()

    def close(self) -> None:
        """Abort the upload unless it was committed, and drop what a commit left to tidy (the
        folder storage's temp name): after the caller's write transaction, so that the file
        system's work is not done while the database's write lock is held. Idempotent."""
        self.abort()
        if self._state == "committed":
            self._release()

    def __enter__(self) -> PendingObject:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- for backends -----------------------------------------------------------

    @abstractmethod
    def _write(self, data: bytes | bytearray | memoryview) -> None:
        """Store a piece (already hashed and counted)."""

    @contextlib.contextmanager
    def _receiving(self, pool: BufferPool) -> Iterator[Fillable]:
        """What :meth:`receive` reads into, stored by the end of the block. By default a buffer
        from ``pool``, given to :meth:`_write` when full and at the end; a backend that keeps
        buffers of its own (the folder storage's file writer) yields those instead."""
        staged = _Staged(pool, self._write)
        try:
            yield staged
            staged.drain()
        finally:
            staged.release()

    def _seal(self) -> None:  # noqa: B027 - optional: backends without a durable wait have nothing to do
        """Make the bytes written so far durable (they are complete and verified); nothing by
        default."""

    @abstractmethod
    def _publish(self, digest: Digest) -> bool:
        """Make the verified bytes visible under ``digest``; ``False`` if it existed already.

        On success nothing temporary is left behind; on an exception the base
        class calls :meth:`_discard`.
        """

    @abstractmethod
    def _discard(self) -> None:
        """Remove everything this upload stored. Must not raise for things already gone."""

    def _release(self) -> None:  # noqa: B027 - optional: most backends leave nothing after a commit
        """Remove what :meth:`_publish` left behind that is not the object (called by
        :meth:`close` after a commit); must not raise. Nothing by default."""


class ObjectStorage(ABC):
    """Content-addressed, immutable objects: the interface the server uses."""

    kind: ClassVar[str]
    #: Whether object GETs should answer with a redirect to :meth:`presigned_url`.
    redirect: bool = False

    @abstractmethod
    def begin_upload(self) -> PendingObject:
        """A new :class:`PendingObject` to write bytes into."""

    def commit_many(self, uploads: Sequence[tuple[PendingObject, Digest]]) -> list[bool]:
        """Commit several uploads, in order (an object pack's, inside its write transaction):
        what :meth:`PendingObject.commit` returns for each. When this returns, every one is
        visible and durable; a backend may make them durable together (the folder storage
        fsyncs each folder once, after the last one). An exception leaves the ones committed
        before it visible, as single commits would."""
        stored: list[bool] = []
        for pending, digest in uploads:
            stored.append(pending.commit(digest))
            crash_point("registry.object.after_publish")
        return stored

    @abstractmethod
    def exists(self, digest: Digest) -> bool:
        """Whether an object is stored under ``digest``."""

    @abstractmethod
    def size(self, digest: Digest) -> int:
        """The object's size in bytes; ``ObjectNotFoundError`` if it is not stored."""

    @abstractmethod
    def read_range(self, digest: Digest, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of an object (``end=None``: to its end), in pieces of at most 1 MiB.

        Like a slice, ``end`` past the object's size stops at its end and a
        ``start`` at or past it yields nothing; negative offsets and ``end <
        start`` raise ``ValueError``. Raises ``ObjectNotFoundError`` when called
        (not on the first ``next``), so callers can answer 404 before streaming.
        The bytes are not re-hashed: readers verify them against the digest.
        """

    def open_local(self, digest: Digest) -> BinaryIO | None:
        """The object's bytes as an open local file, for servers that send files without reading
        them (``kvreg_registry.server_io``); ``None`` where objects are not local files.

        Raises ``ObjectNotFoundError`` when the object is not stored. The caller closes it.
        """
        Digest(digest)
        return None

    @abstractmethod
    def delete(self, digest: Digest) -> bool:
        """Remove an object; ``True`` if it was there. Idempotent."""

    @abstractmethod
    def iter_objects(self) -> Iterator[StoredObject]:
        """Every stored object (names that are not objects are skipped)."""

    @abstractmethod
    def presigned_url(self, digest: Digest, *, expires_s: int = 300) -> str | None:
        """A URL that serves the object's bytes without credentials, or ``None`` if the backend has none."""

    @abstractmethod
    def sweep_incomplete(self, older_than_s: float) -> int:
        """Remove what crashed uploads left behind, older than ``older_than_s`` seconds; return the count."""

    @abstractmethod
    def check(self) -> None:
        """Raise ``UnavailableError`` unless the storage can be read and written."""

    @abstractmethod
    def probe(self) -> None:
        """Write a small probe object, read it back and remove it (the readiness check); raise
        ``UnavailableError`` if any step fails. It lives in an area of its own (``probe/``, beside
        ``objects/`` and ``tmp/``) under a random name: no object or upload can be confused with it,
        and nothing lists it. It is removed even when the read fails."""
