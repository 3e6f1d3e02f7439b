"""Rewriting every envelope's search fields and the full-text index (``kvreg-admin search reindex``).

Reads every envelope in batches, recomputes its search columns from its manifest and
its text objects in storage (``services.search_text``), writes only the rows that
changed, and on SQLite rebuilds the FTS table. Querying is ``services.search``' job.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, select, text, tuple_

from kvreg.core.envelope import Envelope as DsseEnvelope
from kvreg.core.manifest import Manifest
from kvreg_registry.db.engine import Database
from kvreg_registry.db.models import Envelope
from kvreg_registry.services.search_text import read_texts, search_fields
from kvreg_registry.storage.base import ObjectStorage


@dataclass(frozen=True)
class ReindexReport:
    envelopes: int  # envelopes looked at
    changed: int  # whose search fields were rewritten
    missing_text: int  # whose text or prompt object was not in storage
    index_rebuilt: bool  # SQLite: the FTS table was rebuilt from the envelopes

    def to_dict(self) -> dict[str, object]:
        return {
            "envelopes": self.envelopes,
            "changed": self.changed,
            "missing_text": self.missing_text,
            "index_rebuilt": self.index_rebuilt,
        }


def reindex(db: Database, storage: ObjectStorage, *, batch: int = 200) -> ReindexReport:
    """Recompute the search fields of every envelope from its manifest and its text objects in
    storage, ``batch`` envelopes per transaction (storage is read between transactions);
    rows already right are not written, so a second run changes nothing. On SQLite the FTS
    table is then rebuilt from ``envelopes`` (which also repairs it if rowids moved, e.g.
    after a table rebuild)."""
    fields = ("title", "question", "search_text", "verifier", "verdict")
    table = Envelope.__table__
    update = (
        table.update()
        .where(table.c.namespace_id == bindparam("k_ns"), table.c.manifest_digest == bindparam("k_digest"))
        .values({f: bindparam(f) for f in fields})
    )
    seen = changed = missing = 0
    after: tuple[int, str] | None = None
    while True:
        with db.read() as s:
            stmt = select(table.c.namespace_id, table.c.manifest_digest, table.c.envelope, *table.c[fields])
            if after is not None:
                stmt = stmt.where(tuple_(table.c.namespace_id, table.c.manifest_digest) > tuple_(*after))
            rows = s.execute(stmt.order_by(table.c.namespace_id, table.c.manifest_digest).limit(batch)).all()
        if not rows:
            break
        after = (rows[-1].namespace_id, rows[-1].manifest_digest)
        updates: list[dict[str, object]] = []
        for row in rows:
            seen += 1
            manifest = Manifest.from_bytes(DsseEnvelope.from_json_bytes(bytes(row.envelope)).payload)
            text_value, prompt_value, complete = read_texts(storage, manifest)
            missing += not complete
            new = search_fields(manifest, text=text_value, prompt=prompt_value)
            if any(getattr(row, f) != new[f] for f in fields):
                updates.append({"k_ns": row.namespace_id, "k_digest": row.manifest_digest, **new})
        if updates:
            with db.write() as s:
                s.execute(update, updates)
            changed += len(updates)
    rebuilt = False
    if db.dialect == "sqlite":
        with db.write() as s:
            s.execute(text("INSERT INTO envelopes_fts(envelopes_fts) VALUES ('rebuild')"))
        rebuilt = True
    return ReindexReport(envelopes=seen, changed=changed, missing_text=missing, index_rebuilt=rebuilt)
