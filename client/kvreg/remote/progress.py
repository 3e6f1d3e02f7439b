"""Progress reporting and the worker pool that push and pull share.

``Progress`` is the small protocol a caller implements to watch a transfer (the
CLI drives rich progress bars with it; this package never imports rich):
``start(total_bytes, total_objects)`` once, then ``advance(n_bytes)`` from worker
threads as bytes move (negative when a retry sends bytes again), and
``object_done()`` per finished object. Implementations must be thread-safe.

``run_parallel`` runs one function per item on a thread pool and stops every
worker at its next block when one fails or the user interrupts; integrity errors
win over other errors, so a tampered object is never hidden behind a network
error of another worker. This module does not know about HTTP or the store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Protocol, TypeVar

from kvreg.core.errors import IntegrityError, UsageError

log = logging.getLogger(__name__)

__all__ = ["Cancelled", "Counter", "NullProgress", "Progress", "run_parallel", "validate_jobs"]

T = TypeVar("T")
MAX_JOBS = 64


class Progress(Protocol):
    """What a transfer reports while it runs (called from several threads)."""

    def start(self, total_bytes: int, total_objects: int) -> None: ...

    def advance(self, n_bytes: int) -> None: ...

    def object_done(self) -> None: ...


class NullProgress:
    """A ``Progress`` that ignores everything."""

    def start(self, total_bytes: int, total_objects: int) -> None:
        pass

    def advance(self, n_bytes: int) -> None:
        pass

    def object_done(self) -> None:
        pass


class Cancelled(Exception):
    """Internal: raised in a worker when another worker failed or the user interrupted."""


class Counter:
    """Thread-safe counts of objects and bytes moved, forwarded to a ``Progress``.

    ``advance`` is the ``progress_cb`` handed to the HTTP client: it raises
    ``Cancelled`` once ``stop`` is set, which ends a worker's transfer at its
    next block.
    """

    def __init__(self, progress: Progress, stop: threading.Event) -> None:
        self.progress = progress
        self.stop = stop
        self._lock = threading.Lock()
        self.objects = 0
        self.bytes = 0

    def advance(self, n: int) -> None:
        if self.stop.is_set():
            raise Cancelled
        if n > 0:
            with self._lock:
                self.bytes += n
        self.progress.advance(n)

    def done(self) -> None:
        with self._lock:
            self.objects += 1
        self.progress.object_done()


def validate_jobs(jobs: int) -> int:
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= MAX_JOBS:
        raise UsageError(f"jobs must be an integer from 1 to {MAX_JOBS}, not {jobs!r}")
    return jobs


def run_parallel(items: Sequence[T], fn: Callable[[T], None], jobs: int, stop: threading.Event) -> None:
    """Call ``fn(item)`` for every item on ``jobs`` threads; raise the first failure.

    ``fn`` should check ``stop`` between blocks (and raise ``Cancelled``); it is
    set as soon as one call fails or the calling thread is interrupted, and the
    pool is drained before this returns or raises, so no worker outlives it.
    """
    if not items:
        return
    pool = ThreadPoolExecutor(
        max_workers=min(validate_jobs(jobs), len(items)), thread_name_prefix="kvreg-xfer"
    )
    futures: list[Future[None]] = []
    try:
        futures = [pool.submit(fn, item) for item in items]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            stop.set()
    except BaseException:  # KeyboardInterrupt while waiting
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True, cancel_futures=True)
    errors = [
        e
        for f in futures
        if f.done()
        and not f.cancelled()
        and (e := f.exception()) is not None
        and not isinstance(e, Cancelled)
    ]
    if errors:
        first = next((e for e in errors if isinstance(e, IntegrityError)), errors[0])
        if len(errors) > 1:
            log.debug("%d transfers failed; reporting %r", len(errors), first)
        raise first
