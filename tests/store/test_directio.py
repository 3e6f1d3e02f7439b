"""AlignedWriter: the bytes on disk are exactly the bytes written, whatever the piece sizes,
the start offset, the flushes or the filesystem's support of O_DIRECT; buffers are pooled;
full buffers are written behind the caller, in order, one at a time, and a failed background
write surfaces at the next call."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvreg.fileio import directio
from kvreg.fileio.directio import ALIGN, AlignedWriter, BufferPool, o_direct_supported

SMALL = 4 * ALIGN  # small buffers, so that a few KiB of data crosses many flushes


def write_pieces(path: Path, data: bytes, pieces: list[int], *, start: int = 0, pool: BufferPool) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        writer = AlignedWriter(fd, offset=start, pool=pool)
        pos = 0
        for n in pieces:
            writer.write(data[pos : pos + n])
            pos += n
        writer.write(data[pos:])
        writer.close()
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("seed", range(6))
def test_random_pieces_give_the_exact_bytes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(rng.randrange(1, 20 * SMALL))
    pieces = [rng.choice([1, 7, ALIGN - 1, ALIGN, ALIGN + 3, SMALL, 3 * SMALL]) for _ in range(30)]
    path = tmp_path / "out"
    write_pieces(path, data, pieces, pool=BufferPool(SMALL))
    assert path.read_bytes() == data


@pytest.mark.parametrize("start", [1, ALIGN - 1, ALIGN, ALIGN + 5, 3 * SMALL + 17])
def test_appending_after_a_kept_prefix(tmp_path: Path, start: int) -> None:
    """A resumed download keeps the first bytes and appends from an offset on no block boundary."""
    rng = random.Random(start)
    data = rng.randbytes(start + 5 * SMALL + 123)
    path = tmp_path / "out"
    path.write_bytes(data[:start])
    fd = os.open(path, os.O_RDWR)
    try:
        writer = AlignedWriter(fd, offset=start, pool=BufferPool(SMALL))
        writer.write(data[start:])
        writer.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == data


def test_reading_into_the_free_space(tmp_path: Path) -> None:
    """The socket path: bytes land in ``free()`` and are reported to ``advance``."""
    rng = random.Random(7)
    data = rng.randbytes(7 * SMALL + 999)
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        writer = AlignedWriter(fd, pool=BufferPool(SMALL))
        pos = 0
        while pos < len(data):
            view = writer.free()
            assert len(view) > 0
            n = min(len(view), rng.randrange(1, 2 * ALIGN), len(data) - pos)
            view[:n] = data[pos : pos + n]
            writer.advance(n)
            pos += n
        with pytest.raises(ValueError, match="cannot advance"):
            writer.advance(len(writer.free()) + 1)
        writer.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == data


def test_whole_buffers_bypass_the_page_cache_where_the_filesystem_allows(tmp_path: Path) -> None:
    """On a filesystem with O_DIRECT the writer switches it on for whole blocks and off for the
    tail; elsewhere it never manages to switch it on, and the bytes are the same."""
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    seen: list[bool] = []
    real_pwrite = os.pwrite

    def spy(fd_: int, data: memoryview, at: int) -> int:
        seen.append(bool(fcntl.fcntl(fd_, fcntl.F_GETFL) & os.O_DIRECT))
        return real_pwrite(fd_, data, at)

    data = os.urandom(2 * SMALL + 10)
    try:
        writer = AlignedWriter(fd, pool=BufferPool(SMALL))
        directio.os.pwrite = spy  # type: ignore[attr-defined]
        try:
            writer.write(data)
            writer.close()
        finally:
            directio.os.pwrite = real_pwrite  # type: ignore[attr-defined]
    finally:
        os.close(fd)
    assert path.read_bytes() == data
    if o_direct_supported(tmp_path):
        assert seen[:2] == [True, True] and seen[-1] is False  # two whole buffers, then the tail
    else:
        assert not any(seen)


def test_a_filesystem_that_refuses_o_direct_at_write_gets_plain_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some filesystems accept the flag and refuse the write (EINVAL): the writer falls back
    for good and loses no byte."""
    real_pwrite = os.pwrite
    refused: list[int] = []

    def refuse_direct(fd: int, data: memoryview, at: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, at)

    monkeypatch.setattr(directio.os, "pwrite", refuse_direct)
    data = os.urandom(5 * SMALL + 3)
    path = tmp_path / "out"
    write_pieces(path, data, [SMALL, 100, SMALL], pool=BufferPool(SMALL))
    assert path.read_bytes() == data
    if o_direct_supported(tmp_path):
        assert len(refused) == 1  # tried once, then never again


def test_release_drops_what_is_buffered(tmp_path: Path) -> None:
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    pool = BufferPool(SMALL)
    try:
        writer = AlignedWriter(fd, pool=pool)
        writer.write(b"x" * (SMALL + 5))  # one buffer written, 5 bytes held
        writer.release()
        writer.release()  # idempotent
        writer.close()  # nothing left to write
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * SMALL


def test_the_pool_reuses_buffers_and_keeps_a_bounded_number() -> None:
    pool = BufferPool(ALIGN, keep=2)
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    for buf in (a, b, c):
        pool.release(buf)
    assert c.closed and not a.closed and not b.closed  # the third was beyond ``keep``
    assert {id(pool.acquire()), id(pool.acquire())} == {id(a), id(b)}
    with pytest.raises(ValueError, match="multiple of"):
        BufferPool(ALIGN + 1)


@pytest.mark.parametrize("tail", [0, 1, ALIGN - 1])
def test_an_aligned_buffer_is_written_without_a_copy(
    tmp_path: Path, tail: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole blocks of a page-aligned buffer at a block boundary go to the file straight from it;
    the rest is buffered as usual, and the bytes are the same either way."""
    pool, sources = BufferPool(SMALL), BufferPool(2 * SMALL)
    source = sources.acquire()
    data = os.urandom(2 * SMALL)
    source[:] = data
    view = memoryview(source)
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    written: list[int] = []
    real_pwrite = os.pwrite

    def spy(fd_: int, chunk: memoryview, at: int) -> int:
        written.append(len(chunk))
        return real_pwrite(fd_, chunk, at)

    monkeypatch.setattr(directio.os, "pwrite", spy)
    try:
        writer = AlignedWriter(fd, pool=pool)
        writer.write(view[: SMALL + tail])  # aligned start, whole blocks then a tail
        writer.write(view[SMALL + tail :])  # the tail made the offset unaligned: copied
        writer.close()
    finally:
        os.close(fd)
        view.release()
        sources.release(source)
    assert path.read_bytes() == data
    if o_direct_supported(tmp_path):
        assert written[0] == SMALL  # the first whole blocks, from the caller's buffer


def test_bytes_and_unaligned_views_are_copied(tmp_path: Path) -> None:
    pool = BufferPool(SMALL)
    source = pool.acquire()
    source[:] = os.urandom(SMALL)
    view = memoryview(source)
    path = tmp_path / "out"
    try:
        write_pieces(path, bytes(view[1:]) + b"x", [], pool=pool)  # read-only bytes
        assert path.read_bytes() == bytes(view[1:]) + b"x"
        fd = os.open(path, os.O_RDWR | os.O_TRUNC)
        try:
            writer = AlignedWriter(fd, pool=pool)
            writer.write(view[1:])  # writable, but not on a page boundary
            writer.close()
        finally:
            os.close(fd)
        assert path.read_bytes() == bytes(view[1:])
    finally:
        view.release()
        pool.release(source)


# --- write-behind -------------------------------------------------------------------------


class Spy:
    """Records every completed ``os.pwrite`` of the writer: (offset, length, thread name), in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int, str]] = []
        self.real = os.pwrite
        monkeypatch.setattr(directio.os, "pwrite", self)

    def __call__(self, fd: int, data: memoryview, at: int) -> int:
        n = self.real(fd, data, at)  # a write refused (EINVAL with O_DIRECT) is not recorded
        self.calls.append((at, n, threading.current_thread().name))
        return n


def open_file(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    yield from open_file(tmp_path / "out")


def test_many_buffer_tail_offset_and_flush_combinations_give_the_exact_bytes_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property-style: random buffer sizes, start offsets (a kept prefix), piece sizes, both ways
    of filling, flushes anywhere (also while a ``free()`` view is held, as a stalled download
    does), O_DIRECT on and off. The file holds exactly the bytes given, every byte is written
    once, the writes tile the file in increasing order, and ``offset`` is the bytes in the file."""
    spy = Spy(monkeypatch)
    rng = random.Random(2026)
    for case in range(150):
        size = rng.choice([ALIGN, 2 * ALIGN, SMALL])
        start = rng.choice([0, 1, 100, ALIGN - 1, ALIGN, ALIGN + 5, size, size + 17])
        direct = rng.random() < 0.8
        data = rng.randbytes(rng.randrange(0, 5 * size))
        prefix = rng.randbytes(start)
        path = tmp_path / f"case-{case}"
        path.write_bytes(prefix)
        spy.calls.clear()
        for fd in open_file(path):
            writer = AlignedWriter(fd, offset=start, pool=BufferPool(size), direct=direct)
            assert writer.offset == start
            pos = 0
            while pos < len(data):
                if rng.random() < 0.5:
                    n = min(rng.choice([1, 7, ALIGN - 1, ALIGN, ALIGN + 3, size, 2 * size]), len(data) - pos)
                    writer.write(data[pos : pos + n])
                else:
                    view = writer.free()
                    n = min(len(view), rng.randrange(1, 2 * ALIGN), len(data) - pos)
                    if rng.random() < 0.2:
                        writer.flush()  # the view stays valid
                    view[:n] = data[pos : pos + n]
                    writer.advance(n)
                pos += n
                if rng.random() < 0.1:
                    writer.flush()
                    assert writer.offset == start + pos
                    assert path.read_bytes() == prefix + data[:pos]
            writer.close()
            assert writer.offset == start + len(data)
        assert path.read_bytes() == prefix + data, case
        ends = [start]
        for at, n, _ in spy.calls:
            assert at == ends[-1], (case, spy.calls)  # in order, nothing written twice, no gap
            ends.append(at + n)
        assert ends[-1] == start + len(data)


def test_full_buffers_are_written_by_a_disk_thread_and_the_rest_by_the_caller(
    fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    data = os.urandom(3 * SMALL + 10)
    writer = AlignedWriter(fd, pool=BufferPool(SMALL))
    writer.write(data)  # three full buffers handed off as the fourth starts filling
    writer.close()
    assert (tmp_path / "out").read_bytes() == data
    threads = [name for _, _, name in spy.calls]
    assert all(name.startswith("kvreg-disk") for name in threads[:3]), threads
    assert threads[-1] == threading.current_thread().name  # the tail, by close()


class FailOnce:
    """``os.pwrite`` that fails once with ``err`` on a disk thread (then works)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, err: int = errno.ENOSPC) -> None:
        self.real, self.err, self.failed = os.pwrite, err, 0
        monkeypatch.setattr(directio.os, "pwrite", self)

    def __call__(self, fd: int, data: memoryview, at: int) -> int:
        if not self.failed and threading.current_thread().name.startswith("kvreg-disk"):
            self.failed += 1
            raise OSError(self.err, os.strerror(self.err))
        return self.real(fd, data, at)


@pytest.mark.parametrize("next_call", ["free", "write", "flush", "close"])
def test_a_failed_background_write_surfaces_at_the_next_call_and_is_written_again_after(
    fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, next_call: str
) -> None:
    fail = FailOnce(monkeypatch)
    data = os.urandom(2 * SMALL + 99)
    pool = BufferPool(SMALL)
    writer = AlignedWriter(fd, pool=pool)
    writer.write(data[: SMALL + 1])  # the first buffer goes to a disk thread, and fails there
    assert writer.offset == 0
    with pytest.raises(OSError) as caught:
        if next_call == "free":
            writer.write(data[SMALL + 1 : 2 * SMALL])
            writer.free()  # the second buffer is full: waits for the first write
        else:
            getattr(writer, next_call)(*([data[SMALL + 1 :]] if next_call == "write" else []))
            if next_call == "write":
                writer.free()
    assert caught.value.errno == errno.ENOSPC and fail.failed == 1
    if next_call == "close":
        assert writer.offset == 0  # closed without the failed bytes: the file holds none of them
        assert (tmp_path / "out").read_bytes() == b""
        return
    writer.close()  # the failed buffer is written again (here), then the rest
    assert (tmp_path / "out").read_bytes()[: SMALL + 1] == data[: SMALL + 1]
    assert writer.offset == os.fstat(fd).st_size


def test_release_waits_for_the_write_in_flight_before_giving_its_buffer_back(
    fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    gate, started = threading.Event(), threading.Event()
    real = os.pwrite

    def slow(fd_: int, data: memoryview, at: int) -> int:
        if threading.current_thread().name.startswith("kvreg-disk"):
            started.set()
            gate.wait(30)
            n = real(fd_, data, at)
            events.append("written")
            return n
        return real(fd_, data, at)

    class Pool(BufferPool):
        def release(self, buffer: directio.mmap.mmap) -> None:
            events.append("released")
            super().release(buffer)

    monkeypatch.setattr(directio.os, "pwrite", slow)
    writer = AlignedWriter(fd, pool=Pool(SMALL))
    writer.write(b"a" * SMALL + b"b")  # one buffer in flight
    assert started.wait(30)
    releasing = threading.Thread(target=writer.release)
    releasing.start()
    releasing.join(0.2)
    assert releasing.is_alive()  # still waiting for the disk
    assert events == []
    gate.set()
    releasing.join(30)
    assert events[0] == "written" and events[1:] == ["released", "released"]
    assert (tmp_path / "out").read_bytes() == b"a" * SMALL  # the buffered b was dropped
    assert writer.offset == SMALL
    writer.close()  # nothing left


def test_flush_waits_for_the_write_in_flight_then_writes_the_rest(
    fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    data = os.urandom(SMALL + ALIGN + 3)
    writer = AlignedWriter(fd, pool=BufferPool(SMALL))
    writer.write(data)
    writer.flush()
    assert (tmp_path / "out").read_bytes() == data  # read by another handle: on the file
    assert writer.offset == len(data)
    assert [(at, n) for at, n, _ in spy.calls] == [(0, SMALL), (SMALL, ALIGN), (SMALL + ALIGN, 3)]
    writer.flush()  # nothing new: no write
    assert len(spy.calls) == 3
    writer.close()


def test_a_flush_while_a_free_view_is_held_keeps_the_bytes_read_into_it(fd: int, tmp_path: Path) -> None:
    """A download that stalls writes what it holds (``on_idle``) while its read waits on the
    view ``free()`` gave: the bytes that then arrive must land after the flushed ones."""
    writer = AlignedWriter(fd, pool=BufferPool(SMALL))
    view = writer.free()
    view[:5] = b"hello"
    writer.advance(5)
    view = writer.free()
    writer.flush()
    view[:5] = b"world"
    writer.advance(5)
    writer.close()
    assert (tmp_path / "out").read_bytes() == b"helloworld"


def test_writes_happen_in_the_caller_when_no_thread_can_start(
    fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At interpreter shutdown an executor refuses new work: the writer writes in place."""

    def refuse(fn: object) -> None:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(directio._DISK, "submit", refuse)
    spy = Spy(monkeypatch)
    data = os.urandom(3 * SMALL + 1)
    writer = AlignedWriter(fd, pool=BufferPool(SMALL))
    writer.write(data)
    writer.close()
    assert (tmp_path / "out").read_bytes() == data
    assert {name for _, _, name in spy.calls} == {threading.current_thread().name}


def test_a_tmpfs_file_gets_the_same_bytes() -> None:
    """/dev/shm (tmpfs): O_DIRECT refused at fcntl or at write on older kernels, taken on newer
    ones; the bytes are the same either way."""
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm on this host")
    data = random.Random(3).randbytes(5 * SMALL + 77)
    path = Path("/dev/shm") / f"kvreg-directio-test-{os.getpid()}"
    try:
        path.write_bytes(data[:3])
        for fd in open_file(path):
            writer = AlignedWriter(fd, offset=3, pool=BufferPool(SMALL))
            writer.write(data[3:])
            writer.close()
        assert path.read_bytes() == data
    finally:
        path.unlink(missing_ok=True)
