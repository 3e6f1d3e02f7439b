"""The registry's object storage backends, each against the real thing.

Every behaviour test runs on both backends: a folder under ``tmp_path``, and S3 on
the SeaweedFS that ``scripts/services.sh`` starts (one bucket per test session,
one key prefix per test). Leftovers are checked behind the backend's back: temp
files on disk, temp keys and pending multipart uploads in the bucket.
"""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    ConfigError,
    DigestMismatchError,
    InvalidDigestError,
    ObjectNotFoundError,
    StoreError,
    UnavailableError,
)
from kvreg.fileio import directio
from kvreg_registry.storage import FolderStorage, ObjectStorage, open_storage
from kvreg_registry.storage import s3 as s3_module
from kvreg_registry.storage.base import READ_PIECE, PendingObject
from kvreg_registry.storage.s3 import S3Storage
from services import s3_client

MIB = 1 << 20
PART = 5 * MIB  # S3's smallest part; the S3 backend is configured with it here
LARGE = 12 * MIB + 123  # over the threshold: three parts, the last one short
MISSING = Digest.of_bytes(b"never stored")


def data_of(n: int, seed: int = 0) -> bytes:
    """``n`` pseudo-random bytes (different seeds, different bytes)."""
    out = bytearray()
    block = hashlib.sha256(f"kvreg-storage-{seed}".encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:n])


def pieces(data: bytes, size: int = 700_001) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def upload(storage: ObjectStorage, data: bytes, expected: Digest | None = None) -> bool:
    with storage.begin_upload() as pending:
        for piece in pieces(data):
            pending.write(piece)
        assert pending.size == len(data)
        return pending.commit(expected if expected is not None else Digest.of_bytes(data))


def read_all(storage: ObjectStorage, digest: Digest, start: int = 0, end: int | None = None) -> bytes:
    got = list(storage.read_range(digest, start, end))
    assert all(0 < len(p) <= READ_PIECE for p in got)
    return b"".join(got)


# --- the two backends -------------------------------------------------------------


class Backend:
    """A storage to test, and how to see what it left behind."""

    def __init__(self, name: str, storage: ObjectStorage, url: str, options: dict[str, Any]) -> None:
        self.name = name
        self.storage = storage
        self.url = url
        self.options = options

    def leftovers(self) -> list[str]:
        """Temp files, temp keys and pending multipart uploads: all that uploads leave behind."""
        s = self.storage
        if isinstance(s, FolderStorage):
            if not s.tmp_dir.exists():
                return []
            return sorted(p.name for p in s.tmp_dir.iterdir())
        assert isinstance(s, S3Storage)
        client = s.client
        keys = [
            item["Key"]
            for item in client.list_objects_v2(Bucket=s.bucket, Prefix=s.tmp_prefix).get("Contents", [])
        ]
        uploads = [
            "upload:" + u["Key"]
            for u in client.list_multipart_uploads(Bucket=s.bucket, Prefix=s.tmp_prefix).get("Uploads", [])
        ]
        return sorted(keys + uploads)

    def object_names(self) -> list[str]:
        """Everything under the object area, read directly (not through ``iter_objects``)."""
        s = self.storage
        if isinstance(s, FolderStorage):
            if not s.objects_dir.exists():
                return []
            return sorted(str(p.relative_to(s.objects_dir)) for p in s.objects_dir.rglob("*") if p.is_file())
        assert isinstance(s, S3Storage)
        listing = s.client.list_objects_v2(Bucket=s.bucket, Prefix=s.objects_prefix)
        return sorted(item["Key"][len(s.objects_prefix) :] for item in listing.get("Contents", []))


def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest, **extra: Any) -> Backend:
    if kind == "folder":
        root = tmp_path / "storage"
        return Backend(kind, open_storage(str(root)), str(root), {})
    bucket = request.getfixturevalue("s3_bucket")
    options: dict[str, Any] = {
        **request.getfixturevalue("s3_options"),
        "multipart_threshold": PART,
        "part_size": PART,
        **extra,
    }
    url = f"s3://{bucket}/t-{uuid.uuid4().hex[:12]}/"
    return Backend(kind, open_storage(url, **options), url, options)


@pytest.fixture(params=["folder", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path, request)


@pytest.fixture
def storage(backend: Backend) -> ObjectStorage:
    return backend.storage


# --- round trip ----------------------------------------------------------------------


def test_round_trip(backend: Backend) -> None:
    s = backend.storage
    data = data_of(3 * MIB + 17)
    d = Digest.of_bytes(data)
    assert not s.exists(d)
    before = time.time()
    assert upload(s, data) is True
    after = time.time()
    assert s.exists(d)
    assert s.size(d) == len(data)
    assert read_all(s, d) == data
    listed = {o.digest: o for o in s.iter_objects()}
    assert set(listed) == {d}
    assert listed[d].size == len(data)
    assert isinstance(listed[d].digest, Digest)
    assert before - 2 <= listed[d].mtime <= after + 2  # S3 timestamps have whole seconds
    # the same bytes again: not new, stored once, nothing left behind
    assert upload(s, data) is False
    assert [o.digest for o in s.iter_objects()] == [d]
    assert backend.leftovers() == []
    assert len(backend.object_names()) == 1


def test_empty_object(backend: Backend) -> None:
    s = backend.storage
    d = Digest.of_bytes(b"")
    with s.begin_upload() as pending:
        assert pending.commit(d) is True
    assert s.size(d) == 0
    assert read_all(s, d) == b""
    assert read_all(s, d, 0, 0) == b""
    assert backend.leftovers() == []


def test_nothing_visible_before_commit(backend: Backend) -> None:
    """Neither a small buffered upload nor a large one with parts already sent is visible."""
    s = backend.storage
    for data in (data_of(1000, seed=1), data_of(LARGE, seed=2)):
        d = Digest.of_bytes(data)
        with s.begin_upload() as pending:
            for piece in pieces(data):
                pending.write(piece)
            assert not s.exists(d)
            assert d not in {o.digest for o in s.iter_objects()}
            with pytest.raises(ObjectNotFoundError):
                s.read_range(d)
            if len(data) > PART:  # the parts are stored somewhere already, just not visible
                assert backend.leftovers() != []
            assert pending.commit(d) is True
        assert read_all(s, d) == data
    assert backend.leftovers() == []


# --- reading ranges -------------------------------------------------------------------


def test_read_range_edges(backend: Backend) -> None:
    s = backend.storage
    data = data_of(2 * MIB + MIB // 2 + 3, seed=3)
    n = len(data)
    d = Digest.of_bytes(data)
    upload(s, data)
    cases = [
        (0, None),
        (0, n),
        (0, 1),
        (1, None),
        (10, 20),
        (n - 1, None),
        (n - 1, n),
        (READ_PIECE - 1, READ_PIECE + 1),  # across a piece boundary
        (READ_PIECE, 2 * READ_PIECE),
        (0, 0),
        (5, 5),
        (n, n),
        (n, None),  # at the end: nothing
        (n + 10, None),  # past the end: nothing
        (n - 5, n + 100),  # end past the end: stops at the end, like a slice
        (0, n + 1),
    ]
    for start, end in cases:
        want = data[start:end]
        assert read_all(s, d, start, end) == want, (start, end)
    # the pieces are at most 1 MiB, and a full read needs more than one
    got = list(s.read_range(d))
    assert len(got) >= 3
    assert max(len(p) for p in got) <= READ_PIECE
    with pytest.raises(ValueError):
        s.read_range(d, -1)
    with pytest.raises(ValueError):
        s.read_range(d, 10, 5)


def test_read_range_can_stop_early(backend: Backend) -> None:
    s = backend.storage
    data = data_of(3 * MIB, seed=4)
    d = Digest.of_bytes(data)
    upload(s, data)
    it = s.read_range(d)
    first = next(it)
    assert first == data[: len(first)]
    it.close()  # type: ignore[attr-defined]  # a generator: closing it releases the file or connection
    assert read_all(s, d, 7, 9) == data[7:9]


def test_missing_object(backend: Backend) -> None:
    s = backend.storage
    assert not s.exists(MISSING)
    with pytest.raises(ObjectNotFoundError) as info:
        s.size(MISSING)
    assert info.value.code == "OBJECT_UNKNOWN"
    # raised by the call itself, before anything is iterated
    with pytest.raises(ObjectNotFoundError):
        s.read_range(MISSING)
    with pytest.raises(ObjectNotFoundError):
        s.read_range(MISSING, 3, 3)
    with pytest.raises(ObjectNotFoundError):
        s.read_range(MISSING, 10)
    assert s.delete(MISSING) is False
    assert list(s.iter_objects()) == []


def test_delete(backend: Backend) -> None:
    s = backend.storage
    keep, drop = data_of(100, seed=5), data_of(200, seed=6)
    upload(s, keep)
    upload(s, drop)
    assert s.delete(Digest.of_bytes(drop)) is True
    assert not s.exists(Digest.of_bytes(drop))
    assert s.delete(Digest.of_bytes(drop)) is False
    assert [o.digest for o in s.iter_objects()] == [Digest.of_bytes(keep)]
    # deleted bytes can be uploaded again, and are new again
    assert upload(s, drop) is True


# --- refusals: nothing stored, nothing left behind --------------------------------------


@pytest.mark.parametrize("size", [1000, LARGE], ids=["buffered", "multipart"])
def test_digest_mismatch_leaves_nothing(backend: Backend, size: int) -> None:
    s = backend.storage
    data = data_of(size, seed=7)
    wrong = Digest.of_bytes(b"something else")
    with pytest.raises(DigestMismatchError) as info:
        upload(s, data, expected=wrong)
    assert info.value.details["expected"] == wrong
    assert info.value.details["actual"] == Digest.of_bytes(data)
    assert not s.exists(wrong)
    assert not s.exists(Digest.of_bytes(data))
    assert list(s.iter_objects()) == []
    assert backend.object_names() == []
    assert backend.leftovers() == []


def test_abort_leaves_nothing(backend: Backend) -> None:
    s = backend.storage
    data = data_of(LARGE, seed=8)
    with pytest.raises(RuntimeError, match="client went away"), s.begin_upload() as pending:
        for piece in pieces(data):
            pending.write(piece)
        raise RuntimeError("client went away")
    # leaving the block without a commit aborts too
    with s.begin_upload() as pending:
        pending.write(data[:100])
    assert backend.leftovers() == []
    assert list(s.iter_objects()) == []


def test_pending_state_machine(backend: Backend) -> None:
    s = backend.storage
    pending = s.begin_upload()
    pending.write(b"abc")
    assert pending.size == 3
    assert pending.commit(Digest.of_bytes(b"abc")) is True
    pending.abort()  # a committed upload stays committed
    assert s.exists(Digest.of_bytes(b"abc"))
    with pytest.raises(ValueError):
        pending.write(b"more")
    with pytest.raises(ValueError):
        pending.commit(Digest.of_bytes(b"abc"))
    other = s.begin_upload()
    other.write(b"x")
    other.abort()
    other.abort()  # idempotent
    with pytest.raises(ValueError):
        other.commit(Digest.of_bytes(b"x"))
    # a mismatch aborts: the upload cannot be retried with another digest
    third = s.begin_upload()
    third.write(b"y")
    with pytest.raises(DigestMismatchError):
        third.commit(MISSING)
    with pytest.raises(ValueError):
        third.commit(Digest.of_bytes(b"y"))
    # What a commit leaves to tidy (the folder's temp name) goes when the upload is closed, which
    # callers do after their write transaction; close() is idempotent and keeps the object.
    pending.close()
    pending.close()
    assert backend.leftovers() == []
    assert s.exists(Digest.of_bytes(b"abc"))


class PieceReader:
    """A body in odd-sized pieces, as a socket gives it; fails after ``fail_after`` bytes if set."""

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self.data, self.pos, self.fail_after, self.calls = data, 0, fail_after, 0

    def __call__(self, view: memoryview) -> int:
        self.calls += 1
        if self.fail_after is not None and self.pos >= self.fail_after:
            raise ConnectionResetError("the client went away")
        n = min(len(view), len(self.data) - self.pos, (self.calls * 650_011) % (3 * MIB) + 1)
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


@pytest.mark.parametrize("size", [0, 1, 8 * MIB, LARGE], ids=["empty", "one", "buffer", "large"])
def test_receive_reads_hashes_and_stores_every_byte(backend: Backend, size: int) -> None:
    s = backend.storage
    data = data_of(size, seed=11)
    with s.begin_upload() as pending:
        pending.receive(PieceReader(data))
        assert pending.size == size and pending.digest == Digest.of_bytes(data)
        assert pending.commit(Digest.of_bytes(data)) is True
    assert read_all(s, Digest.of_bytes(data)) == data
    assert backend.leftovers() == []


def test_a_reader_that_fails_leaves_nothing(backend: Backend) -> None:
    s = backend.storage
    data = data_of(LARGE, seed=12)
    pending = s.begin_upload()
    with pytest.raises(ConnectionResetError):
        pending.receive(PieceReader(data, fail_after=9 * MIB))
    with pytest.raises(ValueError, match="aborted"):
        pending.commit(Digest.of_bytes(data))
    assert backend.leftovers() == []
    assert list(s.iter_objects()) == []


class MemoryPending(PendingObject):
    """The base class's own receive path (what S3 uses): pieces kept in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[bytes] = []
        self.discarded = False

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.pieces.append(bytes(data))

    def _publish(self, digest: Digest) -> bool:
        return True

    def _discard(self) -> None:
        self.discarded = True


class CountingPool(directio.BufferPool):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.out = 0

    def acquire(self) -> Any:
        self.out += 1
        return super().acquire()

    def release(self, buffer: Any) -> None:
        self.out -= 1
        super().release(buffer)


@pytest.mark.parametrize("size", [0, 1, 256 * 1024, 3 * 256 * 1024 + 7])
def test_receive_by_default_stores_full_pool_buffers_then_the_rest(size: int) -> None:
    pool = CountingPool(256 * 1024)
    data = data_of(size, seed=15)
    pending = MemoryPending()
    pending.receive(PieceReader(data), pool=pool)
    assert b"".join(pending.pieces) == data and pending.size == size
    want = [min(pool.size, size - i) for i in range(0, size, pool.size)]
    assert [len(p) for p in pending.pieces] == want
    assert pending.commit(Digest.of_bytes(data)) is True
    # a reader that fails aborts the upload, and the buffer goes back to the pool either way
    failing = MemoryPending()
    with pytest.raises(ConnectionResetError):
        failing.receive(PieceReader(data + b"x", fail_after=size), pool=pool)
    assert failing.discarded and pool.out == 0


def test_a_failed_disk_write_aborts_the_folder_upload_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full buffers are written by a disk thread while the body is read on (kvreg.fileio.directio):
    an error there aborts ``receive`` with that same error, and the temp file is gone."""
    real = os.pwrite

    def failing(fd: int, data: memoryview, at: int) -> int:
        if threading.current_thread().name.startswith("kvreg-disk"):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, data, at)

    monkeypatch.setattr(directio.os, "pwrite", failing)
    storage = FolderStorage(tmp_path / "storage")
    storage.buffers = directio.BufferPool(256 * 1024)
    data = data_of(2 * MIB + 5, seed=14)
    pending = storage.begin_upload()
    with pytest.raises(OSError) as caught:
        pending.receive(PieceReader(data))
    assert caught.value.errno == errno.EIO
    assert list(storage.tmp_dir.iterdir()) == []
    with pytest.raises(ValueError, match="aborted"):
        pending.commit(Digest.of_bytes(data))
    assert list(storage.iter_objects()) == []


def test_seal_checks_the_digest_before_commit_publishes(backend: Backend) -> None:
    s = backend.storage
    data = data_of(3000, seed=13)
    d = Digest.of_bytes(data)
    pending = s.begin_upload()
    pending.write(data)
    pending.seal(d)
    pending.seal(d)  # idempotent
    assert not s.exists(d)  # sealed is not visible
    with pytest.raises(ValueError, match="sealed"):
        pending.write(b"more")
    assert pending.commit(d) is True and read_all(s, d) == data
    pending.close()
    # a sealed upload that is never committed leaves nothing
    other = s.begin_upload()
    other.write(b"abc")
    other.seal(Digest.of_bytes(b"abc"))
    other.abort()
    assert not s.exists(Digest.of_bytes(b"abc"))
    # a wrong digest at seal discards everything
    third = s.begin_upload()
    third.write(b"xyz")
    with pytest.raises(DigestMismatchError):
        third.seal(MISSING)
    with pytest.raises(ValueError, match="aborted"):
        third.commit(Digest.of_bytes(b"xyz"))
    assert backend.leftovers() == []


BAD_DIGESTS = [
    "sha256:../../etc/passwd",
    "sha256:../../../../etc/" + "a" * 52,
    "../" + "a" * 64,
    "sha256:" + "A" * 64,
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 63 + "/",
    "sha256:" + "a" * 65,
    "sha512:" + "a" * 64,
    "sha256:" + "a" * 62 + "/x",
    " sha256:" + "a" * 64,
    "sha256:" + "a" * 64 + "\n",
    "",
]


@pytest.mark.parametrize("bad", BAD_DIGESTS)
def test_invalid_digests_refused(backend: Backend, bad: str) -> None:
    s = backend.storage
    calls: list[Callable[[], object]] = [
        lambda: s.exists(bad),  # type: ignore[arg-type]
        lambda: s.size(bad),  # type: ignore[arg-type]
        lambda: s.read_range(bad),  # type: ignore[arg-type]
        lambda: s.delete(bad),  # type: ignore[arg-type]
        lambda: s.presigned_url(bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidDigestError):
            call()
    pending = s.begin_upload()
    pending.write(b"etc")
    with pytest.raises(InvalidDigestError):
        pending.commit(bad)  # type: ignore[arg-type]
    assert backend.leftovers() == []
    assert backend.object_names() == []


def test_traversal_cannot_escape_the_folder(tmp_path: Path) -> None:
    """A digest-shaped name never leaves ``objects/``: the path is built from validated hex only."""
    s = FolderStorage(tmp_path / "storage")
    secret = tmp_path / "secret"
    secret.write_bytes(b"not an object")
    for bad in ["sha256:../secret", "sha256:../../secret" + "0" * 50]:
        with pytest.raises(InvalidDigestError):
            s.size(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidDigestError):
            s.delete(bad)  # type: ignore[arg-type]
    assert secret.read_bytes() == b"not an object"
    d = Digest.of_bytes(b"x")
    assert s.path_for(d) == tmp_path / "storage" / "objects" / d.hex[:2] / d.hex[2:]


# --- large objects ------------------------------------------------------------------------


def test_large_object(backend: Backend) -> None:
    s = backend.storage
    data = data_of(LARGE, seed=9)
    d = Digest.of_bytes(data)
    assert upload(s, data) is True
    assert s.size(d) == LARGE
    got = read_all(s, d)
    assert hashlib.sha256(got).hexdigest() == d.hex
    assert read_all(s, d, PART - 3, PART + 3) == data[PART - 3 : PART + 3]
    assert backend.leftovers() == []
    assert upload(s, data) is False
    assert backend.leftovers() == []


def test_s3_multipart_copy_path(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: Any) -> None:
    """Objects over 5 GiB go through boto3's managed (multipart) copy; exercised here on 12 MiB."""
    monkeypatch.setattr(s3_module, "MAX_SINGLE_COPY", MIB)
    backend = make_backend("s3", tmp_path, request)
    s = backend.storage
    data = data_of(LARGE, seed=10)
    d = Digest.of_bytes(data)
    assert upload(s, data) is True
    assert read_all(s, d) == data
    assert upload(s, data) is False
    assert backend.leftovers() == []


def test_s3_part_size_grows(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: Any) -> None:
    """Past a thousand parts the part size doubles, so an upload never hits S3's 10,000-part limit."""
    monkeypatch.setattr(s3_module, "_PARTS_PER_SIZE", 1)
    backend = make_backend("s3", tmp_path, request)
    s = backend.storage
    data = data_of(4 * PART + 1, seed=11)  # parts of 5, 10 MiB, then 5 MiB + 1 at commit
    assert upload(s, data) is True
    assert read_all(s, Digest.of_bytes(data)) == data
    assert backend.leftovers() == []


# --- concurrency -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1000, 6 * MIB], ids=["buffered", "multipart"])
def test_concurrent_commits_of_one_digest(backend: Backend, size: int) -> None:
    """8 threads commit the same bytes at once: all succeed, one reports them new, stored once."""
    s = backend.storage
    data = data_of(size, seed=12)
    d = Digest.of_bytes(data)
    barrier = threading.Barrier(8)

    def one() -> bool:
        with s.begin_upload() as pending:
            for piece in pieces(data):
                pending.write(piece)
            barrier.wait(timeout=60)
            return pending.commit(d)

    with ThreadPoolExecutor(8) as pool:
        results = [f.result() for f in [pool.submit(one) for _ in range(8)]]
    assert results.count(True) == 1, results
    assert [o.digest for o in s.iter_objects()] == [d]
    assert len(backend.object_names()) == 1
    assert read_all(s, d) == data
    assert backend.leftovers() == []


def sealed_uploads(storage: ObjectStorage, blobs: list[bytes]) -> list[tuple[PendingObject, Digest]]:
    out = []
    for data in blobs:
        pending = storage.begin_upload()
        pending.write(data)
        digest = Digest.of_bytes(data)
        pending.seal(digest)
        out.append((pending, digest))
    return out


def test_commit_many_publishes_every_upload_and_leaves_nothing(backend: Backend) -> None:
    s = backend.storage
    blobs = [data_of(size, seed=40 + i) for i, size in enumerate((0, 1, 5000, LARGE))]
    assert upload(s, blobs[1]) is True  # already stored: reported as not new
    uploads = sealed_uploads(s, blobs)
    stored = s.commit_many(uploads)
    assert stored == [True, False, True, True]
    for data in blobs:
        assert read_all(s, Digest.of_bytes(data)) == data
    for pending, _ in uploads:  # as a pack's receiver does, after its write transaction
        pending.close()
    assert backend.leftovers() == []
    assert s.commit_many([]) == []


def test_folder_commit_many_fsyncs_each_new_folder_once_after_the_last_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvreg_registry.storage import folder as folder_module

    s = FolderStorage(tmp_path / "storage")
    blobs = [data_of(1000, seed=50 + i) for i in range(12)]
    upload(s, blobs[0])
    uploads = sealed_uploads(s, blobs)
    events: list[tuple[str, Path]] = []
    real_link = os.link
    monkeypatch.setattr(folder_module, "fsync_dir", lambda path: events.append(("fsync", Path(path))))

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        events.append(("link", Path(dst)))
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link)
    assert s.commit_many(uploads) == [False] + [True] * 11
    links = [path for kind, path in events if kind == "link"]
    fsyncs = [path for kind, path in events if kind == "fsync"]
    assert len(links) == 12
    assert sorted(fsyncs) == sorted({s.path_for(Digest.of_bytes(b)).parent for b in blobs[1:]})
    assert [kind for kind, _ in events] == ["link"] * 12 + ["fsync"] * len(fsyncs)
    # The temp names wait for close(), which the caller does after its write transaction: their
    # removal (of a whole file for an object stored already) is not done under the write lock.
    assert len(list(s.tmp_dir.iterdir())) == 12
    for pending, _ in uploads:
        pending.close()
    assert list(s.tmp_dir.iterdir()) == []


def test_folder_commit_many_failing_midway_keeps_the_first_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = FolderStorage(tmp_path / "storage")
    blobs = [data_of(1000, seed=60 + i) for i in range(3)]
    uploads = sealed_uploads(s, blobs)
    real_link = os.link
    refused = s.path_for(Digest.of_bytes(blobs[1]))

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        if Path(dst) == refused:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", link)  # the fallback of a refused link fails the same way
    with pytest.raises(StoreError, match="No space left"):
        s.commit_many(uploads)
    for pending, _ in uploads:
        pending.close()  # as the pack's receiver does: discards the ones not committed
    assert s.exists(Digest.of_bytes(blobs[0]))
    assert not s.exists(Digest.of_bytes(blobs[1])) and not s.exists(Digest.of_bytes(blobs[2]))
    assert list(s.tmp_dir.iterdir()) == []


def test_s3_unconditional_writes_still_store_once(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Without If-None-Match (stores that lack it) racing commits may all say "new", but all
    succeed and the key holds the right bytes once."""
    backend = make_backend("s3", tmp_path, request, conditional_writes=False)
    s = backend.storage
    data = data_of(6 * MIB, seed=13)
    d = Digest.of_bytes(data)
    barrier = threading.Barrier(8)

    def one() -> bool:
        with s.begin_upload() as pending:
            pending.write(data)
            barrier.wait(timeout=60)
            return pending.commit(d)

    with ThreadPoolExecutor(8) as pool:
        results = [f.result() for f in [pool.submit(one) for _ in range(8)]]
    assert results.count(True) >= 1, results
    assert [o.digest for o in s.iter_objects()] == [d]
    assert read_all(s, d) == data
    assert backend.leftovers() == []


def _commit_in_process(url: str, options: dict[str, Any], data: bytes, start_at: float) -> bool:
    storage = open_storage(url, **options)
    with storage.begin_upload() as pending:
        pending.write(data)
        time.sleep(max(0.0, start_at - time.time()))
        return pending.commit(Digest.of_bytes(data))


def test_concurrent_commits_from_processes(backend: Backend) -> None:
    data = data_of(2000, seed=14)
    d = Digest.of_bytes(data)
    start_at = time.time() + 4  # the processes start, import, then commit at the same moment
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(_commit_in_process, backend.url, backend.options, data, start_at) for _ in range(4)
        ]
        results = [f.result(timeout=120) for f in futures]
    assert results.count(True) == 1, results
    assert [o.digest for o in backend.storage.iter_objects()] == [d]
    assert read_all(backend.storage, d) == data
    assert backend.leftovers() == []


# --- presigned URLs ---------------------------------------------------------------------------


def test_presigned_url(backend: Backend) -> None:
    s = backend.storage
    data = data_of(MIB + 5, seed=15)
    d = Digest.of_bytes(data)
    upload(s, data)
    url = s.presigned_url(d, expires_s=60)
    if backend.name == "folder":
        assert url is None
        return
    assert url is not None
    resp = httpx.get(url, timeout=30)
    assert resp.status_code == 200
    assert resp.content == data
    ranged = httpx.get(url, headers={"Range": "bytes=3-9"}, timeout=30)
    assert ranged.status_code == 206
    assert ranged.content == data[3:10]
    # without the signature the bucket does not serve it
    assert httpx.get(url.split("?")[0], timeout=30).status_code in (401, 403)


# --- crashed uploads -----------------------------------------------------------------------------


def test_sweep_incomplete(backend: Backend) -> None:
    s = backend.storage
    kept = data_of(300, seed=16)
    upload(s, kept)
    # "crashed" uploads: begun, written, never committed nor aborted
    crashed = [s.begin_upload(), s.begin_upload()]
    crashed[0].write(data_of(100, seed=17))
    for piece in pieces(data_of(LARGE, seed=18)):
        crashed[1].write(piece)
    expected = 2  # folder: two temp files
    if isinstance(s, S3Storage):
        # a crash after completing the multipart upload, before deleting the temp key
        s.client.put_object(Bucket=s.bucket, Key=s.tmp_key(), Body=b"orphan")
        expected = 2  # one pending multipart upload (the small one is only in memory) + the temp key
    assert len(backend.leftovers()) == expected
    assert s.sweep_incomplete(3600) == 0  # too young
    assert len(backend.leftovers()) == expected
    time.sleep(2.1)  # S3 timestamps have whole seconds
    assert s.sweep_incomplete(1) == expected
    assert backend.leftovers() == []
    assert [o.digest for o in s.iter_objects()] == [Digest.of_bytes(kept)]
    assert read_all(s, Digest.of_bytes(kept)) == kept
    assert s.sweep_incomplete(0) == 0


def test_iter_objects_skips_foreign_names(backend: Backend) -> None:
    s = backend.storage
    data = data_of(10, seed=19)
    upload(s, data)
    d = Digest.of_bytes(data)
    foreign = ["zz/" + "a" * 62, d.hex[:2] + "/short", d.hex[:2] + "/" + "A" * 62, "README"]
    if isinstance(s, FolderStorage):
        for name in foreign:
            path = s.objects_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"junk")
    else:
        assert isinstance(s, S3Storage)
        for name in foreign:
            s.client.put_object(Bucket=s.bucket, Key=s.objects_prefix + name, Body=b"junk")
    assert [o.digest for o in s.iter_objects()] == [d]


# --- health checks --------------------------------------------------------------------------------


def test_check(backend: Backend) -> None:
    backend.storage.check()
    assert backend.leftovers() == []


def test_check_folder_unusable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"a file where the storage folder should be")
    with pytest.raises(UnavailableError):
        FolderStorage(blocker).check()
    with pytest.raises(UnavailableError):
        FolderStorage(blocker / "below").begin_upload()


def test_check_s3_unusable(s3_options: dict[str, str]) -> None:
    missing_bucket = open_storage(f"s3://kvreg-absent-{uuid.uuid4().hex[:12]}", **s3_options)
    with pytest.raises(UnavailableError) as info:
        missing_bucket.check()
    assert info.value.code == "UNAVAILABLE"
    wrong_key = open_storage(
        f"s3://kvreg-absent-{uuid.uuid4().hex[:12]}", **{**s3_options, "secret_key": "wrong"}
    )
    with pytest.raises(UnavailableError):
        wrong_key.check()
    closed = open_storage("s3://kvreg-any", **{**s3_options, "endpoint_url": "http://127.0.0.1:9"})
    with pytest.raises(UnavailableError):
        closed.check()
    with pytest.raises(UnavailableError):
        closed.exists(MISSING)


def test_s3_bucket_really_holds_the_bytes(backend: Backend) -> None:
    """Read behind the backend's back: the object is at ``<prefix>objects/ab/<62 hex>``."""
    if backend.name != "s3":
        s = backend.storage
        assert isinstance(s, FolderStorage)
        data = b"on disk"
        upload(s, data)
        path = s.path_for(Digest.of_bytes(data))
        assert path.read_bytes() == data
        assert path.stat().st_mode & 0o777 == 0o444
        return
    s = backend.storage
    assert isinstance(s, S3Storage)
    data = b"in the bucket"
    d = Digest.of_bytes(data)
    upload(s, data)
    raw = s3_client(backend.options)  # type: ignore[arg-type]
    key = f"{s.prefix}objects/{d.hex[:2]}/{d.hex[2:]}"
    assert raw.get_object(Bucket=s.bucket, Key=key)["Body"].read() == data


# --- open_storage ----------------------------------------------------------------------------------


def test_open_storage_folder(tmp_path: Path, monkeypatch: Any) -> None:
    s = open_storage(f"file://{tmp_path}/a")
    assert isinstance(s, FolderStorage)
    assert s.kind == "folder"
    assert s.root == tmp_path / "a"
    assert s.redirect is False
    monkeypatch.chdir(tmp_path)
    rel = open_storage("rel/objects")
    assert isinstance(rel, FolderStorage)
    assert rel.root == tmp_path / "rel" / "objects"
    assert open_storage(str(tmp_path / "b"), endpoint_url=None).kind == "folder"  # None: not given


def test_open_storage_s3() -> None:
    s = open_storage(
        "s3://my-bucket/some/prefix",
        endpoint_url="http://127.0.0.1:9",
        access_key="a",
        secret_key="b",
        redirect="1",
        multipart_threshold="6291456",
        part_size=6 * MIB,
        max_concurrency=4,
    )
    assert isinstance(s, S3Storage)
    assert s.kind == "s3"
    assert (s.bucket, s.prefix) == ("my-bucket", "some/prefix/")
    assert s.redirect is True
    assert (s.multipart_threshold, s.part_size, s.max_concurrency) == (6 * MIB, 6 * MIB, 4)
    d = Digest.of_bytes(b"k")
    assert s.object_key(d) == f"some/prefix/objects/{d.hex[:2]}/{d.hex[2:]}"
    assert s.tmp_key().startswith("some/prefix/tmp/")
    bare = open_storage("s3://bucket")
    assert isinstance(bare, S3Storage)
    assert bare.prefix == ""
    assert bare.object_key(d) == f"objects/{d.hex[:2]}/{d.hex[2:]}"
    assert bare.redirect is False
    assert isinstance(open_storage("s3://bucket/"), S3Storage)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("", {}),
        ("   ", {}),
        ("http://example.com/x", {}),
        ("gs://bucket/x", {}),
        ("file://host/abs", {}),
        ("file://relative", {}),
        ("s3://Bad_Bucket/x", {}),
        ("s3://ab/x", {}),
        ("s3://bucket..x/y", {}),
        ("s3:///prefix", {}),
        ("s3://bucket/../x", {}),
        ("s3://bucket/a/../b", {}),
        ("s3://bucket/a//b", {}),
        ("s3://bucket//", {}),
        ("s3://bucket/a b", {}),
        ("s3://bucket/x?versionId=1", {}),
        ("s3://bucket/x#frag", {}),
        ("s3://user:pw@bucket/x", {}),
        ("s3://bucket:9000/x", {}),
        ("s3://bucket/x", {"endpoint": "http://x"}),
        ("s3://bucket/x", {"part_size": MIB}),
        ("s3://bucket/x", {"part_size": "big"}),
        ("s3://bucket/x", {"multipart_threshold": 0}),
        ("s3://bucket/x", {"max_concurrency": 0}),
        ("s3://bucket/x", {"redirect": "maybe"}),
        ("s3://bucket/x", {"access_key": "only-one"}),
        ("s3://bucket/x", {"region": 5}),
        ("/some/folder", {"endpoint_url": "http://x"}),
    ],
)
def test_open_storage_refuses(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        open_storage(url, **options)


def test_open_storage_does_not_import_boto3_for_folders(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from kvreg_registry.storage import open_storage; "
        f"open_storage({str(tmp_path)!r}).check(); print('boto3' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "False"
