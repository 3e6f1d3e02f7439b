"""The registry's consistency check (``kvreg-admin fsck``): database, storage and audit log agree.

It reads; it never repairs. What it checks:

- **objects**: every row of ``objects`` has bytes in storage of the row's size;
  every object in storage hashes to its name (with ``rehash``, the default);
- **holds**: every object a namespace holds has a row and bytes;
- **envelopes**: every envelope's stored JSON signs the manifest digest it is
  stored under, the namespace holds that manifest and every object the envelope
  references (``envelope_objects``);
- **refs**: every ref points at an envelope stored in its namespace;
- **OCI manifests** (``oci_manifests``, what ``/v2/`` serves): each stored document hashes
  to its stored digest, the artifact manifest's config is its envelope's manifest, and
  the signature manifest's subject is that artifact manifest and its one layer the
  envelope's bytes (an envelope without a row is not a problem: either it was stored before
  migration 0007 and its namespace is flagged, ``oci_backfill_pending``, so ``/v2/`` writes
  it at the next lookup there that misses, or its manifests cannot be built, which was
  logged when it was stored or backfilled, and it is not served over OCI);
- **audit log**: sequence numbers ``0 .. size-1`` gap-free, each entry's bytes
  hash to its stored leaf and name its own sequence number, the root recomputed
  from all leaves equals the root of the stored tree (``log_nodes``), and every
  stored checkpoint is signed by the log key and names the root of the tree at
  its size (the latest one also recomputed from the leaves).

Two states are *leftovers*, not problems: bytes in storage that no row claims
(a crash between storage and database during an upload) and a row that no
namespace holds whose bytes are gone (a crash half-way through a GC sweep). No
reader can see either (reads go through a namespace's holds), and the next GC
removes both once they are older than its grace period. They are listed in
``leftovers``.

It does not check what the client checks on every read (signatures against a
trust policy, manifests' chunk Merkle roots), upload sessions, accounts or the
search index, and it does not look at temp files of uploads in progress (the
GC's ``sweep_incomplete`` removes stale ones).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from kvreg.core import merkle, oci
from kvreg.core.checkpoint import verify_signed_checkpoint
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope as DsseEnvelope
from kvreg.core.errors import KvregError
from kvreg_registry.db.engine import Database
from kvreg_registry.db.models import (
    AuditEntry,
    Envelope,
    EnvelopeObject,
    LogCheckpoint,
    Namespace,
    NamespaceObject,
    OciManifest,
    Ref,
    StoredObject,
)
from kvreg_registry.services.log import AuditLog
from kvreg_registry.storage.base import ObjectStorage

log = logging.getLogger(__name__)

PAGE = 1000


@dataclass(frozen=True)
class Finding:
    kind: str
    subject: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "message": self.message}


@dataclass
class RegistryFsckReport:
    objects_checked: int = 0
    bytes_hashed: int = 0
    envelopes_checked: int = 0
    refs_checked: int = 0
    log_size: int = 0
    checkpoint_size: int | None = None
    problems: list[Finding] = field(default_factory=list)
    leftovers: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, kind: str, subject: object, message: str) -> None:
        self.problems.append(Finding(kind, str(subject), message))

    def leftover(self, kind: str, subject: object, message: str) -> None:
        self.leftovers.append(Finding(kind, str(subject), message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "objects_checked": self.objects_checked,
            "bytes_hashed": self.bytes_hashed,
            "envelopes_checked": self.envelopes_checked,
            "refs_checked": self.refs_checked,
            "log_size": self.log_size,
            "checkpoint_size": self.checkpoint_size,
            "problems": [p.to_dict() for p in self.problems],
            "leftovers": [p.to_dict() for p in self.leftovers],
        }


def _hash_stored(storage: ObjectStorage, digest: Digest) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    for piece in storage.read_range(digest):
        h.update(piece)
        n += len(piece)
    return h.hexdigest(), n


def check_registry(
    db: Database, storage: ObjectStorage, audit_log: AuditLog, *, rehash: bool = True
) -> RegistryFsckReport:
    """Check ``db``, ``storage`` and the audit log against each other; see the module docstring."""
    report = RegistryFsckReport()
    in_storage = {str(o.digest): o.size for o in storage.iter_objects()}
    with db.read() as s:
        rows = {str(d): int(n) for d, n in s.execute(select(StoredObject.digest, StoredObject.size))}
        held = set(s.scalars(select(NamespaceObject.digest).distinct()).all())
        ns_names = {int(i): str(n) for i, n in s.execute(select(Namespace.id, Namespace.name))}
        holds = {
            (int(ns), str(d))
            for ns, d in s.execute(select(NamespaceObject.namespace_id, NamespaceObject.digest))
        }

    # --- objects ------------------------------------------------------------------------------
    for digest, size in sorted(rows.items()):
        stored = in_storage.get(digest)
        if stored is None:
            if digest in held:
                report.problem("object_missing", digest, f"object {digest} is held but its bytes are gone")
            else:
                report.leftover(
                    "row_without_bytes",
                    digest,
                    f"object {digest}: row without bytes, held by no namespace (interrupted GC; the next "
                    "GC removes it)",
                )
        elif stored != size:
            report.problem(
                "object_size", digest, f"object {digest} has {stored} bytes in storage, not {size}"
            )
    for digest in sorted(in_storage):
        report.objects_checked += 1
        if digest not in rows:
            report.leftover(
                "orphan_bytes",
                digest,
                f"object {digest}: bytes without a row (interrupted upload; the next GC removes them)",
            )
        if not rehash:
            continue
        try:
            actual, n = _hash_stored(storage, Digest(digest))
        except KvregError as exc:  # deleted meanwhile (a GC running): nothing to say
            log.debug("fsck: %s vanished: %s", digest, exc.message)
            continue
        report.bytes_hashed += n
        if actual != Digest(digest).hex:
            report.problem("object_corrupt", digest, f"object {digest} in storage hashes to sha256:{actual}")
    for digest in sorted(held - rows.keys()):
        report.problem("hold_without_row", digest, f"object {digest} is held by a namespace but has no row")

    # --- envelopes and refs ----------------------------------------------------------------------
    with db.read() as s:
        referenced: dict[tuple[int, str], list[str]] = {}
        for ns_id, md, d in s.execute(
            select(EnvelopeObject.namespace_id, EnvelopeObject.manifest_digest, EnvelopeObject.digest)
        ):
            referenced.setdefault((int(ns_id), str(md)), []).append(str(d))
        envelopes: set[tuple[int, str]] = set()
        envelope_digests: dict[tuple[int, str], str] = {}
        last = (-1, "")
        while True:
            page = s.execute(
                select(Envelope.namespace_id, Envelope.manifest_digest, Envelope.envelope)
                .where(
                    (Envelope.namespace_id > last[0])
                    | ((Envelope.namespace_id == last[0]) & (Envelope.manifest_digest > last[1]))
                )
                .order_by(Envelope.namespace_id, Envelope.manifest_digest)
                .limit(PAGE)
            ).all()
            if not page:
                break
            for ns_id, md, raw in page:
                key = (int(ns_id), str(md))
                last = key
                envelopes.add(key)
                envelope_digests[key] = "sha256:" + hashlib.sha256(bytes(raw)).hexdigest()
                report.envelopes_checked += 1
                where = f"{ns_names.get(key[0], key[0])}@{md}"
                try:
                    signed = DsseEnvelope.from_json_bytes(bytes(raw)).manifest_digest
                except KvregError as exc:
                    report.problem(
                        "envelope_invalid", where, f"envelope {where} does not parse: {exc.message}"
                    )
                else:
                    if str(signed) != md:
                        report.problem("envelope_digest", where, f"envelope {where} signs manifest {signed}")
                if key not in holds:
                    report.problem("manifest_missing", where, f"namespace does not hold manifest of {where}")
                if md not in in_storage:
                    report.problem("manifest_missing", where, f"the manifest of {where} is not in storage")
                for d in referenced.get(key, []):
                    if (key[0], d) not in holds:
                        report.problem("object_unheld", where, f"envelope {where} references {d}, not held")
                    elif d not in in_storage:
                        report.problem(
                            "object_missing", where, f"envelope {where} references {d}, not stored"
                        )
        _check_oci(s, report, ns_names, envelope_digests)
        for ns_id, name, md in s.execute(select(Ref.namespace_id, Ref.name, Ref.manifest_digest)):
            report.refs_checked += 1
            if (int(ns_id), str(md)) not in envelopes:
                ref = f"{ns_names.get(int(ns_id), ns_id)}/{name}"
                report.problem("ref_target_missing", ref, f"ref {ref} points at {md}, which has no envelope")

        # --- the audit log ---------------------------------------------------------------------------
        _check_log(s, audit_log, report)
    return report


def _check_oci(
    s: Any,
    report: RegistryFsckReport,
    ns_names: dict[int, str],
    envelope_digests: dict[tuple[int, str], str],
) -> None:
    """The stored OCI manifests against their digests and their envelopes (module docstring)."""
    for row in s.scalars(select(OciManifest)):
        key = (int(row.namespace_id), str(row.manifest_digest))
        where = f"{ns_names.get(key[0], key[0])}@{row.manifest_digest}"
        artifact, signature = bytes(row.artifact), bytes(row.signature)
        hashed = (Digest.of_bytes(artifact), Digest.of_bytes(signature))
        if hashed != (row.artifact_digest, row.signature_digest):
            report.problem(
                "oci_manifest_digest", where, f"the OCI manifests of {where} do not hash to their digests"
            )
            continue
        try:
            parsed = oci.parse_artifact_manifest(artifact)
            sig = oci.parse_signature_manifest(signature)
        except KvregError as exc:
            report.problem("oci_manifest_invalid", where, f"the OCI manifests of {where}: {exc.message}")
            continue
        envelope = envelope_digests.get(key)
        if (
            parsed.kvreg_manifest != row.manifest_digest
            or sig.subject.digest != row.artifact_digest
            or sig.envelope.digest != row.envelope_digest
            or (envelope is not None and envelope != row.envelope_digest)
        ):
            report.problem(
                "oci_manifest_mismatch", where, f"the OCI manifests of {where} do not carry its envelope"
            )


class _Frontier:
    """The perfect subtrees of the leaves seen so far: the root at any size in O(log n) memory."""

    def __init__(self) -> None:
        self.count = 0
        self._stack: list[tuple[int, bytes]] = []

    def add(self, leaf: bytes) -> None:
        height, node = 0, leaf
        while self._stack and self._stack[-1][0] == height:
            node = merkle.node_hash(self._stack.pop()[1], node)
            height += 1
        self._stack.append((height, node))
        self.count += 1

    def root(self) -> bytes:
        """RFC 9162's root of the leaves so far (the subtrees folded from the right)."""
        if not self._stack:
            return merkle.empty_root()
        acc = self._stack[-1][1]
        for _height, left in reversed(self._stack[:-1]):
            acc = merkle.node_hash(left, acc)
        return acc


def _check_log(s: Any, audit_log: AuditLog, report: RegistryFsckReport) -> None:
    """One pass over the entries: contiguity, leaves, and the root at the log's size and at every
    checkpoint's size recomputed from the entries (never from the stored tree)."""
    size = AuditLog.size(s)
    report.log_size = size
    checkpoints = s.execute(
        select(LogCheckpoint.size, LogCheckpoint.root, LogCheckpoint.note).order_by(LogCheckpoint.size)
    ).all()
    wanted = {int(c.size) for c in checkpoints} | {size}
    roots: dict[int, bytes] = {0: merkle.empty_root()}
    frontier = _Frontier()
    while True:
        page = s.execute(
            select(AuditEntry.seq, AuditEntry.entry, AuditEntry.leaf_hash)
            .where(AuditEntry.seq >= frontier.count)
            .order_by(AuditEntry.seq)
            .limit(PAGE)
        ).all()
        if not page:
            break
        for seq, entry, leaf in page:
            if seq != frontier.count:
                report.problem("log_gap", seq, f"audit entries {frontier.count}..{seq - 1} are missing")
                return
            body = bytes(entry)
            computed = merkle.leaf_hash(body)
            if computed != bytes(leaf):
                report.problem("log_leaf", seq, f"audit entry {seq}: bytes do not hash to its leaf")
            try:
                named = json.loads(body).get("seq")
            except (ValueError, AttributeError):
                named = None
            if named != seq:
                report.problem("log_entry", seq, f"audit entry {seq} names sequence number {named!r}")
            frontier.add(computed)
            if frontier.count in wanted:
                roots[frontier.count] = frontier.root()
    if frontier.count != size:
        report.problem(
            "log_size", frontier.count, f"the log head says {size} entries; {frontier.count} stored"
        )
        return
    try:
        tree_root = audit_log.root(s, size)
    except KvregError as exc:
        report.problem("log_tree", size, f"the stored tree of size {size} cannot be read: {exc.message}")
        return
    if tree_root != roots[size]:
        report.problem("log_tree", size, "the stored tree's root differs from the root of the entries")
    for cp_size, cp_root, note in checkpoints:
        report.checkpoint_size = int(cp_size)
        if cp_size > size:
            report.problem("checkpoint_size", cp_size, f"a checkpoint of size {cp_size} > the log's {size}")
            continue
        try:
            signed = verify_signed_checkpoint(note, audit_log.verifier)
        except KvregError as exc:
            report.problem("checkpoint_signature", cp_size, f"checkpoint {cp_size}: {exc.message}")
            continue
        if signed.size != cp_size or bytes(signed.root) != bytes(cp_root):
            report.problem("checkpoint_note", cp_size, f"checkpoint {cp_size}: its note signs another tree")
        if roots[int(cp_size)] != bytes(cp_root):
            report.problem(
                "checkpoint_root", cp_size, f"checkpoint {cp_size}: the entries hash to another root"
            )
