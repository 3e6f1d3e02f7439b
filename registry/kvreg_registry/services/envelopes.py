"""Accepting a signed manifest into a namespace, reading it back, and deleting it.

Order of checks (docs/protocol.md): the envelope parses; its payload hashes to the
digest in the URL; a signature verifies with a non-revoked key registered for the
namespace; the manifest parses and its Merkle root matches its chunk list; the
namespace holds every object the manifest references. Only then are the envelope,
its search fields, its block keys (the route index, ``services.router``), its OCI
manifests (``services.oci``) and an audit entry written, in one transaction.

Deleting one (by a namespace admin, or by retention during GC) is refused under a
legal hold and while a ref points at it, and leaves an ``envelope.deleted``
tombstone entry that keeps what the envelope was (signer, Merkle root, title,
verdict, who stored it and when) and why it went.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError as DbIntegrityError
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.envelope import PAYLOAD_TYPE, Envelope, pae
from kvreg.core.errors import (
    DigestMismatchError,
    EnvelopeInvalidError,
    EnvelopeNotFoundError,
    InUseError,
    ObjectsMissingError,
    SignatureError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.manifest import Manifest
from kvreg.core.timestamps import rfc3339
from kvreg_registry import audit
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.db.models import EnvelopeBlock, EnvelopeObject, Namespace, Ref, SigningKey, StoredObject
from kvreg_registry.services import holds, oci
from kvreg_registry.services import objects as object_service
from kvreg_registry.services.search_text import search_fields


@dataclass(frozen=True)
class CheckedEnvelope:
    """An envelope whose signature and manifest passed every check that needs no database rows
    other than the keys."""

    digest: Digest
    raw: bytes
    envelope: Envelope
    manifest: Manifest
    signer: PublicKey


def check_envelope(digest: Digest, body: bytes, keys: list[SigningKey], namespace: str) -> CheckedEnvelope:
    """Parse and verify ``body`` as the envelope of ``digest`` for ``namespace``; raise on any failure."""
    envelope = Envelope.from_json_bytes(body)
    if envelope.payload_type != PAYLOAD_TYPE:
        raise EnvelopeInvalidError(f"payload type {envelope.payload_type!r} is not {PAYLOAD_TYPE!r}")
    actual = envelope.manifest_digest
    if actual != digest:
        raise DigestMismatchError(
            f"the envelope's payload hashes to {actual}, not {digest}",
            expected=str(digest),
            actual=str(actual),
        )
    if not envelope.signatures:
        raise SignatureError("the envelope has no signatures")
    message = pae(envelope.payload_type, envelope.payload)
    signer: PublicKey | None = None
    for row in keys:
        if row.revoked_at is not None:
            continue
        key = PublicKey.from_text(row.public_key)
        for sig in envelope.signatures:
            try:
                key.verify(sig.sig, message)
            except SignatureError:
                continue
            signer = key
            break
        if signer is not None:
            break
    if signer is None:
        claimed = sorted({s.keyid for s in envelope.signatures if s.keyid})
        raise SignatureError(
            f"no signature on this envelope verifies with a key registered for namespace {namespace!r}",
            hint=f"an admin of {namespace!r} registers the signer's public key: "
            f"kvreg-admin key add {namespace} PUBKEY",
            claimed_keyids=claimed,
        )
    manifest = Manifest.from_bytes(envelope.payload)  # recomputes the Merkle root
    return CheckedEnvelope(digest, body, envelope, manifest, signer)


def store(
    session: Session,
    principal: Principal,
    ns: Namespace,
    checked: CheckedEnvelope,
    *,
    text: str = "",
    prompt: str = "",
) -> tuple[EnvelopeRow, int | None]:
    """Record a checked envelope whose manifest object is already held by ``ns``.

    ``text`` and ``prompt`` are the artifact's solution and prompt text (read from storage
    by the caller, outside the transaction: ``search_text.artifact_texts``), for search.

    Returns the row and the sequence number of its audit entry (None: it was stored
    already). Raises ``ObjectsMissingError`` when the namespace lacks some referenced object.
    """
    existing = session.get(EnvelopeRow, (ns.id, checked.digest))
    if existing is not None:
        return existing, None
    manifest = checked.manifest
    referenced = manifest.object_digests()
    absent = object_service.missing(session, ns, [checked.digest, *referenced])
    if absent:
        raise ObjectsMissingError(
            f"namespace {ns.name!r} lacks {len(absent)} object(s) that the manifest references",
            hint="upload the objects first (kvreg push does), then the envelope",
            missing=[str(d) for d in absent[:1000]],
        )
    sizes = 0
    for batch in object_service._batches([checked.digest, *referenced]):
        sizes += (
            session.scalar(
                select(func.coalesce(func.sum(StoredObject.size), 0)).where(StoredObject.digest.in_(batch))
            )
            or 0
        )
    fields = search_fields(manifest, text=text, prompt=prompt)
    row = EnvelopeRow(
        namespace_id=ns.id,
        manifest_digest=checked.digest,
        envelope=checked.raw,
        signer_keyid=checked.signer.keyid,
        model_fingerprint=manifest.model.fingerprint,
        model_name=(manifest.model.name or "")[:200],
        tokenizer_fingerprint=manifest.tokenizer.fingerprint,
        config_fingerprint=manifest.config.fingerprint,
        token_count=manifest.token_count,
        chunk_count=len(manifest.chunks),
        block_size=manifest.block_size,
        size=sizes,
        merkle_root=manifest.merkle_root,
        prompt_tokens=manifest.prompt.token_count if manifest.prompt is not None else None,
        created_by=principal.name,
        **fields,
    )
    session.add(row)
    session.flush()
    session.execute(
        EnvelopeObject.__table__.insert(),
        [
            {"namespace_id": ns.id, "manifest_digest": checked.digest, "digest": d, "position": i}
            for i, d in enumerate(referenced)
        ],
    )
    if manifest.chunks:
        session.execute(
            EnvelopeBlock.__table__.insert(),
            [
                {
                    "namespace_id": ns.id,
                    "manifest_digest": checked.digest,
                    "block_index": c.index,
                    "block_key": c.block_key,
                }
                for c in manifest.chunks
            ],
        )
    oci.record(session, ns, manifest, checked.raw)
    seq = audit.append(
        session,
        "envelope.stored",
        actor=principal.name,
        namespace=ns.name,
        subjects=[checked.digest],
        new={"signer": checked.signer.keyid, "merkle_root": manifest.merkle_root, "objects": len(referenced)},
    )
    row.log_seq = seq
    return row, seq


def get(session: Session, ns: Namespace, digest: str) -> EnvelopeRow:
    row = session.get(EnvelopeRow, (ns.id, digest))
    if row is None:
        raise EnvelopeNotFoundError(f"namespace {ns.name!r} has no envelope {digest}")
    return row


def delete_envelope(
    session: Session, principal: Principal, ns: Namespace, digest: Digest, *, note: str | None = None
) -> int:
    """Delete an envelope no ref points at and no legal hold protects (namespace admin).

    Refused with ``LegalHoldError`` (403) under a hold and ``InUseError`` (409) while a
    ref points at it. Leaves an ``envelope.deleted`` tombstone entry (what was deleted,
    who stored it and when, why); returns its number."""
    principal.require(session, ns, "admin")
    holds.lock_namespace(session, ns)
    row = get(session, ns, digest)
    holds.check_envelope_deletable(session, ns, digest)
    refs = session.scalars(
        select(Ref.name).where(Ref.namespace_id == ns.id, Ref.manifest_digest == digest).order_by(Ref.name)
    ).all()
    if refs:
        raise InUseError(
            f"refs still point at {digest}: {', '.join(f'{ns.name}/{r}' for r in refs)}",
            hint="move or delete those refs first",
            refs=list(refs),
        )
    details: dict[str, object] = {"reason": "request"}
    if note:
        details["note"] = note
    return remove(session, principal.name, ns, row, details)


def tombstone(row: EnvelopeRow) -> dict[str, object]:
    """What an ``envelope.deleted`` entry keeps of the envelope: enough to say what it was."""
    return {
        "digest": row.manifest_digest,
        "signer": row.signer_keyid,
        "merkle_root": row.merkle_root,
        "title": row.title,
        "model_fingerprint": row.model_fingerprint,
        "verifier": row.verifier,
        "verdict": row.verdict,
        "size": row.size,
        "stored_by": row.created_by,
        "stored_at": rfc3339(row.created_at),
        "stored_log_index": row.log_seq,
    }


def remove(
    session: Session, actor: str | None, ns: Namespace, row: EnvelopeRow, details: dict[str, object]
) -> int:
    """Delete ``row`` (checks done by the caller) and append its tombstone entry; returns its number."""
    digest = row.manifest_digest
    old = tombstone(row)
    try:
        with session.begin_nested():
            oci.forget(session, ns, digest)
            session.execute(
                delete(EnvelopeBlock).where(
                    EnvelopeBlock.namespace_id == ns.id, EnvelopeBlock.manifest_digest == digest
                )
            )
            session.execute(
                delete(EnvelopeObject).where(
                    EnvelopeObject.namespace_id == ns.id, EnvelopeObject.manifest_digest == digest
                )
            )
            session.execute(
                delete(EnvelopeRow)
                .where(EnvelopeRow.namespace_id == ns.id, EnvelopeRow.manifest_digest == digest)
                .execution_options(synchronize_session=False)
            )
    except DbIntegrityError:
        # A ref was pointed at it concurrently (the refs' foreign key refused the delete).
        raise InUseError(
            f"a ref was pointed at {digest} while it was being deleted", hint="look at the refs, then retry"
        ) from None
    session.expunge(row)
    return audit.append(
        session,
        "envelope.deleted",
        actor=actor,
        namespace=ns.name,
        subjects=[digest],
        old=old,
        details=details,
    )
