"""Advisory file locks: an ``fcntl.flock`` on a lock file, held for a ``with`` block.

Every lock kvreg takes on a local file (the refs lock, the paging logs' lock, the
eviction/lease lock, the ``config.json`` and ``credentials.json`` locks) is this one
helper. The lock file (and its folder) is created if missing and never removed; the
kernel releases the lock if the process dies. This module does not decide what a
lock protects or in which order locks are taken: the callers do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["flock"]


@contextlib.contextmanager
def flock(path: Path, *, shared: bool = False, mode: int = 0o644) -> Iterator[None]:
    """Hold an exclusive (or, with ``shared``, a shared) ``flock`` on ``path`` for the block.

    ``path`` is created with ``mode`` (and its folder) if it does not exist; ``OSError``
    from creating or opening it propagates.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
