"""Large sequential file writes that bypass the page cache where the filesystem allows.

Objects arrive from the network in pieces of a few KiB to a few MiB. Written with
``write(2)`` through the page cache, every GiB first needs a GiB of fresh page
cache, and on virtual machines allocating those pages costs more CPU than hashing
the bytes (bench/push_pull.py measured 2 to 5 CPU seconds per GiB on a 2-core VM,
against about 0.05 s with ``O_DIRECT``). :class:`AlignedWriter` copies the pieces
into a page-aligned buffer (or lets a socket read straight into it, see
:meth:`AlignedWriter.free`) and writes each full buffer with ``O_DIRECT``; what is
not a whole number of 4 KiB blocks (the tail of a file, a resumed file's first
bytes up to a block boundary) goes through the page cache as usual. A filesystem
without ``O_DIRECT`` (tmpfs, some network filesystems) gets ordinary writes: the
bytes on disk are the same either way.

Buffers come from a :class:`BufferPool` and go back to it, so that the memory of
one transfer serves the next (fresh memory costs page faults too).

This module writes bytes only: callers hash them, fsync the file (``O_DIRECT``
does not flush the disk's cache) and rename it (``kvreg.fileio.atomicfile``).
No library offers this (Python's ``io`` has no ``O_DIRECT`` support), hence
the hand-written buffer handling.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import mmap
import os
import tempfile
import threading

from kvreg.fileio.atomicfile import remove_quietly

log = logging.getLogger(__name__)

__all__ = ["ALIGN", "PIECE", "AlignedWriter", "BufferPool", "default_pool", "o_direct_supported"]

#: Block size that ``O_DIRECT`` offsets, lengths and buffer addresses are aligned to
#: (the largest logical block size in common use; 512-byte devices accept it too).
ALIGN = 4096
#: Size of one buffer, and of one ``O_DIRECT`` write.
PIECE = 8 << 20
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)


class BufferPool:
    """Page-aligned anonymous buffers of ``size`` bytes, kept for reuse (at most ``keep`` idle)."""

    def __init__(self, size: int = PIECE, keep: int = 8) -> None:
        if size <= 0 or size % ALIGN:
            raise ValueError(f"buffer size must be a positive multiple of {ALIGN}, not {size}")
        self.size = size
        self._keep = keep
        self._idle: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def acquire(self) -> mmap.mmap:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return mmap.mmap(-1, self.size)  # anonymous mappings start on a page boundary

    def release(self, buffer: mmap.mmap) -> None:
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append(buffer)
                return
        buffer.close()


_DEFAULT_POOL = BufferPool()


def default_pool() -> BufferPool:
    """The process's shared pool of :data:`PIECE`-sized buffers."""
    return _DEFAULT_POOL


def o_direct_supported(folder: str | os.PathLike[str]) -> bool:
    """Whether files in ``folder`` open with ``O_DIRECT`` (then whole buffers bypass the page
    cache; a filesystem may still refuse it at write time, which the writer handles)."""
    if not _O_DIRECT:
        return False
    fd, name = tempfile.mkstemp(dir=folder, prefix=".o_direct-probe.")
    os.close(fd)
    try:
        probe = os.open(name, os.O_WRONLY | _O_DIRECT)
    except OSError:
        return False
    else:
        os.close(probe)
        return True
    finally:
        remove_quietly(name)


def _page_aligned(view: memoryview) -> bool:
    """Whether a writable buffer starts on a page boundary (read-only ones are not asked)."""
    if view.readonly or not view.c_contiguous or not len(view):
        return False
    return ctypes.addressof(ctypes.c_char.from_buffer(view)) % mmap.PAGESIZE == 0


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        n = os.write(fd, view)
        view = view[n:]


class AlignedWriter:
    """Appends to the file ``fd`` from ``offset`` on, through a pooled aligned buffer.

    Either :meth:`write` bytes (copied into the buffer), or read into
    :meth:`free` and report the count to :meth:`advance`. :meth:`flush` writes
    what is buffered; :meth:`close` flushes and returns the buffer to its pool
    (it does not close ``fd``). :attr:`offset` is the file offset after the
    bytes written so far (not counting what the buffer holds); nothing else may
    write to ``fd`` meanwhile. One thread at a time.
    """

    def __init__(
        self, fd: int, *, offset: int = 0, pool: BufferPool | None = None, direct: bool = True
    ) -> None:
        self._fd = fd
        self._pool = pool or _DEFAULT_POOL
        self._buffer: mmap.mmap | None = self._pool.acquire()
        self._view = memoryview(self._buffer)
        self._fill = 0
        self.offset = offset
        self._flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        self._direct_on = bool(self._flags & _O_DIRECT)
        self._direct_ok = direct and _O_DIRECT != 0
        os.lseek(fd, offset, os.SEEK_SET)

    # --- filling ---------------------------------------------------------------------

    def free(self) -> memoryview:
        """The unfilled part of the buffer (never empty): read into it, then :meth:`advance`."""
        if self._fill == len(self._view):
            self._write_buffer(everything=False)
        return self._view[self._fill :]

    def advance(self, n: int) -> None:
        """``n`` bytes were put at the start of :meth:`free`'s view."""
        if n < 0 or self._fill + n > len(self._view):
            raise ValueError(f"cannot advance by {n}: {len(self._view) - self._fill} bytes are free")
        self._fill += n

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` (copied into the buffer; a full buffer is written at once). Whole blocks
        of a page-aligned buffer (e.g. one from a :class:`BufferPool`) written at a block boundary
        go to the file straight from it, without the copy."""
        src = memoryview(data).cast("B")
        if self._fill == 0 and self._direct_ok and self.offset % ALIGN == 0 and _page_aligned(src):
            whole = len(src) - len(src) % ALIGN
            if whole:
                self._direct_write_from(src[:whole])
                src = src[whole:]
        while src:
            room = self.free()
            take = min(len(room), len(src))
            room[:take] = src[:take]
            self.advance(take)
            src = src[take:]

    # --- writing ---------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything buffered (what is not whole blocks through the page cache): after
        this the file holds every byte given so far, e.g. before a transfer waits."""
        if self._fill:
            self._write_buffer(everything=True)

    def close(self) -> None:
        """Flush and give the buffer back to its pool. Idempotent; ``fd`` stays open."""
        if self._buffer is None:
            return
        try:
            self.flush()
        finally:
            self.release()

    def release(self) -> None:
        """Give the buffer back without writing what it holds (an aborted transfer)."""
        if self._buffer is None:
            return
        self._view.release()
        buffer, self._buffer = self._buffer, None
        self._fill = 0
        self._pool.release(buffer)

    def _write_buffer(self, *, everything: bool) -> None:
        """Write the buffer: whole blocks at block-aligned file offsets with ``O_DIRECT``.

        When the file offset is not on a block boundary (after a flush, or appending
        to a kept prefix), the bytes up to the boundary go first, through the page
        cache, and the rest moves to the start of the buffer (``O_DIRECT`` needs an
        aligned address too). A last partial block is written through the page cache
        if ``everything``, else kept at the start of the buffer for the next write.
        """
        assert self._buffer is not None
        misaligned = self.offset % ALIGN
        if misaligned:
            head = min(self._fill, ALIGN - misaligned)
            self._plain_write(self._view[:head])
            self._buffer.move(0, head, self._fill - head)
            self._fill -= head
        whole = self._fill - self._fill % ALIGN
        if whole:
            self._direct_write(whole)
        rest = self._fill - whole
        if rest and everything:
            self._plain_write(self._view[whole : self._fill])
            rest = 0
        elif rest:
            self._buffer.move(0, whole, rest)
        self._fill = rest

    def _direct_write(self, n: int) -> None:
        """Write the buffer's first ``n`` bytes (whole blocks, aligned offset)."""
        self._direct_write_from(self._view[:n])

    def _direct_write_from(self, data: memoryview) -> None:
        """Write ``data`` (whole blocks at a page-aligned address; the offset is aligned)."""
        n = len(data)
        if self._direct_ok:
            try:
                self._set_direct(True)
                _write_all(self._fd, data)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                # The filesystem refuses O_DIRECT (at fcntl or at write): plain writes from now on.
                log.debug("O_DIRECT refused on fd %d (%s); writing through the page cache", self._fd, e)
                self._direct_ok = False
                os.lseek(self._fd, self.offset, os.SEEK_SET)
            else:
                self.offset += n
                return
        self._plain_write(data)

    def _plain_write(self, data: memoryview) -> None:
        self._set_direct(False)
        _write_all(self._fd, data)
        self.offset += len(data)

    def _set_direct(self, on: bool) -> None:
        if on == self._direct_on:
            return
        flags = self._flags | _O_DIRECT if on else self._flags & ~_O_DIRECT
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags)
        self._flags = flags
        self._direct_on = on
