"""Disk paging: a size budget for the local store, LRU eviction, pins and graft leases.

The library can be far larger than the disk kvreg may use: ``store.max-bytes``
(``kvreg config set store.max-bytes 20GiB``) bounds the bytes of ``objects/``, and
:func:`evict` deletes the least recently used objects that nothing protects until
the store fits. An evicted object's ref stays; ``kvreg fsck`` reports the object as
*evicted* (not as damage) and ``kvreg pull`` fetches it again.

Files:

- ``cache/paging/access.log``: append-only lines ``A <unix time> <64 hex>``: an
  object was read by a graft. Objects are read-only files, so their last use is
  recorded here rather than in the files. Each append is one ``write`` under
  ``cache/paging/.lock``; it is not fsynced, because a lost line only makes the LRU
  order slightly less accurate. Readers skip any line that does not parse (a crash
  mid-write leaves at most one such line). It lives in ``cache/``: losing it loses
  nothing but LRU history.
- ``logs/evictions``: lines ``E <unix time> <64 hex>``, appended and fsynced by
  eviction: what was evicted, so that ``fsck`` and ``graft`` can say "evicted, pull
  again" rather than "missing". Eviction rewrites both logs compacted (one line per
  object) atomically, under the lock.
- ``logs/deferred``: lines ``L <unix time> <64 hex> <remote> <remote ref> <local ref>``,
  appended and fsynced by a lazy pull (``kvreg pull --lazy``): objects of the
  artifact it did not download (``-`` for a remote without a name), so that
  ``fsck`` reports them as "not fetched (lazy pull)" and a read says how to fetch
  them. Eviction's compaction keeps only the lines of objects still absent.
- ``pins.json``: ``{"pins": ["ns/name", "sha256:…"]}``, written atomically under
  the lock. Everything a pinned ref reaches (its manifest and every object the
  manifest names) is never evicted; the pin follows the ref when it moves.
- ``cache/paging/leases/<pid>-<random>.lease``: a process that reads objects (a
  graft) holds an exclusive ``flock`` on such a file listing the digests it uses,
  one per line. Eviction skips every digest of a lease whose lock is held, and
  removes lease files whose holder is gone (the kernel releases a dead process's
  locks). The file is written and locked under a temporary name, then renamed, so
  a lease is never seen unlocked; ``leases/.lock`` (shared while a lease is taken,
  exclusive while eviction decides and deletes) orders the two.

What eviction may delete: objects referenced by the manifest of a ref that is not
pinned. It never deletes manifests (a ref keeps saying what it is), envelopes, the
objects of a pinned ref, of a live lease, or of an envelope that no ref points at
and that is younger than the gc grace period (a deposit or pull that has not moved
its ref yet), and never an
object no ref reaches (that is ``gc``'s job). The last use of an object is the
later of its last ``A`` line and its file's mtime (when it was stored). It holds
the refs lock, like ``gc``, so no ref moves while it decides.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import logging
import math
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, NotFoundError, ObjectNotFoundError, StoreError, UsageError
from kvreg.core.timestamps import from_epoch, rfc3339
from kvreg.fileio.atomicfile import append_durable, atomic_write_bytes, fsync_dir
from kvreg.store import config
from kvreg.store.fsck import Children, default_children
from kvreg.store.gc import DEFAULT_GRACE_SECONDS

if TYPE_CHECKING:
    from kvreg.store.home import Home

log = logging.getLogger(__name__)

PAGING_DIR = "paging"  # under cache/
ACCESS_LOG = "access.log"
EVICTION_LOG = "evictions"  # under logs/
DEFERRED_LOG = "deferred"  # under logs/
PINS_FILE = "pins.json"
LEASES_DIR = "leases"
LEASE_SUFFIX = ".lease"
_HEX = frozenset("0123456789abcdef")


def paging_dir(home: Home) -> Path:
    """``cache/paging/``: the access log and the leases (runtime state, never needed for integrity)."""
    return home.cache_dir / PAGING_DIR


def access_log_path(home: Home) -> Path:
    return paging_dir(home) / ACCESS_LOG


def eviction_log_path(home: Home) -> Path:
    return home.logs_dir / EVICTION_LOG


def deferred_log_path(home: Home) -> Path:
    return home.logs_dir / DEFERRED_LOG


def pins_path(home: Home) -> Path:
    return home.root / PINS_FILE


@contextlib.contextmanager
def _flock(path: Path, how: int) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, how)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _lock(home: Home) -> contextlib.AbstractContextManager[None]:
    """The exclusive lock on ``cache/paging/.lock`` (log appends and rewrites, pins)."""
    return _flock(paging_dir(home) / ".lock", fcntl.LOCK_EX)


# --- the access log ------------------------------------------------------------------


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


def _append(home: Home, data: bytes) -> None:
    if not data:
        return
    path = access_log_path(home)
    with _lock(home):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def touch(home: Home, digests: Iterable[Digest], *, now: float | None = None) -> None:
    """Record that ``digests`` were just used (one append for all). Never raises for I/O:
    a lost access record only makes eviction's order less accurate."""
    when = time.time() if now is None else now
    data = b"".join(_line("A", when, d) for d in dict.fromkeys(digests))
    try:
        _append(home, data)
    except OSError as exc:
        log.warning("cannot record object accesses in %s: %s", paging_dir(home), exc)


def read_access_log(home: Home) -> dict[str, AccessRecord]:
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


def record_deferred(
    home: Home,
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
    with _lock(home):
        append_durable(deferred_log_path(home), data)


def eviction_time(home: Home, digest: Digest) -> float | None:
    """When ``digest`` was evicted, if the logs say it was (and it was not read since)."""
    try:
        rec = read_access_log(home).get(Digest(digest).hex)
    except OSError:
        return None
    return None if rec is None else rec.evicted_at


def format_time(t: float) -> str:
    return rfc3339(from_epoch(t))


def deferred_error(what: str, digest: Digest, deferral: Deferral) -> ObjectNotFoundError:
    """The error for reading an object a lazy pull left on the registry."""
    remote = deferral.remote or "REMOTE"
    return ObjectNotFoundError(
        f"{what} ({Digest(digest).short()}) was not fetched: {deferral.local_ref} was pulled with "
        f"--lazy at {format_time(deferral.at)}, which downloads only the manifest and the tokens",
        hint=f"fetch the rest of the artifact: {deferral.pull_command()}; or let "
        f"'kvreg ask --remote {remote}' fetch the chunks a graft needs on demand",
        digest=str(digest),
        evicted=False,
        deferred=True,
    )


def absence_error(
    home: Home, digest: Digest, what: str, *, ref: str | None = None
) -> ObjectNotFoundError | None:
    """Why ``digest`` is absent, as an error: evicted ("pull again") or left on the registry
    by a lazy pull ("pull the rest"); None if the logs do not say."""
    try:
        rec = read_access_log(home).get(Digest(digest).hex)
    except OSError:
        return None
    if rec is None:
        return None
    if rec.deferred is not None:
        return deferred_error(what, digest, rec.deferred)
    if rec.evicted_at is None:
        return None
    again = f"kvreg pull REMOTE {ref}" if ref else "kvreg pull REMOTE REF"
    return ObjectNotFoundError(
        f"{what} ({Digest(digest).short()}) was evicted from the local store at "
        f"{format_time(rec.evicted_at)} to keep it under {config.MAX_BYTES_KEY}",
        hint=f"pull the artifact again: {again} (and 'kvreg pin' it to keep it)",
        digest=str(digest),
        evicted=True,
    )


def absence_error_at(root: str | os.PathLike[str], digest: Digest) -> ObjectNotFoundError | None:
    """:func:`absence_error` for the store at ``root`` (``ObjectStore`` knows only its root)."""
    from kvreg.store.home import Home

    return absence_error(Home(root), digest, f"object {Digest(digest)}")


def missing_object_error(
    home: Home, digest: Digest, what: str, *, ref: str | None = None
) -> ObjectNotFoundError:
    """The error for an object a read needs and the store lacks: says whether it was evicted
    or not fetched by a lazy pull, and how to get it. Exit 1, not the integrity failure a
    wrong byte is."""
    found = absence_error(home, digest, what, ref=ref)
    if found is not None:
        return found
    again = f"kvreg pull REMOTE {ref}" if ref else "kvreg pull REMOTE REF"
    return ObjectNotFoundError(
        f"{what} ({Digest(digest).short()}) is not in the local store",
        hint=f"pull the artifact again: {again}; run 'kvreg fsck' to check the store",
        digest=str(digest),
        evicted=False,
    )


def _compact(home: Home, present: set[str], records: dict[str, AccessRecord]) -> None:
    """Rewrite the three logs with one line per object (caller holds ``_lock``)."""
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


# --- pins --------------------------------------------------------------------------------


def _normalize_pin(target: str) -> str:
    from kvreg.core.digest import is_digest
    from kvreg.core.names import RefName

    if is_digest(target):
        return str(Digest(target))
    return str(RefName.parse(target))


def pins(home: Home) -> list[str]:
    """The pinned refs and digests, sorted."""
    path = pins_path(home)
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"pins file {path} cannot be read: {exc}",
            hint="fix it, or remove it and pin again (nothing is evicted while it is unreadable)",
        ) from exc
    items = doc.get("pins") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
        raise StoreError(f'pins file {path} must hold {{"pins": [strings]}}')
    return sorted(set(items))


def _write_pins(home: Home, items: Iterable[str]) -> None:
    body = json.dumps({"pins": sorted(set(items))}, indent=2) + "\n"
    home.tmp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(pins_path(home), body.encode("utf-8"), mode=0o644, tmp_dir=home.tmp_dir)


def pin(home: Home, target: str) -> bool:
    """Pin a ref (``ns/name``) or a manifest digest; True if it was not pinned yet.

    The ref must exist (or the manifest be stored) now; ``NotFoundError`` otherwise."""
    name = _normalize_pin(target)
    if name.startswith("sha256:"):
        if not home.objects.has(Digest(name)):
            raise NotFoundError(f"manifest {name} is not in the local store", hint="pull it first")
    else:
        from kvreg.core.names import RefName

        home.refs.get(RefName.parse(name))  # RefNotFoundError if missing
    with _lock(home):
        current = pins(home)
        if name in current:
            return False
        _write_pins(home, [*current, name])
    log.info("pinned %s", name)
    return True


def unpin(home: Home, target: str) -> bool:
    """Unpin; True if it was pinned."""
    name = _normalize_pin(target)
    with _lock(home):
        current = pins(home)
        if name not in current:
            return False
        _write_pins(home, [p for p in current if p != name])
    log.info("unpinned %s", name)
    return True


# --- leases ------------------------------------------------------------------------------


def _leases_dir(home: Home) -> Path:
    return paging_dir(home) / LEASES_DIR


@contextlib.contextmanager
def lease(home: Home, digests: Iterable[Digest]) -> Iterator[Path | None]:
    """Hold a lease on ``digests``: eviction leaves them alone until the block exits
    (or the process dies). Yields the lease file's path, or None when the store cannot
    be written (a read-only shared store, which nothing evicts from either)."""
    d = _leases_dir(home)
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
        with _flock(d / ".lock", fcntl.LOCK_SH):  # not while an eviction is deciding
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


def _leased(home: Home, *, clean: bool = True) -> set[str]:
    """Digests (hex) of every live lease; stale lease files are removed (caller holds leases/.lock)."""
    d = _leases_dir(home)
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


# --- eviction ----------------------------------------------------------------------------


@dataclass(slots=True)
class EvictReport:
    """What eviction removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    max_bytes: int | None
    bytes_before: int = 0
    bytes_after: int = 0
    evicted: list[dict[str, Any]] = field(default_factory=list)
    bytes_freed: int = 0
    protected_pinned: int = 0
    protected_leased: int = 0
    protected_other: int = 0

    @property
    def over_budget(self) -> bool:
        return self.max_bytes is not None and self.bytes_after > self.max_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "max_bytes": self.max_bytes,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "bytes_freed": self.bytes_freed,
            "over_budget": self.over_budget,
            "evicted": list(self.evicted),
            "protected": {
                "pinned": self.protected_pinned,
                "leased": self.protected_leased,
                "other": self.protected_other,
            },
        }


def _children_of(home: Home, manifest: Digest, children: Children, via: str) -> list[Digest]:
    try:
        data = home.objects.read(manifest)
    except ObjectNotFoundError:
        return []
    except KvregError as exc:
        raise StoreError(
            f"refusing to evict: manifest {manifest} ({via}) is damaged: {exc.message}",
            hint="run 'kvreg fsck'",
        ) from exc
    try:
        return [Digest(c) for c in children(data)]
    except Exception as exc:  # cannot tell what it needs: deleting anything could be wrong
        raise StoreError(
            f"refusing to evict: manifest {manifest} ({via}) cannot be parsed: {exc}", hint="run 'kvreg fsck'"
        ) from exc


class _FromConfig(enum.Enum):
    FROM_CONFIG = "FROM_CONFIG"


FROM_CONFIG: Final = _FromConfig.FROM_CONFIG
"""``evict(max_bytes=FROM_CONFIG)``: the budget is ``store.max-bytes`` (the default)."""


def evict(
    home: Home,
    *,
    max_bytes: int | _FromConfig | None = FROM_CONFIG,
    dry_run: bool = False,
    children: Children = default_children,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    now: float | None = None,
) -> EvictReport:
    """Delete least recently used unprotected objects until ``objects/`` fits ``max_bytes``
    (default: ``store.max-bytes``; None: no budget, nothing is evicted). See the module docstring."""
    budget = config.max_bytes(home) if max_bytes is FROM_CONFIG else max_bytes
    if budget is not None and budget < 0:
        raise UsageError("the byte budget must not be negative")
    report = EvictReport(dry_run=dry_run, max_bytes=budget)
    objects = home.objects
    t_now = time.time() if now is None else now
    cutoff = t_now - grace_seconds
    pinned = set(pins(home))

    with home.refs.lock(), _flock(_leases_dir(home) / ".lock", fcntl.LOCK_EX):
        sizes: dict[str, tuple[int, float]] = {}
        for d in objects.iter_digests():
            try:
                st = objects.stat(d)
            except ObjectNotFoundError:
                continue
            sizes[d.hex] = (st.st_size, st.st_mtime)
        report.bytes_before = report.bytes_after = sum(s for s, _ in sizes.values())
        if budget is None or report.bytes_before <= budget:
            return report

        entries, problems = home.refs.scan()
        if problems:
            p = problems[0]
            raise StoreError(
                f"refusing to evict: ref {p.name} cannot be read ({p.message})", hint="run 'kvreg fsck'"
            )
        protected_pin: set[str] = set()
        protected_other: set[str] = set()
        candidates: set[str] = set()
        ref_manifests = {e.digest.hex for e in entries}
        for e in entries:
            kids = _children_of(home, e.digest, children, f"ref {e.ref}")
            protected_other.add(e.digest.hex)  # manifests stay
            candidates.update(k.hex for k in kids)
            if str(e.ref) in pinned or str(e.digest) in pinned:
                protected_pin.update(k.hex for k in kids)
        for p in pinned:
            if p.startswith("sha256:"):
                protected_other.add(Digest(p).hex)
                protected_pin.update(k.hex for k in _children_of(home, Digest(p), children, f"pin {p}"))
        for md in home.envelopes.iter_manifest_digests():
            protected_other.add(md.hex)
            try:
                fresh = home.envelopes.stat(md).st_mtime >= cutoff
            except ObjectNotFoundError:
                continue
            if fresh and md.hex not in ref_manifests:  # a deposit or pull that has not moved its ref yet
                protected_other.update(k.hex for k in _children_of(home, md, children, f"envelope {md}"))
        leased = _leased(home)

        records = read_access_log(home)
        order: list[tuple[float, str]] = []
        for h in candidates:
            if h not in sizes:
                continue
            if h in protected_pin:
                report.protected_pinned += 1
            elif h in leased:
                report.protected_leased += 1
            elif h in protected_other:
                report.protected_other += 1
            else:
                rec = records.get(h)
                used = max(sizes[h][1], rec.last_access if rec and rec.last_access is not None else 0.0)
                order.append((used, h))
        order.sort()

        evicted_lines: list[bytes] = []
        for used, h in order:
            if report.bytes_after <= budget:
                break
            size = sizes[h][0]
            d = Digest.from_hex(h)
            if not dry_run:
                try:
                    objects.remove(d)
                except ObjectNotFoundError:
                    continue
                evicted_lines.append(_line("E", t_now, d))
            report.evicted.append({"digest": str(d), "bytes": size, "last_used": format_time(used)})
            report.bytes_after -= size
            report.bytes_freed += size

        if not dry_run and evicted_lines:
            shard_dirs = {objects.objects_dir / x["digest"][7:9] for x in report.evicted}
            for sd in shard_dirs:
                with contextlib.suppress(OSError):
                    fsync_dir(sd)
            with _lock(home):
                append_durable(eviction_log_path(home), b"".join(evicted_lines))
                gone = {x["digest"][7:] for x in report.evicted}
                try:
                    _compact(home, set(sizes) - gone, read_access_log(home))
                except (OSError, StoreError) as exc:
                    log.warning("cannot compact the access log: %s", exc)

    if report.over_budget:
        log.warning(
            "the store holds %d bytes, over its budget of %d: the rest is pinned, in use or not evictable",
            report.bytes_after,
            budget,
        )
    log.info("evicted %d objects, %d bytes", len(report.evicted), report.bytes_freed)
    return report


def evict_if_over_budget(home: Home) -> EvictReport | None:
    """Evict when ``store.max-bytes`` is set and exceeded (after a deposit, a pull or an
    on-demand fetch; the caller leases what it just wrote). Returns None when no budget is
    set, or when eviction refused to run (a damaged ref or manifest: logged, not raised,
    because the write before it succeeded; ``kvreg fsck`` says what is wrong)."""
    budget = config.max_bytes(home)
    if budget is None:
        return None
    try:
        return evict(home, max_bytes=budget)
    except KvregError as exc:
        log.warning("the store is over its budget but nothing was evicted: %s", exc.message)
        return None
