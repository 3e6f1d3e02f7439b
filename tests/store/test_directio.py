"""AlignedWriter: the bytes on disk are exactly the bytes written, whatever the piece sizes,
the start offset or the filesystem's support of O_DIRECT; buffers are pooled."""

from __future__ import annotations

import errno
import fcntl
import os
import random
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
    real_write = os.write

    def spy(fd_: int, data: memoryview) -> int:
        seen.append(bool(fcntl.fcntl(fd_, fcntl.F_GETFL) & os.O_DIRECT))
        return real_write(fd_, data)

    data = os.urandom(2 * SMALL + 10)
    try:
        writer = AlignedWriter(fd, pool=BufferPool(SMALL))
        directio.os.write = spy  # type: ignore[attr-defined]
        try:
            writer.write(data)
            writer.close()
        finally:
            directio.os.write = real_write  # type: ignore[attr-defined]
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
    real_write = os.write
    refused: list[int] = []

    def refuse_direct(fd: int, data: memoryview) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(directio.os, "write", refuse_direct)
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
    real_write = os.write

    def spy(fd_: int, chunk: memoryview) -> int:
        written.append(len(chunk))
        return real_write(fd_, chunk)

    monkeypatch.setattr(directio.os, "write", spy)
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
