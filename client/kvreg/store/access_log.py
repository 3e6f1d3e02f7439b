"""The object logs of disk paging: when each object was last read, evicted or left unfetched.

Three logs, read together because an object's state is its latest event:

- ``cache/paging/access.log``: append-only lines ``A <unix time> <64 hex>``: an
  object was read by a graft. Objects are read-only files, so their last use is
  recorded here rather than in the files. Each append is one ``write`` under
  ``cache/paging/.lock``; it is not fsynced, because a lost line only makes the LRU
  order slightly less accurate. Readers skip any line that does not parse (a crash
  mid-write leaves at most one such line). It lives in ``cache/``: losing it loses
  nothing but LRU history.
- ``logs/evictions``: lines ``E <unix time> <64 hex>``, appended and fsynced by
  eviction (:func:`record_evictions`): what was evicted, so that ``fsck`` and
  ``graft`` can say "evicted, pull again" rather than "missing".
- ``logs/deferred``: lines ``L <unix time> <64 hex> <remote> <remote ref> <local ref>``,
  appended and fsynced by a lazy pull (``kvreg pull --lazy``, :func:`record_deferred`):
  objects of the artifact it did not download (``-`` for a remote without a name), so
  that ``fsck`` reports them as "not fetched (lazy pull)" and a read says how to fetch
  them.

Eviction rewrites the three logs compacted (:func:`compact`: one line per object,
deferrals only of objects still absent) atomically, under the lock. The lock
(:func:`locked`) also guards ``pins.json`` (``kvreg.store.pins``).

This module only records and reads events: it does not decide what to evict
(``kvreg.store.eviction``) or word the errors for absent objects
(``kvreg.store.absence``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kvreg.core.digest import Digest
from kvreg.core.errors import UsageError
from kvreg.fileio.atomicfile import append_durable, atomic_write_bytes
from kvreg.fileio.locks import flock
from kvreg.store.layout import Layout

log = logging.getLogger(__name__)

ACCESS_LOG = "access.log"  # under cache/paging/
EVICTION_LOG = "evictions"  # under logs/
DEFERRED_LOG = "deferred"  # under logs/
_HEX = frozenset("0123456789abcdef")


def access_log_path(home: Layout) -> Path:
    return home.paging_dir / ACCESS_LOG


def eviction_log_path(home: Layout) -> Path:
    return home.logs_dir / EVICTION_LOG


def deferred_log_path(home: Layout) -> Path:
    return home.logs_dir / DEFERRED_LOG


def locked(home: Layout) -> contextlib.AbstractContextManager[None]:
    """The exclusive lock on ``cache/paging/.lock`` (log appends and rewrites, pins)."""
    return flock(home.paging_dir / ".lock")


@dataclass(frozen=True, slots=True)
class Deferral:
    """A lazy pull that left an object on the registry: when, from where, under which refs."""

    at: float
    remote: str | None
    remote_ref: str
    local_ref: str

    def pull_command(self) -> str:
        """The command that fetches the rest of the artifact."""
        cmd = f"kvreg pull {self.remote or 'REMOTE'} {self.remote_ref}"
        return cmd if self.local_ref == self.remote_ref else f"{cmd} --as {self.local_ref}"


@dataclass(frozen=True, slots=True)
class AccessRecord:
    """What the logs say about one object: last read and why it is absent, if it is.

    At most one of ``evicted_at`` and ``deferred`` is set: the later of the two
    events, and only when it is not older than the last read."""

    last_access: float | None = None
    evicted_at: float | None = None
    deferred: Deferral | None = None


def _line(kind: str, when: float, digest: Digest) -> bytes:
    return f"{kind} {when:.6f} {Digest(digest).hex}\n".encode("ascii")


def _append(home: Layout, data: bytes) -> None:
    if not data:
        return
    path = access_log_path(home)
    with locked(home):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def touch(home: Layout, digests: Iterable[Digest], *, now: float | None = None) -> None:
    """Record that ``digests`` were just used (one append for all). Never raises for I/O:
    a lost access record only makes eviction's order less accurate."""
    when = time.time() if now is None else now
    data = b"".join(_line("A", when, d) for d in dict.fromkeys(digests))
    try:
        _append(home, data)
    except OSError as exc:
        log.warning("cannot record object accesses in %s: %s", home.paging_dir, exc)


def record_evictions(home: Layout, digests: Iterable[Digest], *, when: float) -> None:
    """Append (fsynced) that ``digests`` were evicted at ``when``; the caller holds :func:`locked`."""
    data = b"".join(_line("E", when, d) for d in digests)
    if data:
        append_durable(eviction_log_path(home), data)


def record_deferred(
    home: Layout,
    digests: Iterable[Digest],
    *,
    remote: str | None,
    remote_ref: str,
    local_ref: str,
    now: float | None = None,
) -> None:
    """Record (fsynced) that a lazy pull left ``digests`` on the registry."""
    when = time.time() if now is None else now
    names = (remote or "-", remote_ref, local_ref)
    if any(not n or any(c.isspace() for c in n) for n in names):
        raise UsageError(f"cannot record a deferral from {names!r}: names must be non-empty, without spaces")
    where = " ".join(names)
    data = b"".join(f"L {when:.6f} {Digest(d).hex} {where}\n".encode() for d in dict.fromkeys(digests))
    if not data:
        return
    with locked(home):
        append_durable(deferred_log_path(home), data)


def read_access_log(home: Layout) -> dict[str, AccessRecord]:
    """hex → record, from the access, eviction and deferred logs; lines that do not parse
    (a torn write) are skipped."""
    data = b""
    for path in (access_log_path(home), eviction_log_path(home), deferred_log_path(home)):
        try:
            data += path.read_bytes() + b"\n"
        except FileNotFoundError:
            continue
    last: dict[str, float] = {}
    evicted: dict[str, float] = {}
    deferred: dict[str, Deferral] = {}
    skipped = 0
    for raw in data.split(b"\n"):
        if not raw:
            continue
        parts = raw.split(b" ")
        try:
            kind, when_text, hex_ = parts[0].decode("ascii"), parts[1], parts[2].decode("ascii")
            when = float(when_text)
            if (
                len(parts) != (6 if kind == "L" else 3)
                or kind not in ("A", "E", "L")
                or not math.isfinite(when)
                or len(hex_) != 64
                or not _HEX.issuperset(hex_)
            ):
                raise ValueError(raw)
            if kind == "L":
                remote, remote_ref, local_ref = (p.decode("utf-8") for p in parts[3:6])
                if when >= (deferred[hex_].at if hex_ in deferred else float("-inf")):
                    deferred[hex_] = Deferral(when, None if remote == "-" else remote, remote_ref, local_ref)
                continue
        except (IndexError, ValueError, UnicodeDecodeError):
            skipped += 1
            continue
        target = last if kind == "A" else evicted
        if when >= target.get(hex_, float("-inf")):
            target[hex_] = when
    if skipped:
        log.debug("access, eviction and deferred logs: skipped %d unreadable line(s)", skipped)
    out: dict[str, AccessRecord] = {}
    for h in last.keys() | evicted.keys() | deferred.keys():
        used = last.get(h)
        e = evicted.get(h)
        d = deferred.get(h)
        if e is not None and used is not None and e < used:
            e = None
        if d is not None and used is not None and d.at < used:
            d = None
        if e is not None and d is not None:  # the later event explains the absence
            if d.at > e:
                e = None
            else:
                d = None
        out[h] = AccessRecord(used, e, d)
    return out


def eviction_time(home: Layout, digest: Digest) -> float | None:
    """When ``digest`` was evicted, if the logs say it was (and it was not read since)."""
    try:
        rec = read_access_log(home).get(Digest(digest).hex)
    except OSError:
        return None
    return None if rec is None else rec.evicted_at


def compact(home: Layout, present: set[str], records: dict[str, AccessRecord]) -> None:
    """Rewrite the three logs with one line per object (caller holds :func:`locked`)."""
    used: list[bytes] = []
    gone: list[bytes] = []
    left: list[bytes] = []
    for h in sorted(records):
        rec = records[h]
        if h in present and rec.last_access is not None:
            used.append(f"A {rec.last_access:.6f} {h}\n".encode("ascii"))
        elif h not in present and rec.evicted_at is not None:
            gone.append(f"E {rec.evicted_at:.6f} {h}\n".encode("ascii"))
        elif h not in present and (d := rec.deferred) is not None:
            where = f"{d.remote or '-'} {d.remote_ref} {d.local_ref}"
            left.append(f"L {d.at:.6f} {h} {where}\n".encode())
    home.tmp_dir.mkdir(parents=True, exist_ok=True)
    logs = ((access_log_path(home), used), (eviction_log_path(home), gone), (deferred_log_path(home), left))
    for path, lines in logs:
        atomic_write_bytes(path, b"".join(lines), mode=0o644, tmp_dir=home.tmp_dir)
