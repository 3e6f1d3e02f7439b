"""The audit log as a file: ``GET /audit/export`` streams what ``kvreg audit export`` writes.

:func:`export_stream` serves the whole log at the latest checkpoint in the
``kvreg.audit-export/v1`` format (``kvreg.core.auditexport_format``), read and proved
a page of :data:`EXPORT_PAGE` entries at a time: two queries per page (the entries,
then every stored tree node their proofs need, ``audit.read_nodes``), never the whole
log in memory. Who may download it is the page's business (``web.pages_audit``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kvreg.core import logtree, merkle
from kvreg.core.auditexport_format import entry_line, export_filename, export_header, header_line
from kvreg.core.checkpoint import Checkpoint, verify_signed_checkpoint
from kvreg.core.errors import MerkleProofError
from kvreg.core.timestamps import rfc3339
from kvreg_registry.audit import read_nodes
from kvreg_registry.db.engine import Database
from kvreg_registry.db.models import AuditEntry
from kvreg_registry.services.log import AuditLog

log = logging.getLogger(__name__)

EXPORT_PAGE = 1000


def proofs_for_page(session: Session, start: int, end: int, size: int) -> list[list[bytes]]:
    """The inclusion proofs of entries ``[start, end)`` in the tree of ``size`` entries, from the
    stored perfect subtrees, with one query for the whole page."""
    wanted: set[tuple[int, int]] = set()
    for i in range(start, end):

        def proof_of(node: logtree.NodeReader, i: int = i) -> list[bytes]:
            return merkle.inclusion_proof(i, size, logtree.stored_range_hash(node))

        wanted |= logtree.plan(proof_of)
    nodes = read_nodes(session, wanted)

    def node(level: int, idx: int) -> bytes:
        try:
            return nodes[(level, idx)]
        except KeyError:
            raise MerkleProofError(f"the audit log's tree lacks node ({level}, {idx})") from None

    return [merkle.inclusion_proof(i, size, logtree.stored_range_hash(node)) for i in range(start, end)]


class ExportAborted(RuntimeError):
    """The log does not match its signed checkpoint: the download is cut off (the response has
    started, so no error status can be sent; a cut-off file fails ``kvreg audit verify --file``)."""


@dataclass
class Export:
    filename: str
    checkpoint: Checkpoint
    body: Iterator[bytes]


def export_stream(db: Database, log_: AuditLog, base_url: str) -> Export:
    """The whole log at its latest checkpoint as a ``kvreg.audit-export/v1`` file, streamed.

    The checkpoint is signed (or reused) and verified, and the header's type counts read
    (one ``GROUP BY`` query), before anything is sent: a log the registry refuses to sign
    fails here with its error. Then each page of :data:`EXPORT_PAGE` entries costs two
    queries in a short read transaction of its own. An entry whose stored bytes are not
    in the signed tree stops the download (:class:`ExportAborted`, logged): the file would
    not pass ``kvreg audit verify --file``, and a cut-off download shows as failed."""
    note = log_.checkpoint()
    checkpoint = verify_signed_checkpoint(note, log_.verifier)
    n = checkpoint.size
    with db.read() as s:
        types = {
            str(t): int(c)
            for t, c in s.execute(
                select(AuditEntry.type, func.count()).where(AuditEntry.seq < n).group_by(AuditEntry.type)
            ).all()
        }
    header = export_header(
        remote=checkpoint.origin,
        url=base_url,
        checkpoint=checkpoint,
        note=note,
        verifier=log_.verifier,
        types=types,
        exported_at=rfc3339(),
    )

    def body() -> Iterator[bytes]:
        yield header_line(header)
        start = 0
        while start < n:
            end = min(n, start + EXPORT_PAGE)
            with db.read() as s:
                rows = log_.entries(s, start, end)
                if [seq for seq, _e, _l in rows] != list(range(start, end)):
                    message = (
                        f"the audit log lacks entries in [{start}, {end}) of its signed checkpoint of {n}"
                    )
                    log.error("audit export stopped: %s", message)
                    raise ExportAborted(message)
                try:
                    proofs = proofs_for_page(s, start, end, n)
                except MerkleProofError as e:
                    log.error("audit export stopped: %s", e.message)
                    raise ExportAborted(e.message) from e
            try:
                for (seq, entry, _leaf), proof in zip(rows, proofs, strict=True):
                    yield entry_line(seq, entry, proof, checkpoint)
            except MerkleProofError as e:
                log.error("audit export stopped: %s", e.message)
                raise ExportAborted(e.message) from e
            start = end

    return Export(export_filename(checkpoint.origin, n), checkpoint, body())
