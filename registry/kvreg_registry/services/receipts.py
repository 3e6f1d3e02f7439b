"""Graft receipts: storing the signed statements clients send after a graft, and listing them.

A receipt (``kvreg.core.receipt``) says that a host grafted an artifact of a
namespace, with the host's fingerprints, the witness probe's result, the byte-exact
check's result and the time. The registry accepts one when:

- the caller has the **read** role in the namespace and a token (grafting hosts only
  read; anonymous callers are refused with 401 even on a public namespace, so the
  log cannot be filled by anyone at all);
- it is a DSSE envelope of a valid receipt whose signature verifies with the key the
  receipt names (``RECEIPT_INVALID``, ``ENVELOPE_INVALID``, ``SIGNATURE_INVALID``:
  422);
- its artifact names this namespace (``RECEIPT_INVALID``) and a manifest digest that
  has an envelope in it (``MANIFEST_UNKNOWN``, 422).

It is stored with a ``graft.receipt`` audit entry in one transaction. The same
receipt sent again (same payload) is stored once: the second answer is 200 with the
first one's id and no new entry. Whether the signer is a key registered for the
namespace is answered when receipts are read (``signer_registered``): a receipt by
an unknown key is kept — it is still a statement that key made — and readers judge.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError as DbIntegrityError
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    ManifestUnknownError,
    ReceiptInvalidError,
    ReceiptNotFoundError,
    UnauthenticatedError,
)
from kvreg.core.receipt import OpenedReceipt, Receipt, open_receipt
from kvreg_registry import audit
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import add_in_savepoint
from kvreg_registry.db.models import Envelope, GraftReceipt, Namespace, SigningKey, utcnow

MAX_LIMIT = 500


def check(body: bytes, ns: Namespace) -> OpenedReceipt:
    """Parse and verify a receipt envelope sent to ``ns`` (no database needed)."""
    opened = open_receipt(body)
    if opened.receipt.namespace != ns.name:
        raise ReceiptInvalidError(
            f"the receipt is about namespace {opened.receipt.namespace!r}, not {ns.name!r}",
            hint=f"send it to /namespaces/{opened.receipt.namespace}/receipts",
        )
    return opened


def store(
    session: Session, principal: Principal, ns: Namespace, opened: OpenedReceipt
) -> tuple[GraftReceipt, int | None]:
    """Store a checked receipt; returns the row and its entry's number (None: stored already)."""
    if principal.anonymous:
        raise UnauthenticatedError(
            "sending a graft receipt needs a token", hint="kvreg login REMOTE --token TOKEN"
        )
    principal.require(session, ns, "read")
    r = opened.receipt
    existing = _by_digest(session, ns, opened.digest)
    if existing is not None:
        return existing, None
    if session.get(Envelope, (ns.id, r.digest)) is None:
        raise ManifestUnknownError(
            f"namespace {ns.name!r} has no envelope {r.digest}",
            hint="a receipt is for an artifact of the namespace it is sent to",
        )
    row = GraftReceipt(
        namespace_id=ns.id,
        manifest_digest=r.digest,
        ref_name=r.ref,
        receipt_digest=str(opened.digest),
        receipt=opened.raw,
        signer_keyid=r.signer_key.keyid,
        host_fingerprint=str(r.host["config_fingerprint"]),
        witness_ok={"pass": True, "fail": False}.get(r.witness),
        byte_exact=r.byte_exact,
        grafted_at=r.grafted_at,
        log_seq=-1,
        created_by=principal.name,
        created_at=utcnow(),
    )
    try:
        add_in_savepoint(session, row)
    except DbIntegrityError:  # the same receipt, stored concurrently
        existing = _by_digest(session, ns, opened.digest)
        if existing is None:
            raise
        return existing, None
    seq = audit.append(
        session,
        "graft.receipt",
        actor=principal.name,
        namespace=ns.name,
        subjects=[r.digest],
        new={
            "receipt": str(opened.digest),
            "id": row.id,
            "ref": f"{ns.name}/{r.ref}" if r.ref else None,
            "signer": row.signer_keyid,
            "host": r.host,
            "witness": r.witness,
            "check": r.check,
            "time": r.time,
        },
    )
    row.log_seq = seq
    return row, seq


def _by_digest(session: Session, ns: Namespace, digest: str) -> GraftReceipt | None:
    return session.scalar(
        select(GraftReceipt).where(
            GraftReceipt.namespace_id == ns.id, GraftReceipt.receipt_digest == str(digest)
        )
    )


def get(session: Session, ns: Namespace, receipt_id: int) -> GraftReceipt:
    row = session.get(GraftReceipt, receipt_id)
    if row is None or row.namespace_id != ns.id:
        raise ReceiptNotFoundError(f"no graft receipt {receipt_id} in namespace {ns.name!r}")
    return row


def list_receipts(
    session: Session, ns: Namespace, *, digest: Digest | None, limit: int, offset: int
) -> tuple[list[GraftReceipt], int]:
    """Receipts of ``ns`` (of one artifact with ``digest``), newest first, and their total."""
    cond = [GraftReceipt.namespace_id == ns.id]
    if digest is not None:
        cond.append(GraftReceipt.manifest_digest == str(digest))
    total = session.scalar(select(func.count()).select_from(GraftReceipt).where(*cond)) or 0
    rows = session.scalars(
        select(GraftReceipt)
        .where(*cond)
        .order_by(GraftReceipt.created_at.desc(), GraftReceipt.id.desc())
        .limit(min(limit, MAX_LIMIT))
        .offset(offset)
    ).all()
    return list(rows), total


@dataclass(frozen=True)
class ReceiptView:
    row: GraftReceipt
    receipt: Receipt
    envelope: dict[str, Any]
    signer_registered: bool


def view(session: Session, ns: Namespace, rows: list[GraftReceipt]) -> list[ReceiptView]:
    """The stored receipts parsed again, with whether each signer is a key of the namespace."""
    registered = set(
        session.scalars(
            select(SigningKey.keyid).where(SigningKey.namespace_id == ns.id, SigningKey.revoked_at.is_(None))
        ).all()
    )
    out: list[ReceiptView] = []
    for row in rows:
        opened = open_receipt(bytes(row.receipt))
        out.append(
            ReceiptView(row, opened.receipt, json.loads(bytes(row.receipt)), row.signer_keyid in registered)
        )
    return out
