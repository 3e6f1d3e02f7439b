"""The audit-log export file (``kvreg.audit-export/v1``): how its lines are written.

One writer for both producers of the file: ``kvreg audit export``
(``kvreg.remote.auditexport``, proofs computed from the downloaded leaves) and the
registry's ``GET /audit/export`` page (``kvreg_registry.web.views_audit``, proofs from
the stored tree, streamed). The file is JSON Lines::

    {"format": "kvreg.audit-export/v1", "remote", "url", "origin", "verifier_key",
     "checkpoint": "<signed note>", "size": N, "root": B64, "exported_at", "types": {TYPE: COUNT}}
    {"seq": 0, "entry": B64(entry bytes), "proof": [B64, ...]}       (one line per entry, in order)

:func:`entry_line` checks each entry's inclusion proof against the signed root
before it encodes the line (``MerkleProofError`` otherwise), so neither producer
can write a line that the offline check (``kvreg.remote.auditexport.verify_export``)
would refuse. This module does no I/O and does not verify whole files.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kvreg.core.checkpoint import Checkpoint, NoteVerifier
from kvreg.core.errors import MerkleProofError
from kvreg.core.merkle import leaf_hash, verify_inclusion

__all__ = ["EXPORT_FORMAT", "entry_line", "export_filename", "export_header", "header_line"]

EXPORT_FORMAT = "kvreg.audit-export/v1"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def export_header(
    *,
    remote: str | None,
    url: str | None,
    checkpoint: Checkpoint,
    note: str,
    verifier: NoteVerifier,
    types: Mapping[str, int],
    exported_at: str,
) -> dict[str, Any]:
    """The header of an export of the log at ``checkpoint`` (signed as ``note`` by ``verifier``).

    ``remote`` and ``url`` say where it came from: the client's remote name and URL
    for ``kvreg audit export``, the log's origin and the registry's base URL for the
    registry's own export. ``exported_at`` is the caller's clock, RFC 3339 UTC to the
    second (``kvreg.core.timestamps.rfc3339()``): this module reads no clock."""
    return {
        "format": EXPORT_FORMAT,
        "remote": remote,
        "url": url,
        "origin": checkpoint.origin,
        "verifier_key": verifier.to_text(),
        "checkpoint": note,
        "size": checkpoint.size,
        "root": _b64(checkpoint.root),
        "exported_at": exported_at,
        "types": dict(sorted(types.items())),
    }


def header_line(header: Mapping[str, Any]) -> bytes:
    """The first line of the file."""
    return (json.dumps(dict(header), sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def entry_line(seq: int, entry: bytes, proof: Sequence[bytes], checkpoint: Checkpoint) -> bytes:
    """The line of entry ``seq``: its bytes and its inclusion proof, which must verify against
    ``checkpoint`` (``MerkleProofError`` names the entry otherwise)."""
    try:
        verify_inclusion(leaf_hash(entry), seq, checkpoint.size, proof, checkpoint.root)
    except MerkleProofError as e:
        raise MerkleProofError(
            f"audit entry {seq} is not in the signed log of {checkpoint.size} entries: {e.message}",
            index=seq,
        ) from e
    line = {"seq": seq, "entry": _b64(entry), "proof": [_b64(h) for h in proof]}
    return (json.dumps(line, separators=(",", ":")) + "\n").encode("ascii")


def export_filename(origin: str, size: int) -> str:
    """``kvreg-audit-<origin>-<size>.jsonl``, with anything but letters, digits, ``.``, ``_`` and
    ``-`` in the origin replaced by ``_`` (an origin may hold ``/``)."""
    safe = _UNSAFE.sub("_", origin).strip("._") or "log"
    return f"kvreg-audit-{safe}-{size}.jsonl"
