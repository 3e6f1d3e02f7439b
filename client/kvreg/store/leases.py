"""Leases: a process that reads objects (a graft) keeps eviction away from them.

``cache/paging/leases/<pid>-<random>.lease``: the reader holds an exclusive
``flock`` on such a file listing the digests it uses, one per line. Eviction skips
every digest of a lease whose lock is held (:func:`live_leases`), and removes lease
files whose holder is gone (the kernel releases a dead process's locks). The file is
written and locked under a temporary name, then renamed, so a lease is never seen
unlocked; ``leases/.lock`` (shared while a lease is taken, exclusive while eviction
decides and deletes, :func:`eviction_lock`) orders the two. This module does not
evict anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path

from kvreg.core.digest import Digest
from kvreg.fileio.locks import flock
from kvreg.store.layout import Layout

log = logging.getLogger(__name__)

LEASES_DIR = "leases"  # under cache/paging/
LEASE_SUFFIX = ".lease"


def leases_dir(home: Layout) -> Path:
    return home.paging_dir / LEASES_DIR


def eviction_lock(home: Layout) -> contextlib.AbstractContextManager[None]:
    """The exclusive ``leases/.lock``: no lease is taken while eviction holds it."""
    return flock(leases_dir(home) / ".lock")


@contextlib.contextmanager
def lease(home: Layout, digests: Iterable[Digest]) -> Iterator[Path | None]:
    """Hold a lease on ``digests``: eviction leaves them alone until the block exits
    (or the process dies). Yields the lease file's path, or None when the store cannot
    be written (a read-only shared store, which nothing evicts from either)."""
    d = leases_dir(home)
    body = "".join(f"{Digest(x).hex}\n" for x in dict.fromkeys(digests)).encode("ascii")
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    tmp, final = d / f".{token}.tmp", d / f"{token}{LEASE_SUFFIX}"
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        log.warning("cannot take a lease in %s (%s); reading without one", d, exc)
        yield None
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, body)
        with flock(d / ".lock", shared=True):  # not while an eviction is deciding
            tmp.rename(final)
        try:
            yield final
        finally:
            with contextlib.suppress(FileNotFoundError):
                final.unlink()
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.close(fd)


def live_leases(home: Layout, *, clean: bool = True) -> set[str]:
    """Digests (hex) of every live lease; stale lease files are removed (caller holds
    :func:`eviction_lock`)."""
    d = leases_dir(home)
    out: set[str] = set()
    try:
        entries = list(os.scandir(d))
    except FileNotFoundError:
        return out
    for e in entries:
        if not e.name.endswith(LEASE_SUFFIX):
            continue
        try:
            fd = os.open(e.path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: a live lease
                with os.fdopen(os.dup(fd), "rb") as f:
                    out.update(line.decode("ascii", "replace").strip() for line in f if line.strip())
                continue
            if clean:  # nobody holds it: its process is gone
                with contextlib.suppress(FileNotFoundError):
                    Path(e.path).unlink()
                log.debug("removed stale lease %s", e.path)
        finally:
            os.close(fd)
    return out
