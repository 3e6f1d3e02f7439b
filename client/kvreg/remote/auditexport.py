"""Whole audit logs: download and verify one, export it with proofs, verify an export offline.

**Whole logs.** :func:`verify_remote_log` downloads every entry up to a fresh
checkpoint, checks consecutive sequence numbers (in the page and in each entry's
JSON), that each entry's bytes hash to the leaf the registry states, and that the
root over all leaves is the signed root. :func:`export_log` writes the same,
verified, as JSON Lines for an archive::

    {"format": "kvreg.audit-export/v1", "remote", "url", "origin", "verifier_key",
     "checkpoint": "<signed note>", "size": N, "root": B64, "exported_at", "types": {TYPE: COUNT}}
    {"seq": 0, "entry": B64(entry bytes), "proof": [B64, ...]}       (one line per entry, in order)

with inclusion proofs computed locally (``kvreg.core.logtree``) from the
downloaded leaves, each verified against the signed root before it is written.
The lines are written by ``kvreg.core.auditexport_format``, which the registry's
own export (``GET /audit/export`` in its web UI) uses too: one format, one writer.
:func:`verify_export` checks such a file with no network: the note's signature
with the key in the file and, if given, with a pinned key; every line's order,
entry JSON ``seq`` and inclusion proof; the root over all leaves; and, against a
remote's stored checkpoint, that the export is the same history.

This module does not print (``kvreg.cli.audit`` renders its reports); the
checkpoint of each contact is checked and stored by ``kvreg.remote.auditlog``.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvreg.core import logtree, merkle
from kvreg.core.auditexport_format import EXPORT_FORMAT, entry_line, export_header, header_line
from kvreg.core.checkpoint import Checkpoint, NoteVerifier, verify_signed_checkpoint
from kvreg.core.errors import (
    LogInconsistentError,
    MerkleProofError,
    NotFoundError,
    SignatureError,
    StoreError,
    UnauthenticatedError,
    UsageError,
)
from kvreg.core.logverify import b64, parse_entry, parse_verifier
from kvreg.core.merkle import leaf_hash, root_from_leaf_hashes, verify_inclusion
from kvreg.core.timestamps import rfc3339
from kvreg.fileio.atomicfile import finish, install, temp_file
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.store.audit_state import RemoteLogState

__all__ = [
    "EXPORT_FORMAT",
    "ExportCheck",
    "LogAudit",
    "compare_with_export",
    "download_entries",
    "export_log",
    "verify_export",
    "verify_remote_log",
]

PAGE = 1000  # the registry's largest page of entries
MAX_EXPORT_LINE = 8 << 20


@dataclass
class LogAudit:
    """A whole log, downloaded and verified up to a signed checkpoint."""

    checkpoint: Checkpoint
    note: str
    verifier: NoteVerifier
    leaves: list[bytes]
    entries: list[bytes]
    types: dict[str, int]
    first_time: str | None
    last_time: str | None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.checkpoint.origin,
            "verifier_key": self.verifier.to_text(),
            "size": self.checkpoint.size,
            "root": b64(self.checkpoint.root),
            "entries_checked": len(self.entries),
            "types": dict(sorted(self.types.items())),
            "first_time": self.first_time,
            "last_time": self.last_time,
            "seconds": round(self.seconds, 3),
            **self.extra,
        }


def _summarize(entries: Sequence[bytes]) -> tuple[dict[str, int], str | None, str | None]:
    types: Counter[str] = Counter()
    first = last = None
    for i, entry in enumerate(entries):
        doc = parse_entry(entry, i)
        types[doc["type"]] += 1
        t = doc.get("time")
        if isinstance(t, str):
            first = t if first is None else first
            last = t
    return dict(types), first, last


def download_entries(
    client: RegistryClient, size: int, *, where: str, progress: Callable[[int], None] | None = None
) -> tuple[list[bytes], list[bytes]]:
    """Entries ``[0, size)`` and their leaf hashes, each entry's bytes checked against the stated leaf."""
    entries: list[bytes] = []
    leaves: list[bytes] = []
    while len(entries) < size:
        start = len(entries)
        page = client.log_entries(start, min(size, start + PAGE))
        if not page.entries:
            raise LogInconsistentError(
                f"{where} serves {start} entries but its signed checkpoint commits to {size}: "
                "entries were removed",
                served=start,
                size=size,
            )
        for e in page.entries:
            leaf = leaf_hash(e.entry)
            if leaf != e.leaf_hash:
                raise LogInconsistentError(
                    f"{where}: audit entry {e.seq} does not hash to the leaf the registry states for it: "
                    "the entry was edited after it was logged",
                    index=e.seq,
                )
            entries.append(e.entry)
            leaves.append(leaf)
        if progress is not None:
            progress(len(entries))
    return entries, leaves


def _check_root(leaves: Sequence[bytes], checkpoint: Checkpoint, where: str) -> None:
    if len(leaves) != checkpoint.size or root_from_leaf_hashes(leaves) != checkpoint.root:
        raise LogInconsistentError(
            f"{where}: the root over its {checkpoint.size} entries is not the root of its signed checkpoint: "
            "entries were edited, removed or reordered",
            size=checkpoint.size,
        )


def verify_remote_log(audit: RemoteLog, *, progress: Callable[[int], None] | None = None) -> LogAudit:
    """Download and verify the whole log of ``audit``'s remote up to a fresh, consistent checkpoint.

    Raises ``UnauthenticatedError`` when entries need a token, ``LogInconsistentError``
    or ``SignatureError`` (exit 3) on any mismatch.
    """
    started = time.perf_counter()
    checkpoint = audit.check()
    if checkpoint is None or audit.note is None or audit.verifier is None:
        raise NotFoundError(f"{audit.where} publishes no audit log", remote=audit.name)
    try:
        entries, leaves = download_entries(
            audit.client, checkpoint.size, where=audit.where, progress=progress
        )
    except UnauthenticatedError as e:
        raise UnauthenticatedError(
            f"{audit.where} lets only callers with a token read its audit log entries",
            hint=f"log in first: kvreg login {audit.name} --token TOKEN",
        ) from e
    _check_root(leaves, checkpoint, audit.where)
    types, first, last = _summarize(entries)
    result = LogAudit(checkpoint, audit.note, audit.verifier, leaves, entries, types, first, last)
    result.seconds = time.perf_counter() - started
    return result


def export_log(audit: RemoteLog, out: Path, *, progress: Callable[[int], None] | None = None) -> LogAudit:
    """Verify the remote's whole log and write it, with inclusion proofs, to ``out`` (atomically)."""
    result = verify_remote_log(audit, progress=progress)
    nodes = logtree.from_leaves(result.leaves)
    checkpoint = result.checkpoint
    n = checkpoint.size

    def node(level: int, idx: int) -> bytes:
        return nodes[(level, idx)]

    header = export_header(
        remote=audit.name,
        url=audit.client.base_url,
        checkpoint=checkpoint,
        note=result.note,
        verifier=result.verifier,
        types=result.types,
        exported_at=rfc3339(),
    )
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with temp_file(out.parent, prefix=f".{out.name}.") as (f, tmp):
            f.write(header_line(header))
            ranges = logtree.stored_range_hash(node)
            for i, entry in enumerate(result.entries):
                f.write(entry_line(i, entry, merkle.inclusion_proof(i, n, ranges), checkpoint))
            finish(f)
            install(tmp, out, mode=0o644)
    except OSError as e:
        raise StoreError(f"cannot write the export {out}: {e.strerror or e}") from e
    result.extra["file"] = str(out)
    result.extra["bytes"] = out.stat().st_size
    return result


# --- offline verification of an export -------------------------------------------------------------


@dataclass
class ExportCheck:
    """An export file verified offline."""

    path: Path
    header: dict[str, Any]
    checkpoint: Checkpoint
    verifier: NoteVerifier
    leaves: list[bytes]
    types: dict[str, int]
    first_time: str | None
    last_time: str | None
    keys_checked: list[str]
    notes: list[str]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "format": self.header.get("format"),
            "remote": self.header.get("remote"),
            "url": self.header.get("url"),
            "exported_at": self.header.get("exported_at"),
            "origin": self.checkpoint.origin,
            "verifier_key": self.verifier.to_text(),
            "keys_checked": self.keys_checked,
            "size": self.checkpoint.size,
            "root": b64(self.checkpoint.root),
            "entries_checked": len(self.leaves),
            "types": dict(sorted(self.types.items())),
            "first_time": self.first_time,
            "last_time": self.last_time,
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
        }


def _read_line(f: IO[bytes], path: Path, what: str) -> dict[str, Any] | None:
    raw = f.readline(MAX_EXPORT_LINE + 1)
    if not raw:
        return None
    if len(raw) > MAX_EXPORT_LINE:
        raise LogInconsistentError(f"{path}: {what} is longer than {MAX_EXPORT_LINE} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: [[[[...
        raise LogInconsistentError(f"{path}: {what} is not a JSON line") from e
    if not isinstance(doc, dict):
        raise LogInconsistentError(f"{path}: {what} is not a JSON object")
    return doc


def _unb64(value: Any, path: Path, what: str) -> bytes:
    if not isinstance(value, str):
        raise LogInconsistentError(f"{path}: {what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise LogInconsistentError(f"{path}: {what} is not base64") from e


def verify_export(
    path: Path,
    *,
    keys: Sequence[tuple[str, NoteVerifier]] = (),
    pinned: RemoteLogState | None = None,
) -> ExportCheck:
    """Verify the export ``path`` with no network; raise ``LogInconsistentError``/``SignatureError``.

    The checkpoint must verify with the key the file names and with every key in
    ``keys`` (``(label, verifier)``: a key given on the command line). With
    ``pinned`` (a remote's state) it must verify with that remote's pinned key,
    and when the remote's stored checkpoint is not larger than the export, the
    export's first entries must have that checkpoint's root: the same history.
    """
    started = time.perf_counter()
    path = Path(path)
    try:
        f = path.open("rb")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from e
    with f:
        header = _read_line(f, path, "the header line")
        if header is None or header.get("format") != EXPORT_FORMAT:
            raise LogInconsistentError(f"{path} is not a {EXPORT_FORMAT} file (first line)")
        key_text, note = header.get("verifier_key"), header.get("checkpoint")
        if not isinstance(key_text, str) or not isinstance(note, str):
            raise LogInconsistentError(f"{path}: the header lacks 'verifier_key' or 'checkpoint'")
        try:
            verifier = parse_verifier(key_text)
            checkpoint = verify_signed_checkpoint(note, verifier)
        except SignatureError as e:
            raise SignatureError(f"{path}: the export's checkpoint: {e.message}") from e
        checked = ["file"]
        wanted = list(keys)
        if pinned is not None:
            wanted.append((f"pinned for remote {pinned.remote}", pinned.verifier))
        for label, key in wanted:
            try:
                verify_signed_checkpoint(note, key)
            except SignatureError as e:
                raise SignatureError(
                    f"{path}: the export's checkpoint is not signed by the key {label} "
                    f"({key.to_text()}): {e.message}",
                    hint="the export comes from another log, or was re-signed by someone else",
                ) from e
            checked.append(label)
        if checkpoint.origin != verifier.name or header.get("origin") not in (None, checkpoint.origin):
            raise LogInconsistentError(f"{path}: the header's origin does not match its checkpoint")
        n = checkpoint.size
        if header.get("size") != n or header.get("root") not in (None, b64(checkpoint.root)):
            raise LogInconsistentError(
                f"{path}: the header says {header.get('size')!r} entries but its signed checkpoint {n}"
            )
        leaves: list[bytes] = []
        types: Counter[str] = Counter()
        first = last = None
        for i in range(n):
            line = _read_line(f, path, f"line {i + 2}")
            if line is None:
                raise LogInconsistentError(
                    f"{path} holds {i} entries but its signed checkpoint commits to {n}: "
                    "the export was truncated",
                    entries=i,
                    size=n,
                )
            if line.get("seq") != i:
                raise LogInconsistentError(
                    f"{path}: line {i + 2} holds entry {line.get('seq')!r}, expected {i}: entries were "
                    "removed or reordered",
                    index=i,
                )
            entry = _unb64(line.get("entry"), path, f"entry {i}")
            doc = parse_entry(entry, i)
            proof_items = line.get("proof")
            if not isinstance(proof_items, list) or len(proof_items) > 128:
                raise LogInconsistentError(f"{path}: entry {i} has no inclusion proof list")
            proof = [_unb64(h, path, f"a proof hash of entry {i}") for h in proof_items]
            leaf = leaf_hash(entry)
            try:
                verify_inclusion(leaf, i, n, proof, checkpoint.root)
            except MerkleProofError as e:
                raise LogInconsistentError(
                    f"{path}: entry {i} is not in the signed log of {n} entries ({e.message}): "
                    "the entry or its proof was edited",
                    index=i,
                ) from e
            leaves.append(leaf)
            types[doc["type"]] += 1
            t = doc.get("time")
            if isinstance(t, str):
                first = t if first is None else first
                last = t
        if _read_line(f, path, f"line {n + 2}") is not None:
            raise LogInconsistentError(
                f"{path} holds more lines than the {n} entries its checkpoint commits to"
            )
    _check_root(leaves, checkpoint, str(path))
    notes: list[str] = []
    if pinned is not None and pinned.checkpoint is not None:
        seen = pinned.checkpoint
        if seen.size <= n:
            if root_from_leaf_hashes(leaves[: seen.size]) != seen.root:
                raise LogInconsistentError(
                    f"{path}: its first {seen.size} entries are not the log of {seen.size} entries "
                    f"this store verified for remote {pinned.remote!r}: two different histories",
                    size=seen.size,
                )
            notes.append(
                f"the export extends the checkpoint of {seen.size} entries stored for {pinned.remote}"
            )
        else:
            notes.append(
                f"this store has seen {seen.size} entries of {pinned.remote}, more than the export's {n}: "
                "compare them online with: kvreg audit verify REMOTE --file FILE"
            )
    result = ExportCheck(path, header, checkpoint, verifier, leaves, dict(types), first, last, checked, notes)
    result.seconds = time.perf_counter() - started
    return result


def compare_with_export(audit: LogAudit, export: ExportCheck, *, where: str) -> str:
    """Check that the live log ``audit`` extends the archived ``export`` (same first entries)."""
    n = export.checkpoint.size
    if audit.checkpoint.size < n:
        raise LogInconsistentError(
            f"{where}: its log has {audit.checkpoint.size} entries, fewer than the {n} of the export "
            f"{export.path}: it was reset to an older state or rewritten",
        )
    for i in range(n):
        if audit.leaves[i] != export.leaves[i]:
            raise LogInconsistentError(
                f"{where}: its entry {i} is not the entry {i} of the export {export.path}: "
                "it rewrote its history",
                index=i,
            )
    return f"the registry's log of {audit.checkpoint.size} entries extends the export's {n}"
