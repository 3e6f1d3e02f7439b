"""Object storage in a local folder: ``<root>/objects/ab/<remaining 62 hex>``.

The layout and the write path are those of the client's store
(``kvreg.store.objects``): an upload is written to a ``*.incomplete`` temp file in
``<root>/tmp`` (same filesystem as ``objects/``), hashed while it is written,
fsynced, made read-only (0444) and hard-linked to its final name only once its
digest is verified; the folder is fsynced after (for an object pack, each folder once,
after the pack's last link: :meth:`FolderStorage.commit_many`). A hard link never replaces an
existing name, so concurrent commits of the same digest, from threads or
processes, all succeed and exactly one of them reports the bytes as new. A
crash leaves at most a temp file, which :meth:`FolderStorage.sweep_incomplete`
removes once it has been idle long enough.

A file found under an object's name with the wrong size is damage (a disk
error, a hand edit): a commit of verified bytes replaces it. Re-hashing stored
objects is not this module's job; readers verify what they read.

There are no presigned URLs: the server sends the files itself (``open_local``: with
``sendfile`` where the server offers it, ``kvreg_registry.server_io``). Uploads are
written through aligned buffers, whole buffers with ``O_DIRECT`` by a disk thread while
the next one fills (``kvreg.fileio.directio``): on a virtual machine the page cache costs
more CPU per GiB than hashing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

from kvreg.core.digest import Digest
from kvreg.core.errors import StoreError, UnavailableError
from kvreg.fileio.atomicfile import TEMP_SUFFIX, ensure_dir, fsync_dir, install, remove_quietly
from kvreg.fileio.directio import AlignedWriter, BufferPool
from kvreg_registry.storage.base import (
    PROBE_AREA,
    READ_PIECE,
    Fillable,
    ObjectStorage,
    PendingObject,
    StoredObject,
    check_range,
    digest_from_parts,
    not_found,
    probe_bytes,
    shard_parts,
)

log = logging.getLogger(__name__)

_UPLOAD_PREFIX = "upload."


class FolderPending(PendingObject):
    """An upload into a temp file under ``<root>/tmp``, written through aligned buffers
    (``kvreg.fileio.directio``: whole buffers bypass the page cache where the filesystem allows,
    written by a disk thread while the next one fills)."""

    def __init__(self, storage: FolderStorage) -> None:
        super().__init__()
        self._storage = storage
        #: Set by :meth:`FolderStorage.commit_many`: the folder fsync and the temp file's removal
        #: wait for the batch's end.
        self.batch: _PublishBatch | None = None
        storage.ensure_dirs()
        fd, name = tempfile.mkstemp(dir=storage.tmp_dir, prefix=_UPLOAD_PREFIX, suffix=TEMP_SUFFIX)
        self._path = Path(name)
        self._fd: int | None = fd
        try:
            self._writer: AlignedWriter | None = AlignedWriter(fd, pool=storage.buffers)
        except BaseException:
            self._close_and_remove()
            raise

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        if self._writer is None:  # pragma: no cover - the base class checks the state first
            raise ValueError("upload is closed")
        self._writer.write(data)

    @contextlib.contextmanager
    def _receiving(self, pool: BufferPool) -> Iterator[Fillable]:
        """Straight into the file writer's buffers (not ``pool``'s): a full one goes to a disk
        thread while the socket is read into the other; the rest is written at :meth:`_seal`."""
        if self._writer is None:  # pragma: no cover - the base class checks the state first
            raise ValueError("upload is closed")
        yield self._writer

    def _seal(self) -> None:
        if self._writer is None or self._fd is None:  # pragma: no cover
            raise ValueError("upload is closed")
        self._writer.close()
        self._writer = None
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None

    def _publish(self, digest: Digest) -> bool:
        # The temp name stays until close() (_release): its removal (of the whole file when the
        # object was stored already) waits for the end of the caller's write transaction. In a
        # batch the object's folder is fsynced at the batch's end.
        batch = self.batch
        if batch is None:
            return self._storage.install(self._path, digest, self.size)
        new = self._storage.install(self._path, digest, self.size, sync_dir=False)
        if new:
            batch.folders.add(self._storage.path_for(digest).parent)
        return new

    def _discard(self) -> None:
        self._close_and_remove()

    def _release(self) -> None:
        self._close_and_remove()

    def _close_and_remove(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        remove_quietly(self._path)


class _PublishBatch:
    """The folders to fsync once a pack's objects are linked."""

    def __init__(self) -> None:
        self.folders: set[Path] = set()

    def sync(self) -> None:
        try:
            for folder in sorted(self.folders):
                fsync_dir(folder)
        except OSError as exc:
            raise StoreError(f"cannot make the new objects durable: {exc}") from exc


class FolderStorage(ObjectStorage):
    """Objects under ``<root>/objects``, uploads in progress in ``<root>/tmp``.

    Folders are created on the first upload (or :meth:`check`), so a storage that
    was never written reads as empty.
    """

    kind: ClassVar[str] = "folder"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.objects_dir = self.root / "objects"
        self.tmp_dir = self.root / "tmp"
        self.buffers = BufferPool()

    def __repr__(self) -> str:
        return f"FolderStorage({str(self.root)!r})"

    # --- paths ------------------------------------------------------------------

    def path_for(self, digest: Digest) -> Path:
        """The file of an object (whether or not it exists). Validates the digest."""
        shard, rest = shard_parts(digest)
        return self.objects_dir / shard / rest

    def ensure_dirs(self) -> None:
        try:
            ensure_dir(self.objects_dir)  # durable: the objects linked into it depend on its name
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UnavailableError(f"cannot create the object storage at {self.root}: {exc}") from exc

    # --- writing ----------------------------------------------------------------

    def begin_upload(self) -> PendingObject:
        try:
            return FolderPending(self)
        except OSError as exc:
            raise UnavailableError(f"cannot start an upload in {self.tmp_dir}: {exc}") from exc

    def commit_many(self, uploads: Sequence[tuple[PendingObject, Digest]]) -> list[bool]:
        """Link every upload to its name, then fsync each folder that got a new name once: one
        journal commit for a pack instead of one per object (on ext4 the first folder fsync
        commits the links in every folder). The temp names go when each upload is closed."""
        batch = _PublishBatch()
        for pending, _ in uploads:
            if isinstance(pending, FolderPending):
                pending.batch = batch
        stored = super().commit_many(uploads)
        batch.sync()
        return stored

    def install(self, tmp: Path, digest: Digest, size: int, *, sync_dir: bool = True) -> bool:
        """Link a verified, fsynced temp file to ``digest``'s name; ``False`` if it was there.

        The caller removes ``tmp`` afterwards, and with ``sync_dir=False`` fsyncs the
        object's folder when this returns ``True``.
        """
        final = self.path_for(digest)
        try:
            if install(tmp, final, exclusive=True, sync_dir=sync_dir):
                os.utime(final)  # the time it became visible, not the time of its last write
                log.debug("stored object %s (%d bytes)", digest, size)
                return True
            st = final.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_size == size:
                return False
            log.warning(
                "object %s in storage has size %d, not %d: replacing it with the verified bytes",
                digest,
                st.st_size,
                size,
            )
            tmp.replace(final)
            if sync_dir:
                fsync_dir(final.parent)
            return True
        except OSError as exc:
            raise StoreError(f"cannot store object {digest}: {exc}", digest=str(digest)) from exc

    # --- reading ----------------------------------------------------------------

    def exists(self, digest: Digest) -> bool:
        return self.path_for(digest).is_file()

    def size(self, digest: Digest) -> int:
        digest = Digest(digest)
        try:
            return self.path_for(digest).stat().st_size
        except FileNotFoundError:
            raise not_found(digest) from None

    def read_range(self, digest: Digest, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        digest = Digest(digest)
        check_range(start, end)
        try:
            f = self.path_for(digest).open("rb")
        except FileNotFoundError:
            raise not_found(digest) from None
        return _read_file(f, start, end)

    def open_local(self, digest: Digest) -> BinaryIO | None:
        digest = Digest(digest)
        try:
            return self.path_for(digest).open("rb")
        except FileNotFoundError:
            raise not_found(digest) from None

    def iter_objects(self) -> Iterator[StoredObject]:
        try:
            shards = sorted(e.name for e in os.scandir(self.objects_dir) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return
        for shard in shards:
            try:
                entries = sorted(os.scandir(self.objects_dir / shard), key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                digest = digest_from_parts(shard, entry.name)
                if digest is None or not entry.is_file(follow_symlinks=False):
                    log.debug("skipping %s: not an object", entry.path)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # deleted meanwhile
                    continue
                yield StoredObject(digest=digest, size=st.st_size, mtime=st.st_mtime)

    def presigned_url(self, digest: Digest, *, expires_s: int = 300) -> str | None:
        Digest(digest)
        return None

    # --- removal ------------------------------------------------------------------

    def delete(self, digest: Digest) -> bool:
        path = self.path_for(digest)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"cannot delete object {digest}: {exc}", digest=str(digest)) from exc
        fsync_dir(path.parent)
        return True

    def sweep_incomplete(self, older_than_s: float) -> int:
        """Remove ``tmp/*.incomplete`` files not written to for ``older_than_s`` seconds.

        An upload in progress rewrites its temp file's mtime with every piece, so
        only uploads idle for that long (crashed, or a client stalled past any
        sensible timeout) are removed.
        """
        cutoff = time.time() - older_than_s
        removed = 0
        try:
            entries = list(os.scandir(self.tmp_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if not entry.name.endswith(TEMP_SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                    continue
                Path(entry.path).unlink()
            except FileNotFoundError:
                continue
            removed += 1
            log.info("removed leftover upload %s", entry.path)
        return removed

    def check(self) -> None:
        self.ensure_dirs()
        try:
            fd, name = tempfile.mkstemp(dir=self.tmp_dir, prefix="check.", suffix=TEMP_SUFFIX)
            try:
                os.write(fd, b"kvreg")
                os.fsync(fd)
            finally:
                os.close(fd)
                remove_quietly(name)
            if not os.access(self.objects_dir, os.W_OK | os.X_OK):
                raise PermissionError(f"{self.objects_dir} is not writable")
        except OSError as exc:
            raise UnavailableError(
                f"object storage at {self.root} is not writable: {exc}", path=str(self.root)
            ) from exc

    def probe(self) -> None:
        """A file in ``<root>/probe/`` written (and fsynced), read back and removed."""
        name = f"{os.getpid()}-{uuid.uuid4().hex}"
        path = self.root / PROBE_AREA / name
        data = probe_bytes(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                _write_probe(path, data)
                if path.read_bytes() != data:
                    raise OSError(f"the probe file {path} read back other bytes than were written")
            finally:
                remove_quietly(path)
        except OSError as exc:
            raise UnavailableError(
                f"object storage at {self.root} failed the probe: {exc}", path=str(self.root)
            ) from exc


def _write_probe(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(f: BinaryIO, start: int, end: int | None) -> Iterator[bytes]:
    with f:
        f.seek(start)
        remaining = None if end is None else end - start
        while remaining is None or remaining > 0:
            n = READ_PIECE if remaining is None else min(READ_PIECE, remaining)
            piece = f.read(n)
            if not piece:
                return
            if remaining is not None:
                remaining -= len(piece)
            yield piece
