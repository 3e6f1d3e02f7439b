"""Garbage collection: delete objects and envelopes that no ref can reach.

Mark: the roots are every ref and tag. A ref's target manifest, the envelope that
signs it, and the objects the manifest references (``children``) are reachable.
Envelopes younger than the grace period count as roots too, with their manifest
and its children: that protects a deposit or pull that has stored its envelope
but not yet moved its ref.

Sweep: unreachable envelopes, then unreachable objects, are deleted only when their
mtime is older than ``grace_seconds``, so the fresh objects of a deposit in progress
(which stores objects first and moves the ref last) survive; ``ObjectStore.put_*``
refreshes the mtime of an object it finds already stored for the same reason. The
envelopes' removal is fsynced before the first object goes: no crash, not even a power
cut, leaves an envelope whose manifest or objects are gone.
``*.incomplete`` leftovers in ``tmp/`` older than the grace period are removed, and so are
abandoned pull staging folders (``tmp/pull-<hex>/``, untouched for the grace period and
not locked by a running pull).
``quarantine/`` is never touched.

``gc`` holds the refs lock for the whole run, so no ref can move onto an object
while it is being deleted. It refuses to run (``StoreError``) when it cannot be
sure what is reachable: a ref file that does not parse, or a reachable manifest
that is damaged or does not parse. Run ``kvreg fsck`` then. It does not follow
reflogs: a manifest that no ref points at any more is garbage after the grace
period.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, ObjectNotFoundError, StoreError
from kvreg.fileio.atomicfile import fsync_dir
from kvreg.store.fsck import Children, default_children

if TYPE_CHECKING:
    from kvreg.store.home import Home

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 3600.0


@dataclass(slots=True)
class GcReport:
    """What gc removed (or, with ``dry_run``, would remove) and what it kept."""

    dry_run: bool
    removed_objects: list[Digest] = field(default_factory=list)
    removed_envelopes: list[Digest] = field(default_factory=list)
    removed_temp: list[Path] = field(default_factory=list)
    bytes_freed: int = 0
    kept_reachable: int = 0
    kept_fresh: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "removed_objects": [str(d) for d in self.removed_objects],
            "removed_envelopes": [str(d) for d in self.removed_envelopes],
            "removed_temp": [str(p) for p in self.removed_temp],
            "bytes_freed": self.bytes_freed,
            "kept_reachable": self.kept_reachable,
            "kept_fresh": self.kept_fresh,
        }


def _mark(home: Home, children: Children, cutoff: float) -> tuple[set[Digest], set[Digest]]:
    """(reachable objects, manifests whose envelopes to keep)."""
    entries, problems = home.refs.scan()
    if problems:
        p = problems[0]
        raise StoreError(
            f"refusing to collect garbage: ref {p.name} cannot be read ({p.message})",
            hint="run 'kvreg fsck', then fix or delete the ref",
            ref=p.name,
        )
    manifests: dict[Digest, str] = {e.digest: f"ref {e.ref}" for e in entries}
    for md in home.envelopes.iter_manifest_digests():
        try:
            fresh = home.envelopes.stat(md).st_mtime >= cutoff
        except ObjectNotFoundError:
            continue
        if fresh:
            manifests.setdefault(md, f"fresh envelope {md}")

    reachable: set[Digest] = set(manifests)
    for md, via in sorted(manifests.items()):
        try:
            data = home.objects.read(md)  # verified: a damaged manifest would mislead the mark
        except ObjectNotFoundError:
            log.warning("gc: manifest %s (%s) is missing; nothing under it to keep", md, via)
            continue
        except KvregError as exc:
            raise StoreError(
                f"refusing to collect garbage: manifest {md} ({via}) is damaged: {exc.message}",
                hint="run 'kvreg fsck'",
                manifest=str(md),
            ) from exc
        try:
            reachable.update(Digest(c) for c in children(data))
        except Exception as exc:  # cannot know its children: deleting anything could lose data
            raise StoreError(
                f"refusing to collect garbage: manifest {md} ({via}) cannot be parsed: {exc}",
                hint="run 'kvreg fsck'",
                manifest=str(md),
            ) from exc
    return reachable, set(manifests)


_STAGING = re.compile(r"pull-[0-9a-f]{64}")


def _sweep_pull_staging(folder: Path, cutoff: float, report: GcReport) -> None:
    """Remove an abandoned pull's staging folder: nothing in it changed within the grace period
    and no pull holds its lock. Other folders in ``tmp/`` are not ours to judge."""
    if _STAGING.fullmatch(folder.name) is None:
        return
    files = [f for f in folder.iterdir() if f.is_file() and not f.is_symlink()]
    try:
        newest = max([folder.stat().st_mtime, *(f.stat().st_mtime for f in files)])
    except FileNotFoundError:
        return
    if newest >= cutoff:
        return
    lock = folder / ".lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a pull is working in it right now
        size = sum(f.stat().st_size for f in files if f.exists())
        if not report.dry_run:
            shutil.rmtree(folder, ignore_errors=True)
        report.removed_temp.append(folder)
        report.bytes_freed += size
    finally:
        os.close(fd)


def _sweep_temp(tmp_dir: Path, cutoff: float, report: GcReport) -> None:
    try:
        entries = list(os.scandir(tmp_dir))
    except FileNotFoundError:
        return
    for e in sorted(entries, key=lambda e: e.name):
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if e.is_dir(follow_symlinks=False):
            _sweep_pull_staging(Path(e.path), cutoff, report)
            continue
        if st.st_mtime >= cutoff:
            continue
        path = Path(e.path)
        if not report.dry_run:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
        report.removed_temp.append(path)
        report.bytes_freed += st.st_size


def _sync_folders(folders: set[Path], dry_run: bool) -> None:
    """Make the removals in ``folders`` durable (nothing to do in a dry run)."""
    if dry_run:
        return
    for folder in sorted(folders):
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(folder)


def collect_garbage(
    home: Home,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    children: Children = default_children,
    now: float | None = None,
) -> GcReport:
    """Delete what no ref reaches and is older than ``grace_seconds``; see the module docstring."""
    if grace_seconds < 0:
        raise ValueError("grace_seconds must not be negative")
    cutoff = (time.time() if now is None else now) - grace_seconds
    report = GcReport(dry_run=dry_run)
    objects, envelopes = home.objects, home.envelopes

    with home.refs.lock():
        reachable, kept_manifests = _mark(home, children, cutoff)

        # Envelopes first, made durable before any object goes: an envelope names its manifest,
        # and one left behind (a crash, a power cut) by objects already removed is damage that
        # fsck reports. Objects whose envelope is gone are mere garbage until the next run.
        emptied: set[Path] = set()
        for md in envelopes.iter_manifest_digests():
            if md in kept_manifests:
                continue
            try:
                st = envelopes.stat(md)
                if st.st_mtime >= cutoff:
                    continue
                freed = st.st_size if dry_run else envelopes.remove(md)
            except ObjectNotFoundError:
                continue
            emptied.add(envelopes.envelopes_dir / md.hex[:2])
            report.removed_envelopes.append(md)
            report.bytes_freed += freed
        _sync_folders(emptied, dry_run)

        emptied = set()
        for d in objects.iter_digests():
            if d in reachable:
                report.kept_reachable += 1
                continue
            try:
                st = objects.stat(d)
                if st.st_mtime >= cutoff:
                    report.kept_fresh += 1
                    continue
                freed = st.st_size if dry_run else objects.remove(d)
            except ObjectNotFoundError:
                continue
            emptied.add(objects.objects_dir / d.hex[:2])
            report.removed_objects.append(d)
            report.bytes_freed += freed
        _sync_folders(emptied, dry_run)

        _sweep_temp(home.tmp_dir, cutoff, report)

    log.info(
        "gc%s: %d objects, %d envelopes, %d temp files, %d bytes %s",
        " (dry run)" if dry_run else "",
        len(report.removed_objects),
        len(report.removed_envelopes),
        len(report.removed_temp),
        report.bytes_freed,
        "would be freed" if dry_run else "freed",
    )
    return report
