"""Large sequential file writes that bypass the page cache where the filesystem allows, written
behind the caller on a small pool of disk threads.

Objects arrive from the network in pieces of a few KiB to a few MiB. Written with
``write(2)`` through the page cache, every GiB first needs a GiB of fresh page
cache, and on virtual machines allocating those pages costs more CPU than hashing
the bytes (bench/push_pull.py measured 2 to 5 CPU seconds per GiB on a 2-core VM,
against about 0.05 s with ``O_DIRECT``). :class:`AlignedWriter` copies the pieces
into a page-aligned buffer (or lets a socket read straight into it, see
:meth:`AlignedWriter.free`) and writes each full buffer with ``O_DIRECT``; what is
not a whole number of 4 KiB blocks (the tail of a file, the bytes up to the first
block boundary after a resumed file's kept prefix or after a :meth:`~AlignedWriter.flush`)
goes through the page cache as usual. A filesystem without ``O_DIRECT`` (tmpfs, some
network filesystems) gets ordinary writes: the bytes on disk are the same either way.

**Write-behind.** A full buffer is handed to one of the process's disk threads (at most
:data:`DISK_THREADS`, started on first use, named ``kvreg-disk-N``) and the caller goes on
filling a second buffer, so a connection keeps receiving while the disk writes (an 8 MiB
``O_DIRECT`` write takes about 5 ms on the benchmark host). A writer has at most one write in
flight, so it holds at most two buffers, and its writes go to explicit offsets
(``os.pwrite``) in order: the next full buffer waits for the previous write. An error of a
background write is raised (the same exception) by the writer's next
:meth:`~AlignedWriter.free`, :meth:`~AlignedWriter.write`, :meth:`~AlignedWriter.flush` or
:meth:`~AlignedWriter.close`, and the failed bytes are written again by the call after that, as
a synchronous write that failed would be; :meth:`~AlignedWriter.release` waits for a write in
flight before its buffer goes back to the pool (the kernel may still be reading it).

Buffers come from a :class:`BufferPool` and go back to it, so that the memory of
one transfer serves the next (fresh memory costs page faults too).

This module writes bytes only: callers hash them, fsync the file after
:meth:`~AlignedWriter.close` (``O_DIRECT`` does not flush the disk's cache) and rename it
(``kvreg.fileio.atomicfile``). It does not read the file, move its position or close it.
No library offers this (Python's ``io`` has no ``O_DIRECT`` support), hence
the hand-written buffer handling.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import errno
import fcntl
import logging
import mmap
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from kvreg.fileio.atomicfile import remove_quietly

log = logging.getLogger(__name__)

__all__ = [
    "ALIGN",
    "DISK_THREADS",
    "PIECE",
    "AlignedWriter",
    "BufferPool",
    "default_pool",
    "o_direct_supported",
]

#: Block size that ``O_DIRECT`` offsets, lengths and buffer addresses are aligned to
#: (the largest logical block size in common use; 512-byte devices accept it too).
ALIGN = 4096
#: Size of one buffer, and of one ``O_DIRECT`` write.
PIECE = 8 << 20
#: Threads that write full buffers behind their writers, shared by every writer of the process.
DISK_THREADS = 4
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
        with contextlib.suppress(BufferError):  # a view is still alive (in a traceback): unmapped with it
            buffer.close()


_DEFAULT_POOL = BufferPool()


def default_pool() -> BufferPool:
    """The process's shared pool of :data:`PIECE`-sized buffers."""
    return _DEFAULT_POOL


class _DiskThreads:
    """The process's disk threads, started on first use (and anew in a forked child, which
    inherits none of the parent's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[[], None]) -> Future[None]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=DISK_THREADS, thread_name_prefix="kvreg-disk")
            return self._executor.submit(fn)

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._executor = None


_DISK = _DiskThreads()
os.register_at_fork(after_in_child=_DISK.forget)


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


def _pwrite_all(fd: int, data: memoryview, at: int) -> None:
    done = os.pwrite(fd, data, at)
    while done < len(data):
        with data[done:] as rest:  # released even on an error: a live view pins its buffer
            done += os.pwrite(fd, rest, at + done)


class _Write:
    """Bytes ``lo:hi`` of a buffer on their way to the file, at ``base + lo`` (``base`` aligned)."""

    __slots__ = ("base", "buffer", "future", "hi", "lo")

    def __init__(self, buffer: mmap.mmap, base: int, lo: int, hi: int) -> None:
        self.buffer, self.base, self.lo, self.hi = buffer, base, lo, hi
        #: The write on a disk thread; ``None`` once it failed (then it is written again in the caller).
        self.future: Future[None] | None = None

    def succeeded(self) -> bool:
        return self.future is not None and self.future.done() and self.future.exception() is None


class AlignedWriter:
    """Appends to the file ``fd`` from ``offset`` on, through two pooled aligned buffers.

    Either :meth:`write` bytes (copied into the buffer), or read into :meth:`free` and
    report the count to :meth:`advance`. A full buffer is written by a disk thread while
    the other one fills (see the module docstring). :meth:`flush` writes what is buffered
    (after waiting for the write in flight); :meth:`close` flushes and returns the buffers
    to their pool (it does not close ``fd``). :attr:`offset` is the number of bytes in the
    file. Nothing else may write to ``fd`` meanwhile (``O_DIRECT`` is switched on and off
    with ``fcntl``). One thread at a time, besides the disk thread it hands writes to.
    """

    def __init__(
        self, fd: int, *, offset: int = 0, pool: BufferPool | None = None, direct: bool = True
    ) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        self._fd = fd
        self._pool = pool or _DEFAULT_POOL
        self._flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        self._direct_on = bool(self._flags & _O_DIRECT)
        self._direct_ok = direct and _O_DIRECT != 0
        self._buffer: mmap.mmap | None = self._pool.acquire()
        self._view = memoryview(self._buffer)
        self._spare: mmap.mmap | None = None
        # Byte i of the buffer goes to file offset _base + i, and _base is on a block boundary,
        # so whole blocks of the buffer are aligned in memory and in the file alike. The
        # buffer's bytes below _written are in the file already (for a writer that starts
        # inside a block, the bytes of that block before ``offset``, which the buffer lacks).
        self._base = offset - offset % ALIGN
        self._fill = self._written = offset % ALIGN
        self._done = offset  # every byte of the file before this one is written
        self._pending: _Write | None = None

    @property
    def offset(self) -> int:
        """Bytes in the file: those before the start ``offset`` and those written since. After
        :meth:`flush` or :meth:`close`, every byte given; before, the full buffers whose writes
        completed."""
        job = self._pending
        if job is not None and job.succeeded():
            return job.base + job.hi
        return self._done

    # --- filling ---------------------------------------------------------------------

    def free(self) -> memoryview:
        """The unfilled part of the buffer (never empty): read into it, then :meth:`advance`.
        It stays valid until the next :meth:`free`, :meth:`write`, :meth:`close` or
        :meth:`release` (a :meth:`flush` meanwhile, e.g. while a read waits, leaves it be)."""
        if self._fill == len(self._view):
            self._hand_off()
        return self._view[self._fill :]

    def advance(self, n: int) -> None:
        """``n`` bytes were put at the start of :meth:`free`'s view."""
        if n < 0 or self._fill + n > len(self._view):
            raise ValueError(f"cannot advance by {n}: {len(self._view) - self._fill} bytes are free")
        self._fill += n

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` (copied into the buffer; a full buffer goes to a disk thread). Whole
        blocks of a page-aligned buffer (e.g. one from a :class:`BufferPool`) written at a block
        boundary go to the file straight from it, without the copy, before this returns (the
        caller may reuse its buffer then)."""
        src = memoryview(data).cast("B")
        if self._fill == 0 and len(src) >= ALIGN and _page_aligned(src):
            self._wait()
            if self._direct_ok:
                whole = len(src) - len(src) % ALIGN
                with src[:whole] as blocks:
                    self._direct_write(blocks, self._base)
                self._base += whole
                self._done = self._base
                src = src[whole:]
        while src:
            with self.free() as room:
                take = min(len(room), len(src))
                room[:take] = src[:take]
            self.advance(take)
            src = src[take:]

    # --- writing ---------------------------------------------------------------------

    def flush(self) -> None:
        """Wait for the write in flight, then write everything buffered (what is not whole
        blocks through the page cache): after this the file holds every byte given so far,
        e.g. before a transfer waits. The buffer keeps its bytes and :meth:`free`'s view
        stays valid."""
        self._wait()
        if self._fill > self._written:
            self._write_span(self._view, self._base, self._written, self._fill)
            self._written = self._fill
            self._done = self._base + self._fill

    def close(self) -> None:
        """Flush and give the buffers back to their pool. Idempotent; ``fd`` stays open."""
        if self._buffer is None:
            return
        try:
            self.flush()
        finally:
            self.release()

    def release(self) -> None:
        """Give the buffers back without writing what is buffered (an aborted transfer). A write
        in flight is waited for first, and its error, if any, dropped. Idempotent."""
        if self._buffer is None:
            return
        job = self._pending
        if job is not None and job.future is not None:
            concurrent.futures.wait([job.future])  # the kernel may be reading its buffer until then
            if job.succeeded():
                self._done = job.base + job.hi
        self._view.release()
        buffers = [self._buffer, self._spare, job.buffer if job is not None else None]
        self._buffer = self._spare = self._pending = None
        self._fill = self._written = 0
        for buffer in buffers:
            if buffer is not None:
                self._pool.release(buffer)

    # --- behind the caller -------------------------------------------------------------

    def _hand_off(self) -> None:
        """The buffer is full: the bytes not yet written go to a disk thread (once the previous
        write is done), and the caller fills the other buffer."""
        self._wait()
        buffer = self._buffer
        assert buffer is not None
        base, lo, hi = self._base, self._written, self._fill
        if lo == hi:  # all written by a flush already: fill the same buffer again
            self._base += hi
            self._fill = self._written = 0
            return
        job = _Write(buffer, base, lo, hi)
        spare = self._spare if self._spare is not None else self._pool.acquire()
        self._view.release()
        self._buffer, self._view, self._spare = spare, memoryview(spare), None
        self._base += hi
        self._fill = self._written = 0
        self._pending = job
        try:
            job.future = _DISK.submit(lambda: self._run(job))
        except RuntimeError:  # the interpreter is shutting down and starts no threads: write here
            self._wait()

    def _run(self, job: _Write) -> None:
        with memoryview(job.buffer) as view:
            self._write_span(view, job.base, job.lo, job.hi)

    def _wait(self) -> None:
        """Wait for the write in flight (raising its error), or write a failed one again, here."""
        job = self._pending
        if job is None:
            return
        future = job.future
        if future is None:
            self._run(job)
        else:
            try:
                future.result()
            except BaseException:
                if future.done() and future.exception() is not None:
                    job.future = None  # failed: the next call writes it again
                raise
        self._pending = None
        self._done = job.base + job.hi
        assert self._spare is None  # a writer holds two buffers at most
        self._spare = job.buffer

    def _write_span(self, view: memoryview, base: int, lo: int, hi: int) -> None:
        """Write ``view[lo:hi]`` at ``base + lo`` (``base`` on a block boundary, ``view`` page
        aligned): whole blocks with ``O_DIRECT``, the partial blocks at either end through the
        page cache."""
        first = min(hi, lo + (-lo) % ALIGN)  # the first block boundary at or after lo
        last = max(first, hi - hi % ALIGN)  # the last one at or before hi
        for start, end, direct in ((lo, first, False), (first, last, True), (last, hi, False)):
            if end > start:
                with view[start:end] as part:
                    if direct:
                        self._direct_write(part, base + start)
                    else:
                        self._plain_write(part, base + start)

    def _direct_write(self, data: memoryview, at: int) -> None:
        """Write whole blocks from a page-aligned address at the aligned offset ``at``."""
        if self._direct_ok:
            try:
                self._set_direct(True)
                _pwrite_all(self._fd, data, at)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                # The filesystem refuses O_DIRECT (at fcntl or at write): plain writes from now on.
                log.debug("O_DIRECT refused on fd %d (%s); writing through the page cache", self._fd, e)
                self._direct_ok = False
            else:
                return
        self._plain_write(data, at)

    def _plain_write(self, data: memoryview, at: int) -> None:
        self._set_direct(False)
        _pwrite_all(self._fd, data, at)

    def _set_direct(self, on: bool) -> None:
        if on == self._direct_on:
            return
        flags = self._flags | _O_DIRECT if on else self._flags & ~_O_DIRECT
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags)
        self._flags = flags
        self._direct_on = on
