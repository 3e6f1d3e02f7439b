"""The content-addressed object database: ``objects/ab/<remaining 62 hex>``.

An object is any immutable byte string kvreg stores (KV chunks, token ids, text,
manifests), named by the SHA-256 of its bytes. Like dvc-objects' ``db.py`` the
files are sharded on the first two hex digits and stored read-only (``0444``).

Writes hash the bytes while copying them into a ``*.incomplete`` temp file under
``tmp/`` and move the file into place only after its digest is known (and, if the
caller passed ``expected``, matched): a mismatch raises ``DigestMismatchError``
and leaves the store unchanged; a crash leaves at most a temp file, which ``gc``
removes. Placing an object never overwrites an existing one (hard link, which
fails if the name exists), so concurrent writers of the same object all succeed.

An object that is already present is not written again. Its size is compared
with the new bytes (a cheap check, not a re-hash): a file of the wrong size is
moved to ``quarantine/`` and replaced; a file of the right size is kept and its
mtime refreshed, so that ``gc``'s grace period protects an old, so far
unreferenced object that a deposit in progress is about to reference. Re-hashing
every stored object is ``fsck``'s job; :meth:`ObjectStore.read` re-hashes by
default.

Paths are built only from ``Digest.hex``, which is validated lowercase hex: a
digest cannot name anything outside ``objects/``. This module does not know what
objects mean (no manifest parsing) and never deletes on its own; ``gc`` and
``fsck`` call :meth:`ObjectStore.remove` and :meth:`ObjectStore.quarantine`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, ObjectNotFoundError, StoreError
from kvreg.core.timestamps import compact_micro, from_epoch
from kvreg.fileio.atomicfile import ensure_dir, finish, fsync_dir, install, temp_file
from kvreg.fileio.faults import crash_point
from kvreg.store.absence import absence_error
from kvreg.store.layout import Layout

log = logging.getLogger(__name__)

COPY_BLOCK = 1 << 20
_SHARD = re.compile(r"[0-9a-f]{2}")
_REST = re.compile(r"[0-9a-f]{62}")


@dataclass(frozen=True, slots=True)
class PutResult:
    """What a put did: the object's digest, its size, and whether it was new here."""

    digest: Digest
    size: int
    new: bool


@dataclass(frozen=True, slots=True)
class StoreUsage:
    """How many objects the store holds and how many bytes they take."""

    objects: int
    bytes: int


def quarantine_name(hexdigest: str, *, now: float | None = None) -> str:
    """``<hex>.<UTC timestamp>``: the name a damaged file gets in ``quarantine/``."""
    t = time.time() if now is None else now
    stamp = compact_micro(from_epoch(t))
    return f"{hexdigest}.{stamp}"


def move_to_quarantine(path: Path, quarantine_dir: Path, hexdigest: str) -> Path:
    """Move ``path`` into ``quarantine_dir`` under a fresh timestamped name; never delete."""
    ensure_dir(quarantine_dir)
    base = quarantine_name(hexdigest)
    target = quarantine_dir / base
    n = 0
    while target.exists():
        n += 1
        target = quarantine_dir / f"{base}.{n}"
    path.replace(target)
    fsync_dir(quarantine_dir)
    fsync_dir(path.parent)
    return target


class ObjectStore:
    """Objects under ``<root>/objects``, temp files in ``<root>/tmp``.

    ``root`` is the store root (``$KVREG_HOME``); folders are created on first
    write, so a store that was never written reads as empty.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.objects_dir = self.root / "objects"
        self.tmp_dir = self.root / "tmp"
        self.quarantine_dir = self.root / "quarantine"

    def __repr__(self) -> str:
        return f"ObjectStore({str(self.root)!r})"

    # --- paths ----------------------------------------------------------------

    def _path_for(self, digest: Digest) -> Path:
        h = Digest(digest).hex  # re-validates a plain str passed by mistake
        return self.objects_dir / h[:2] / h[2:]

    def path(self, digest: Digest) -> Path:
        """The file of an object, for zero-copy readers (mmap). Do not write to it.

        Raises ``ObjectNotFoundError`` if the object is not stored.
        """
        p = self._path_for(digest)
        if not p.is_file():
            raise self._not_found(digest)
        return p

    def has(self, digest: Digest) -> bool:
        return self._path_for(digest).is_file()

    # --- reading --------------------------------------------------------------

    def open(self, digest: Digest) -> BinaryIO:
        """Open an object for reading. The bytes are not verified: hash them if it matters."""
        try:
            return self._path_for(digest).open("rb")
        except FileNotFoundError:
            raise self._not_found(digest) from None

    def read(self, digest: Digest, *, verify: bool = True) -> bytes:
        """An object's bytes; with ``verify`` (the default) re-hashed against its name.

        Raises ``ObjectNotFoundError`` or ``DigestMismatchError`` (the store is
        damaged: ``kvreg fsck`` quarantines the object).
        """
        digest = Digest(digest)
        with self.open(digest) as f:
            data = f.read()
        if verify:
            actual = Digest.of_bytes(data)
            if actual != digest:
                raise DigestMismatchError(
                    f"stored object {digest} is damaged: its bytes hash to {actual}",
                    hint="run 'kvreg fsck' to quarantine it, then pull or deposit it again",
                    expected=str(digest),
                    actual=str(actual),
                )
        return data

    def stat(self, digest: Digest) -> os.stat_result:
        try:
            return self._path_for(digest).stat()
        except FileNotFoundError:
            raise self._not_found(digest) from None

    def size(self, digest: Digest) -> int:
        return self.stat(digest).st_size

    def iter_digests(self) -> Iterator[Digest]:
        """Every stored object's digest, in sorted order. Names that are not
        objects (temp files, editor droppings, folders) are skipped."""
        try:
            shards = sorted(e.name for e in os.scandir(self.objects_dir) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return
        for shard in shards:
            if _SHARD.fullmatch(shard) is None:
                log.debug("skipping non-shard entry objects/%s", shard)
                continue
            try:
                entries = sorted(
                    e.name for e in os.scandir(self.objects_dir / shard) if e.is_file(follow_symlinks=False)
                )
            except FileNotFoundError:
                continue
            for name in entries:
                if _REST.fullmatch(name) is None:
                    log.debug("skipping non-object file objects/%s/%s", shard, name)
                    continue
                yield Digest.from_hex(shard + name)

    def usage(self) -> StoreUsage:
        count = total = 0
        for d in self.iter_digests():
            try:
                total += self._path_for(d).stat().st_size
            except FileNotFoundError:
                continue
            count += 1
        return StoreUsage(objects=count, bytes=total)

    # --- writing --------------------------------------------------------------

    def put_bytes(self, data: bytes | bytearray | memoryview, expected: Digest | None = None) -> PutResult:
        """Store ``data``; with ``expected``, refuse (``DigestMismatchError``) bytes that do not match."""
        digest = Digest.of_bytes(data)
        size = memoryview(data).nbytes
        self._check_expected(digest, expected)
        if self._keep_existing(digest, size):
            return PutResult(digest, size, new=False)
        self._ensure_dirs()
        with temp_file(self.tmp_dir, prefix=f"{digest.hex[:16]}.") as (f, tmp):
            f.write(data)
            finish(f)
            new = self._install(tmp, digest)
        return PutResult(digest, size, new=new)

    def put_stream(self, stream: BinaryIO, expected: Digest | None = None) -> PutResult:
        """Copy ``stream`` into the store, hashing as it goes; verified before it becomes visible."""
        self._ensure_dirs()
        h = hashlib.sha256()
        size = 0
        with temp_file(self.tmp_dir) as (f, tmp):
            while block := stream.read(COPY_BLOCK):
                h.update(block)
                f.write(block)
                size += len(block)
            finish(f)
            digest = Digest.from_hex(h.hexdigest())
            self._check_expected(digest, expected)
            if self._keep_existing(digest, size):
                return PutResult(digest, size, new=False)
            new = self._install(tmp, digest)
        return PutResult(digest, size, new=new)

    def put_file(self, path: str | os.PathLike[str], expected: Digest | None = None) -> PutResult:
        """Store the file at ``path`` (copied, never moved or linked: the caller keeps its file).

        The file is hashed first; if the object is present already nothing is
        copied. Otherwise it is copied and hashed again while copying, so a file
        that changes in between is refused rather than stored under a wrong name.
        """
        source = Path(path)
        with source.open("rb") as f:
            digest = Digest.of_stream(f)
            size = f.tell()
        self._check_expected(digest, expected)
        if self._keep_existing(digest, size):
            return PutResult(digest, size, new=False)
        with source.open("rb") as f:
            return self.put_stream(f, expected=digest)

    def adopt_file(
        self, path: str | os.PathLike[str], expected: Digest, *, hashed_by_caller: bool = False
    ) -> PutResult:
        """Move a downloaded file into the store (pull's staged objects); nothing is copied.

        The file must be on the store's filesystem (under ``tmp/``) and belong to the
        caller, who gives it up. It is hashed and refused with ``DigestMismatchError``
        (left where it is) unless it hashes to ``expected``; then it is made read-only
        and hard-linked to its object name, and the caller's name for it is removed.

        ``hashed_by_caller=True`` skips the hash: only for a caller that hashed every
        byte as it wrote this very file, in this process, into a folder private to it
        (a pull's staging folder under its lock), and fsynced it. Files left by an
        earlier process must be hashed again.
        """
        source = Path(path)
        with source.open("rb") as f:
            if hashed_by_caller:
                digest = Digest(expected)
                size = os.fstat(f.fileno()).st_size
            else:
                digest = Digest.of_stream(f)
                size = f.tell()
                os.fsync(f.fileno())
        self._check_expected(digest, expected)
        if not self._keep_existing(digest, size):
            self._ensure_dirs()
            new = self._install(source, digest)
        else:
            new = False
        source.unlink(missing_ok=True)
        return PutResult(digest, size, new=new)

    # --- removal (gc, fsck) ---------------------------------------------------

    def remove(self, digest: Digest) -> int:
        """Delete an object; return the bytes freed. Only ``gc`` should call this."""
        p = self._path_for(digest)
        try:
            size = p.stat().st_size
            p.unlink()
        except FileNotFoundError:
            raise self._not_found(digest) from None
        return size

    def quarantine(self, digest: Digest) -> Path:
        """Move an object's file to ``quarantine/<hex>.<timestamp>``; return the new path."""
        digest = Digest(digest)
        p = self._path_for(digest)
        try:
            target = move_to_quarantine(p, self.quarantine_dir, digest.hex)
        except FileNotFoundError:
            raise self._not_found(digest) from None
        log.warning("quarantined object %s to %s", digest, target)
        return target

    # --- internals ------------------------------------------------------------

    def _ensure_dirs(self) -> None:
        try:
            ensure_dir(self.objects_dir)  # durable: the objects linked into it depend on its name
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the object store at {self.root}: {exc}") from exc

    @staticmethod
    def _check_expected(actual: Digest, expected: Digest | None) -> None:
        if expected is not None and actual != Digest(expected):
            raise DigestMismatchError(
                f"received bytes hash to {actual}, expected {expected}",
                expected=str(expected),
                actual=str(actual),
            )

    def _keep_existing(self, digest: Digest, size: int) -> bool:
        """True if a plausible copy is stored (right size): refresh its mtime and keep it.

        A file of the wrong size, or something that is not a regular file, is
        quarantined so that the caller's verified bytes can take its place.
        """
        p = self._path_for(digest)
        try:
            st = p.lstat()
        except FileNotFoundError:
            return False
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            try:
                os.utime(p)
            except OSError as exc:  # not ours to touch (shared read-only store): keeping it is still right
                log.debug("cannot refresh mtime of %s: %s", p, exc)
            return True
        log.warning(
            "stored object %s has size %d, expected %d: quarantining it and storing the verified bytes",
            digest,
            st.st_size,
            size,
        )
        with contextlib.suppress(FileNotFoundError):  # someone else moved it meanwhile
            move_to_quarantine(p, self.quarantine_dir, digest.hex)
        return False

    def _install(self, tmp: Path, digest: Digest) -> bool:
        """Link a verified temp file to the object's name; False if another writer won."""
        final = self._path_for(digest)
        crash_point("client.object.before_install")
        try:
            new = install(tmp, final, exclusive=True)
        except OSError as exc:
            raise StoreError(f"cannot store object {digest}: {exc}", digest=str(digest)) from exc
        if new:
            log.debug("stored object %s", digest)
        return new

    def _not_found(self, digest: Digest) -> ObjectNotFoundError:
        """ "Not in the store", or, if disk paging evicted it or a lazy pull left it on the
        registry, how to get it (``kvreg.store.absence.absence_error``)."""
        try:
            evicted = absence_error(Layout(self.root), digest, f"object {digest}")
        except (OSError, ValueError) as exc:  # the paging logs only improve the message
            log.debug("cannot read the paging logs: %s", exc)
            evicted = None
        if evicted is not None:
            return evicted
        return ObjectNotFoundError(f"object {digest} is not in the local store", digest=str(digest))
