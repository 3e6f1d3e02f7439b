"""Eviction: keep the local store under its size budget by deleting least recently used objects.

The library can be far larger than the disk kvreg may use: ``store.max-bytes``
(``kvreg config set store.max-bytes 20GiB``) bounds the bytes of ``objects/``, and
:func:`evict` deletes the least recently used objects that nothing protects until
the store fits. An evicted object's ref stays; ``kvreg fsck`` reports the object as
*evicted* (not as damage) and ``kvreg pull`` fetches it again. ("Disk paging" in the
CLI and the docs is this module with its helpers: the object logs in
``kvreg.store.access_log``, ``kvreg.store.pins``, ``kvreg.store.leases``, and the
errors for absent objects in ``kvreg.store.absence``.)

What eviction may delete: objects referenced by the manifest of a ref that is not
pinned. It never deletes manifests (a ref keeps saying what it is), envelopes, the
objects of a pinned ref, of a live lease, or of an envelope that no ref points at
and that is younger than the gc grace period (a deposit or pull that has not moved
its ref yet), and never an object no ref reaches (that is ``gc``'s job). The last
use of an object is the later of its last ``A`` line in the access log and its
file's mtime (when it was stored). It holds the refs lock, like ``gc``, so no ref
moves while it decides, and the leases' eviction lock, so no lease starts meanwhile;
it records what it deletes in ``logs/evictions`` (fsynced before the first removal, so that no
crash leaves an object gone without its record) and compacts the object logs.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Final

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, ObjectNotFoundError, StoreError, UsageError
from kvreg.core.timestamps import from_epoch, rfc3339
from kvreg.fileio.atomicfile import fsync_dir
from kvreg.store import access_log, leases, pins, settings_file
from kvreg.store.fsck import Children, default_children
from kvreg.store.gc import DEFAULT_GRACE_SECONDS
from kvreg.store.home import Home

log = logging.getLogger(__name__)


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
    budget = settings_file.max_bytes(home) if max_bytes is FROM_CONFIG else max_bytes
    if budget is not None and budget < 0:
        raise UsageError("the byte budget must not be negative")
    report = EvictReport(dry_run=dry_run, max_bytes=budget)
    objects = home.objects
    t_now = time.time() if now is None else now
    cutoff = t_now - grace_seconds
    pinned = set(pins.pinned(home))

    with home.refs.lock(), leases.eviction_lock(home):
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
            problem = problems[0]
            raise StoreError(
                f"refusing to evict: ref {problem.name} cannot be read ({problem.message})",
                hint="run 'kvreg fsck'",
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
        for target in pinned:
            if target.startswith("sha256:"):
                protected_other.add(Digest(target).hex)
                pinned_kids = _children_of(home, Digest(target), children, f"pin {target}")
                protected_pin.update(k.hex for k in pinned_kids)
        for md in home.envelopes.iter_manifest_digests():
            protected_other.add(md.hex)
            try:
                fresh = home.envelopes.stat(md).st_mtime >= cutoff
            except ObjectNotFoundError:
                continue
            if fresh and md.hex not in ref_manifests:  # a deposit or pull that has not moved its ref yet
                protected_other.update(k.hex for k in _children_of(home, md, children, f"envelope {md}"))
        leased = leases.live_leases(home)

        records = access_log.read_access_log(home)
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

        chosen: list[Digest] = []
        for used, h in order:
            if report.bytes_after <= budget:
                break
            size = sizes[h][0]
            chosen.append(Digest.from_hex(h))
            report.evicted.append(
                {"digest": "sha256:" + h, "bytes": size, "last_used": rfc3339(from_epoch(used))}
            )
            report.bytes_after -= size
            report.bytes_freed += size

        if not dry_run and chosen:
            # The evictions are recorded (fsynced) before the first object goes: an object that a
            # crash or a power cut takes away without its record would be reported missing by
            # fsck, where a recorded one is fetched again by the next pull. A record whose object
            # is still there (a crash before its removal) changes nothing.
            with access_log.locked(home):
                access_log.record_evictions(home, chosen, when=t_now)
            for d in chosen:
                with contextlib.suppress(ObjectNotFoundError):
                    objects.remove(d)
            for sd in sorted({objects.objects_dir / d.hex[:2] for d in chosen}):
                with contextlib.suppress(OSError):
                    fsync_dir(sd)
            with access_log.locked(home):
                gone = {d.hex for d in chosen}
                try:
                    access_log.compact(home, set(sizes) - gone, access_log.read_access_log(home))
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
    budget = settings_file.max_bytes(home)
    if budget is None:
        return None
    try:
        return evict(home, max_bytes=budget)
    except KvregError as exc:
        log.warning("the store is over its budget but nothing was evicted: %s", exc.message)
        return None
