"""Check the local store: re-hash every object, then check the ref graph.

``fsck`` re-hashes every object in parallel threads (``hashlib`` releases the GIL
on large buffers). An object whose bytes do not hash to its name is **moved** to
``quarantine/<hex>.<timestamp>`` (never deleted) and reported. Then, with damaged
objects already out of the way, it checks the graph:

- ref files that cannot be parsed;
- refs whose manifest object is missing;
- manifests (the targets of refs and of envelopes) that cannot be parsed, and
  objects they reference that are missing (``children`` lists them);
- envelopes whose manifest object is missing.

An object that a manifest references and that disk paging evicted
(``kvreg.store.access_log`` records it) is not a problem: it is listed
in ``report.evicted`` and does not make ``report.ok`` false; ``kvreg pull`` fetches
it again. Likewise an object a lazy pull (``kvreg pull --lazy``) left on the
registry is listed in ``report.not_fetched``. A missing object with neither record
is ``object-missing``, and a wrong byte is always ``object-corrupt``.

It reports every problem in an :class:`FsckReport` and raises nothing for them:
the caller (``kvreg fsck``) decides the exit status from ``report.ok``. It does
not verify envelope signatures (that needs the trust policy) or repair anything
besides quarantining; a quarantined object can be fetched again with ``pull``.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, ObjectNotFoundError
from kvreg.core.manifest import Manifest
from kvreg.core.timestamps import from_epoch, rfc3339
from kvreg.store.access_log import read_access_log
from kvreg.store.home import Home

log = logging.getLogger(__name__)

Children = Callable[[bytes], Iterable[Digest]]
_HASH_BLOCK = 1 << 20


def default_children(data: bytes) -> list[Digest]:
    """The objects a manifest references, via ``kvreg.core.manifest``."""
    return list(Manifest.from_bytes(data).object_digests())


class ProblemKind(enum.StrEnum):
    """Stable names of the problems fsck reports (used in ``--json`` output)."""

    OBJECT_CORRUPT = "object-corrupt"
    OBJECT_UNREADABLE = "object-unreadable"
    REF_UNPARSEABLE = "ref-unparseable"
    REF_TARGET_MISSING = "ref-target-missing"
    MANIFEST_INVALID = "manifest-invalid"
    OBJECT_MISSING = "object-missing"
    OBJECT_EVICTED = "object-evicted"
    OBJECT_NOT_FETCHED = "object-not-fetched"
    ENVELOPE_ORPHAN = "envelope-orphan"


@dataclass(frozen=True, slots=True)
class FsckProblem:
    """One problem: its kind, what it is about (a digest or a ref name), and a message."""

    kind: ProblemKind
    subject: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": str(self.kind), "subject": self.subject, "message": self.message}


@dataclass(slots=True)
class FsckReport:
    """What fsck found. ``ok`` is true when there is no problem at all."""

    problems: list[FsckProblem] = field(default_factory=list)
    objects_checked: int = 0
    bytes_hashed: int = 0
    quarantined: list[Path] = field(default_factory=list)
    evicted: list[FsckProblem] = field(default_factory=list)
    not_fetched: list[FsckProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def of_kind(self, kind: ProblemKind) -> list[FsckProblem]:
        return [p for p in self.problems if p.kind == kind]

    def add(self, kind: ProblemKind, subject: str, message: str) -> None:
        log.warning("fsck: %s %s: %s", kind, subject, message)
        self.problems.append(FsckProblem(kind, subject, message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "objects_checked": self.objects_checked,
            "bytes_hashed": self.bytes_hashed,
            "quarantined": [str(p) for p in self.quarantined],
            "problems": [p.to_dict() for p in self.problems],
            "evicted": [p.to_dict() for p in self.evicted],
            "not_fetched": [p.to_dict() for p in self.not_fetched],
        }


def _hash_file(path: Path) -> tuple[Digest, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
            size += len(block)
    return Digest.from_hex(h.hexdigest()), size


def fsck(
    home: Home,
    *,
    children: Children = default_children,
    quarantine: bool = True,
    max_workers: int | None = None,
) -> FsckReport:
    """Check ``home``; see the module docstring. ``quarantine=False`` only reports damaged objects."""
    report = FsckReport()
    objects = home.objects
    workers = max_workers or min(32, (os.cpu_count() or 1) + 4)

    # 1. Re-hash every object.
    digests = list(objects.iter_digests())

    def check(d: Digest) -> tuple[Digest, Digest | None, int, str | None]:
        try:
            actual, size = _hash_file(objects.path(d))
        except ObjectNotFoundError:
            return d, d, 0, None  # removed meanwhile (gc): nothing to say
        except OSError as exc:
            return d, None, 0, str(exc)
        return d, actual, size, None

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvreg-fsck") as pool:
        for d, actual, size, error in pool.map(check, digests):
            report.objects_checked += 1
            report.bytes_hashed += size
            if error is not None:
                report.add(ProblemKind.OBJECT_UNREADABLE, d, f"object {d} cannot be read: {error}")
                continue
            if actual == d:
                continue
            message = f"object {d} is damaged: its bytes hash to {actual}"
            if quarantine:
                try:
                    target = objects.quarantine(d)
                except ObjectNotFoundError:
                    pass
                else:
                    report.quarantined.append(target)
                    message += f"; moved to {target}"
            report.add(ProblemKind.OBJECT_CORRUPT, d, message)

    # 2. Refs.
    entries, ref_problems = home.refs.scan()
    for rp in ref_problems:
        report.add(ProblemKind.REF_UNPARSEABLE, rp.name, f"ref {rp.name}: {rp.message}")
    manifests: dict[Digest, str] = {}
    for e in entries:
        if not objects.has(e.digest):
            report.add(
                ProblemKind.REF_TARGET_MISSING,
                str(e.ref),
                f"ref {e.ref} points at manifest {e.digest}, which is not in the store",
            )
        else:
            manifests.setdefault(e.digest, f"ref {e.ref}")

    # 3. Envelopes.
    for md in home.envelopes.iter_manifest_digests():
        if not objects.has(md):
            report.add(
                ProblemKind.ENVELOPE_ORPHAN,
                md,
                f"envelope for manifest {md}: the manifest is not in the store",
            )
        else:
            manifests.setdefault(md, f"envelope {md}")

    # 4. Manifests and their children.
    try:
        access = read_access_log(home)
    except OSError as exc:
        log.warning("fsck: cannot read the access log: %s", exc)
        access = {}
    noted: set[Digest] = set()
    for md, via in sorted(manifests.items()):
        try:
            kids = [Digest(c) for c in children(objects.read(md, verify=False))]
        except ObjectNotFoundError:
            report.add(ProblemKind.REF_TARGET_MISSING, md, f"manifest {md} ({via}) vanished during fsck")
            continue
        except Exception as exc:  # any parse failure of any manifest is a finding, not a crash
            log.debug("manifest %s does not parse", md, exc_info=True)
            msg = exc.message if isinstance(exc, KvregError) else f"{type(exc).__name__}: {exc}"
            report.add(ProblemKind.MANIFEST_INVALID, md, f"manifest {md} ({via}) cannot be parsed: {msg}")
            continue
        for child in kids:
            if not objects.has(child):
                rec = access.get(child.hex)
                if rec is not None and rec.deferred is not None:
                    if child not in noted:
                        noted.add(child)
                        deferral = rec.deferred
                        report.not_fetched.append(
                            FsckProblem(
                                ProblemKind.OBJECT_NOT_FETCHED,
                                child,
                                f"object {child}, referenced by manifest {md} ({via}), was not fetched "
                                f"(lazy pull at {rfc3339(from_epoch(deferral.at))}); "
                                f"{deferral.pull_command()} fetches it",
                            )
                        )
                    continue
                if rec is not None and rec.evicted_at is not None:
                    if child not in noted:
                        noted.add(child)
                        report.evicted.append(
                            FsckProblem(
                                ProblemKind.OBJECT_EVICTED,
                                child,
                                f"object {child}, referenced by manifest {md} ({via}), was evicted at "
                                f"{rfc3339(from_epoch(rec.evicted_at))} to keep the store under its budget; "
                                "pull the artifact again to restore it",
                            )
                        )
                    continue
                report.add(
                    ProblemKind.OBJECT_MISSING,
                    child,
                    f"object {child}, referenced by manifest {md} ({via}), is not in the store",
                )

    log.info(
        "fsck: %d objects, %d bytes hashed, %d problems",
        report.objects_checked,
        report.bytes_hashed,
        len(report.problems),
    )
    return report
