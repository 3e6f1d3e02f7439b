"""Legal holds, retention and graft receipts at the service level, on SQLite and PostgreSQL.

Holds refuse what they protect (and the refused attempts are logged), retention
deletes exactly the envelopes no rule keeps, GC frees their objects, receipts are
checked before they are stored; every change appends exactly one audit entry, and a
failure after the change rolls the change and its entry back together.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update

from core.manifest_helpers import make_doc
from kvreg.core.digest import Digest
from kvreg.core.envelope import sign_envelope
from kvreg.core.errors import (
    EnvelopeInvalidError,
    ForbiddenError,
    HoldNotFoundError,
    InUseError,
    LegalHoldError,
    ManifestUnknownError,
    ObjectNotFoundError,
    ReceiptInvalidError,
    RefNotFoundError,
    RequestInvalidError,
    SignatureError,
    UnauthenticatedError,
)
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.receipt import Receipt, format_time
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import (
    AuditEntry,
    Envelope,
    GraftReceipt,
    LegalHold,
    NamespaceObject,
    Ref,
    RetentionPolicy,
    StoredObject,
)
from kvreg_registry.services import accounts, envelopes, holds, receipts, refs, retention
from kvreg_registry.services import objects as object_service
from kvreg_registry.services.gc import collect_garbage
from kvreg_registry.storage import open_storage
from kvreg_registry.storage.base import ObjectStorage

ROOT = Principal(user_id=None, name="test-admin", is_admin=True)
NS = "legal"


@dataclass
class Reg:
    db: Database
    storage: ObjectStorage
    key: SigningKey


@pytest.fixture(params=["sqlite", "postgresql"])
def reg(request: pytest.FixtureRequest, tmp_path: Path) -> Reg:
    url = (
        f"sqlite:///{tmp_path / 'r.sqlite3'}"
        if request.param == "sqlite"
        else request.getfixturevalue("fresh_pg_url")
    )
    upgrade(url)
    db = Database(url)
    request.addfinalizer(db.dispose)
    key = SigningKey.generate()
    with db.write() as s:
        accounts.create_namespace(s, ROOT, NS)
        accounts.register_key(s, ROOT, NS, key.public_key.to_text())
        accounts.create_user(s, ROOT, "writer")
        accounts.set_role(s, ROOT, NS, "writer", "write")
        accounts.create_user(s, ROOT, "reader")
        accounts.set_role(s, ROOT, NS, "reader", "read")
    return Reg(db, open_storage(str(tmp_path / "objects")), key)


def user(reg: Reg, name: str) -> Principal:
    with reg.db.read() as s:
        u = accounts.get_user(s, name)
        return Principal(user_id=u.id, name=u.name)


def put_object(reg: Reg, data: bytes, ns: str = NS) -> Digest:
    d = Digest.of_bytes(data)
    with reg.storage.begin_upload() as pending:
        pending.write(data)
        with reg.db.write() as s:
            namespace = accounts.get_namespace(s, ns)
            object_service.lock_object(s, d, len(data))
            pending.commit(d)
            object_service.hold(s, namespace, d)
    return d


def push(reg: Reg, label: str, *, ref: str | None = None, ns: str = NS) -> Digest:
    """Store an artifact (objects, envelope) and optionally point ``ref`` at it; its digest."""
    for shared in (b"tokens", b"text", b"logits"):
        put_object(reg, shared, ns)
    chunks = [put_object(reg, f"{label} chunk {i} {uuid.uuid4()}".encode(), ns) for i in range(3)]
    m = Manifest.from_dict(make_doc(10, 4, chunk_digests=chunks))
    env = sign_envelope(m.raw_bytes, reg.key)
    put_object(reg, m.raw_bytes, ns)
    with reg.db.write() as s:
        namespace = accounts.get_namespace(s, ns)
        keys = accounts.list_keys(s, namespace, include_revoked=False)
        checked = envelopes.check_envelope(m.digest, env.to_json_bytes(), keys, ns)
        envelopes.store(s, ROOT, namespace, checked)
        if ref is not None:
            refs.put(s, ROOT, namespace, ref, m.digest, expected=None)
    return m.digest


def entries(reg: Reg) -> list[dict[str, Any]]:
    with reg.db.read() as s:
        return [json.loads(e) for e in s.scalars(select(AuditEntry.entry).order_by(AuditEntry.seq)).all()]


def size(reg: Reg) -> int:
    with reg.db.read() as s:
        return s.scalar(select(func.count()).select_from(AuditEntry)) or 0


def ns_row(s: Any, name: str = NS) -> Any:
    return accounts.get_namespace(s, name)


def envelope_exists(reg: Reg, digest: str) -> bool:
    with reg.db.read() as s:
        return s.get(Envelope, (ns_row(s).id, digest)) is not None


def attempt(reg: Reg, who: Principal, change: Callable[[Any], Any]) -> Any:
    """Run ``change(session)`` the way the routes do: refused attempts are logged."""
    with holds.refusals_logged(reg.db, who), reg.db.write() as s:
        return change(s)


def age(reg: Reg, digest: str, days: float) -> None:
    """Pretend envelope ``digest`` was stored ``days`` ago."""
    with reg.db.write() as s:
        s.execute(
            update(Envelope)
            .where(Envelope.manifest_digest == digest)
            .values(created_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=days))
        )


# --- legal holds ------------------------------------------------------------------------------


def test_ref_hold_freezes_the_ref_and_refused_attempts_are_logged(reg: Reg) -> None:
    first = push(reg, "a", ref="p07")
    second = push(reg, "b")
    writer = user(reg, "writer")
    with reg.db.write() as s:
        hold = holds.place(s, ROOT, ns_row(s), ref="p07", reason="matter 42")
        hold_id = hold.id
    assert hold.manifest_digest == first and hold.log_seq is not None
    placed = entries(reg)[-1]
    assert placed["type"] == "hold.placed" and placed["subjects"] == [first]
    assert placed["new"]["reason"] == "matter 42" and placed["details"]["ref"] == f"{NS}/p07"

    before = size(reg)
    with pytest.raises(LegalHoldError) as moved:
        attempt(reg, writer, lambda s: refs.put(s, writer, ns_row(s), "p07", second, expected=first))
    assert moved.value.code == "LEGAL_HOLD" and isinstance(moved.value, ForbiddenError)
    assert moved.value.details["holds"] == [hold_id]
    with pytest.raises(LegalHoldError):
        attempt(reg, ROOT, lambda s: refs.remove(s, ROOT, ns_row(s), "p07", expected=first))
    log = entries(reg)
    assert size(reg) == before + 2, "each refused attempt is logged once"
    assert [e["type"] for e in log[-2:]] == ["ref.move.refused", "ref.delete.refused"]
    assert log[-2]["actor"] == "writer" and log[-2]["subjects"] == [first]
    assert log[-2]["details"]["holds"] == [hold_id] and log[-2]["details"]["code"] == "LEGAL_HOLD"
    assert moved.value.details["log_index"] == log[-2]["seq"]
    with reg.db.read() as s:
        assert refs.get(s, ns_row(s), "p07").manifest_digest == first

    # Role checks come first: a reader's attempt is a plain 403 and is not logged.
    reader = user(reg, "reader")
    before = size(reg)
    with pytest.raises(ForbiddenError) as denied:
        attempt(reg, reader, lambda s: refs.put(s, reader, ns_row(s), "p07", second, expected=first))
    assert not isinstance(denied.value, LegalHoldError) and size(reg) == before

    with reg.db.write() as s:
        lifted, seq = holds.lift(s, ROOT, ns_row(s), hold_id, reason="case closed")
    assert seq is not None and lifted.lifted_by == "test-admin" and lifted.lift_reason == "case closed"
    entry = entries(reg)[-1]
    assert entry["type"] == "hold.lifted" and entry["details"]["reason"] == "case closed"
    assert entry["details"]["placed_log_index"] == placed["seq"]
    with reg.db.write() as s:  # lifting again changes nothing and logs nothing
        assert holds.lift(s, ROOT, ns_row(s), hold_id)[1] is None
    assert entries(reg)[-1]["seq"] == entry["seq"]

    with reg.db.write() as s:
        refs.put(s, writer, ns_row(s), "p07", second, expected=first)
    with reg.db.write() as s:
        envelopes.delete_envelope(s, ROOT, ns_row(s), first, note="superseded")
    tomb = entries(reg)[-1]
    assert tomb["type"] == "envelope.deleted" and tomb["subjects"] == [first]
    assert tomb["details"] == {"reason": "request", "note": "superseded"}
    assert tomb["old"]["digest"] == first and tomb["old"]["signer"] == reg.key.public_key.keyid
    assert tomb["old"]["stored_by"] == "test-admin" and tomb["old"]["stored_log_index"] is not None
    assert tomb["actor"] == "test-admin"


def test_namespace_hold_protects_every_envelope_and_object(reg: Reg) -> None:
    referenced = push(reg, "a", ref="p07")
    loose_envelope = push(reg, "b")
    loose_object = put_object(reg, b"uploaded, never referenced")
    with reg.db.write() as s:
        hold_id = holds.place(s, ROOT, ns_row(s), ref=None, reason="litigation hold").id
    with pytest.raises(LegalHoldError) as refused:
        attempt(reg, ROOT, lambda s: envelopes.delete_envelope(s, ROOT, ns_row(s), loose_envelope))
    assert refused.value.details["action"] == "envelope.delete"
    assert entries(reg)[-1]["type"] == "envelope.delete.refused"
    with pytest.raises(LegalHoldError):
        attempt(reg, ROOT, lambda s: refs.remove(s, ROOT, ns_row(s), "p07", expected=referenced))
    # Moving refs (new work) goes on under a namespace hold.
    with reg.db.write() as s:
        refs.put(s, ROOT, ns_row(s), "p07", loose_envelope, expected=referenced)
    with reg.db.write() as s:
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=1, keep_days=None)

    report = collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0)
    assert report.retention_deleted == 0 and report.retention_held == 1
    assert report.links_held >= 1 and report.objects_removed == 0
    assert envelope_exists(reg, referenced) and envelope_exists(reg, loose_envelope)
    assert reg.storage.exists(loose_object)
    gc_entry = entries(reg)[-1]
    assert gc_entry["type"] == "gc.run" and gc_entry["details"]["retention_held_digests"] == [referenced]

    with reg.db.write() as s:
        holds.lift(s, ROOT, ns_row(s), hold_id)
    report = collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0)
    assert report.retention_deleted == 1 and report.objects_removed >= 4  # 3 chunks + manifest + loose
    assert not envelope_exists(reg, referenced) and envelope_exists(reg, loose_envelope)
    assert not reg.storage.exists(loose_object) and not reg.storage.exists(Digest(referenced))
    tomb = [e for e in entries(reg) if e["type"] == "envelope.deleted"]
    assert len(tomb) == 1 and tomb[0]["subjects"] == [referenced]
    assert tomb[0]["details"] == {"reason": "retention", "policy": {"keep_versions": 1, "keep_days": None}}


def test_ref_hold_protects_its_envelope_after_the_ref_is_gone(reg: Reg) -> None:
    """The protection is by the recorded digest: even an envelope no ref points at any more."""
    digest = push(reg, "a", ref="p07")
    with reg.db.write() as s:
        hold = holds.place(s, ROOT, ns_row(s), ref="p07", reason="keep")
        # Behind the service's back (it refuses to): the ref goes.
        s.execute(delete(Ref).where(Ref.name == "p07"))
    with pytest.raises(LegalHoldError):
        attempt(reg, ROOT, lambda s: envelopes.delete_envelope(s, ROOT, ns_row(s), digest))
    with reg.db.write() as s:
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=None, keep_days=1)
    age(reg, digest, 10)
    assert collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0).retention_held == 1
    assert envelope_exists(reg, digest)
    with reg.db.write() as s:
        holds.lift(s, ROOT, ns_row(s), hold.id)
    assert collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0).retention_deleted == 1


def test_hold_placement_is_checked(reg: Reg) -> None:
    writer = user(reg, "writer")
    with reg.db.write() as s, pytest.raises(ForbiddenError):
        holds.place(s, writer, ns_row(s), ref=None, reason="x")
    with reg.db.write() as s, pytest.raises(RefNotFoundError):
        holds.place(s, ROOT, ns_row(s), ref="nope", reason="x")
    with reg.db.write() as s, pytest.raises(RequestInvalidError, match="reason"):
        holds.place(s, ROOT, ns_row(s), ref=None, reason="  ")
    with reg.db.write() as s, pytest.raises(HoldNotFoundError):
        holds.lift(s, ROOT, ns_row(s), 999)
    with reg.db.write() as s:
        accounts.create_namespace(s, ROOT, "other")
        other_hold = holds.place(s, ROOT, ns_row(s, "other"), ref=None, reason="x").id
    with reg.db.write() as s, pytest.raises(HoldNotFoundError):
        holds.lift(s, ROOT, ns_row(s), other_hold)  # not a hold of this namespace
    with reg.db.read() as s:
        assert [h.id for h in holds.list_holds(s, ns_row(s, "other"), active_only=True)] == [other_hold]
        assert holds.list_holds(s, ns_row(s)) == []


# --- retention ------------------------------------------------------------------------------


def test_retention_keeps_what_any_rule_keeps_and_never_referenced_ones(reg: Reg) -> None:
    d = [push(reg, f"v{i}") for i in range(6)]  # d[5] is the newest
    for i, digest in enumerate(d):
        age(reg, digest, 60 - 10 * i)  # 60, 50, 40, 30, 20, 10 days old
    with reg.db.write() as s:
        refs.put(s, ROOT, ns_row(s), "pinned", d[0], expected=None)  # the oldest, but referenced
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=2, keep_days=35)
    dry = collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0, dry_run=True)
    # Kept: d[4], d[5] (2 newest), d[3] (30 days < 35), d[0] (referenced). Deleted: d[1], d[2].
    assert dry.retention_deleted == 2 and all(envelope_exists(reg, x) for x in d)
    before = size(reg)
    report = collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0)
    assert report.retention_deleted == 2
    assert [envelope_exists(reg, x) for x in d] == [True, False, False, True, True, True]
    new = entries(reg)[before:]
    assert [e["type"] for e in new] == ["envelope.deleted", "envelope.deleted", "gc.run"]
    assert [e["subjects"][0] for e in new[:2]] == [d[1], d[2]]  # oldest first
    assert new[-1]["details"]["retention_deleted"] == 2
    # GC freed their objects (chunks unique to them, and their manifests), not the shared ones.
    for gone in (d[1], d[2]):
        assert not reg.storage.exists(Digest(gone))
    assert reg.storage.exists(Digest.of_bytes(b"tokens"))

    # keep_versions alone: only the newest N stay (plus referenced ones).
    with reg.db.write() as s:
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=1, keep_days=None)
    collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0)
    assert [envelope_exists(reg, x) for x in d] == [True, False, False, False, False, True]
    # No policy: nothing more goes.
    with reg.db.write() as s:
        assert retention.clear_policy(s, ROOT, ns_row(s)) is not None
    young = push(reg, "young")
    assert collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0).retention_deleted == 0
    assert envelope_exists(reg, young)


def test_retention_respects_the_grace_period(reg: Reg) -> None:
    """A push stores the envelope before it moves the ref: young envelopes never go."""
    old = push(reg, "old")
    fresh = push(reg, "fresh")
    age(reg, old, 3)
    with reg.db.write() as s:
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=None, keep_days=1)
    report = collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=3600)
    assert report.retention_deleted == 1
    assert not envelope_exists(reg, old) and envelope_exists(reg, fresh)


def test_retention_policy_is_checked_and_logged(reg: Reg) -> None:
    writer = user(reg, "writer")
    with reg.db.write() as s, pytest.raises(ForbiddenError):
        retention.set_policy(s, writer, ns_row(s), keep_versions=3, keep_days=None)
    with reg.db.write() as s, pytest.raises(RequestInvalidError):
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=None, keep_days=None)
    with reg.db.write() as s, pytest.raises(RequestInvalidError):
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=0, keep_days=None)
    with reg.db.write() as s:
        assert retention.set_policy(s, ROOT, ns_row(s), keep_versions=3, keep_days=None)[1] is not None
    with reg.db.write() as s:  # the same again: no change, no entry
        assert retention.set_policy(s, ROOT, ns_row(s), keep_versions=3, keep_days=None)[1] is None
    with reg.db.write() as s:
        retention.set_policy(s, ROOT, ns_row(s), keep_versions=3, keep_days=30)
    log = entries(reg)
    assert [e["type"] for e in log[-2:]] == ["retention.set", "retention.set"]
    assert log[-1]["old"] == {"keep_versions": 3, "keep_days": None}
    assert log[-1]["new"] == {"keep_versions": 3, "keep_days": 30}
    with reg.db.write() as s:
        retention.clear_policy(s, ROOT, ns_row(s))
    with reg.db.write() as s:
        assert retention.clear_policy(s, ROOT, ns_row(s)) is None
    assert entries(reg)[-1]["type"] == "retention.cleared"
    assert entries(reg)[-1]["old"] == {"keep_versions": 3, "keep_days": 30}


# --- receipts -----------------------------------------------------------------------------------


def receipt_doc(key: SigningKey, digest: str, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "kvreg.receipt/v1",
        "artifact": {"namespace": NS, "ref": "p07", "digest": str(digest)},
        "host": {
            "config_fingerprint": str(Digest.of_bytes(b"config")),
            "model_fingerprint": str(Digest.of_bytes(b"model")),
            "tokenizer_fingerprint": str(Digest.of_bytes(b"tokenizer")),
            "device": "cpu",
            "hostname": "gpu-17",
        },
        "witness": "pass",
        "check": {"byte_exact": True, "steps": 32, "sha256_equal_steps": 32},
        "time": format_time(dt.datetime.now(dt.UTC)),
        "signer": key.public_key.to_text(),
    }
    doc.update(over)
    return doc


def signed_receipt(key: SigningKey, digest: str, **over: Any) -> bytes:
    return Receipt.from_doc(receipt_doc(key, digest, **over)).sign(key).to_json_bytes()


def send(reg: Reg, who: Principal, body: bytes) -> tuple[GraftReceipt, int | None]:
    with reg.db.write() as s:
        ns = ns_row(s)
        return receipts.store(s, who, ns, receipts.check(body, ns))


def test_receipts_are_checked_stored_once_and_logged(reg: Reg) -> None:
    digest = push(reg, "a", ref="p07")
    host_key = SigningKey.generate()  # a grafting host's own key, not registered anywhere
    reader = user(reg, "reader")
    body = signed_receipt(host_key, digest)
    before = size(reg)
    row, seq = send(reg, reader, body)
    assert seq is not None and size(reg) == before + 1
    assert row.receipt == body and row.witness_ok is True and row.byte_exact is True
    assert row.signer_keyid == host_key.public_key.keyid and row.created_by == "reader"
    entry = entries(reg)[-1]
    assert entry["type"] == "graft.receipt" and entry["subjects"] == [digest]
    assert entry["new"]["host"]["hostname"] == "gpu-17" and entry["new"]["witness"] == "pass"
    again, seq2 = send(reg, reader, body)
    assert again.id == row.id and seq2 is None and size(reg) == before + 1

    other = signed_receipt(host_key, digest, witness="skipped", check=None)
    send(reg, reader, other)
    with reg.db.read() as s:
        rows, total = receipts.list_receipts(s, ns_row(s), digest=digest, limit=10, offset=0)
        views = receipts.view(s, ns_row(s), rows)
    assert total == 2 and [v.receipt.witness for v in views] == ["skipped", "pass"]
    assert views[0].row.witness_ok is None and views[0].row.byte_exact is None
    assert not views[0].signer_registered
    with reg.db.read() as s:  # signed by the namespace's registered key: said so
        registered = receipts.check(signed_receipt(reg.key, digest), ns_row(s))
    with reg.db.write() as s:
        row3, _ = receipts.store(s, reader, ns_row(s), registered)
    with reg.db.read() as s:
        assert receipts.view(s, ns_row(s), [row3])[0].signer_registered

    # Refusals: nothing stored, nothing logged.
    before = size(reg)
    tampered = json.loads(signed_receipt(host_key, digest))
    tampered["signatures"] = json.loads(signed_receipt(SigningKey.generate(), digest))["signatures"]
    with pytest.raises(SignatureError):
        send(reg, reader, json.dumps(tampered).encode())
    with pytest.raises(ManifestUnknownError):
        send(reg, reader, signed_receipt(host_key, str(Digest.of_bytes(b"not stored here"))))
    with pytest.raises(ReceiptInvalidError, match="namespace"):
        send(
            reg,
            reader,
            signed_receipt(host_key, digest, artifact={"namespace": "elsewhere", "digest": str(digest)}),
        )
    with pytest.raises(UnauthenticatedError):
        send(reg, Principal(), signed_receipt(host_key, digest, time="2026-01-01T00:00:00Z"))
    manifest_env = sign_envelope(b"{}", host_key)  # a DSSE envelope, but not a receipt
    with pytest.raises(ReceiptInvalidError, match="payload type"):
        send(reg, reader, manifest_env.to_json_bytes())
    with pytest.raises(EnvelopeInvalidError):
        send(reg, reader, b"not json")
    assert size(reg) == before


# --- one entry per change; a failure after the change rolls both back -----------------------------


def _counts(reg: Reg) -> tuple[int, int, int, int, int, int]:
    with reg.db.read() as s:
        return (
            s.scalar(select(func.count()).select_from(AuditEntry)) or 0,
            s.scalar(select(func.count()).select_from(LegalHold).where(LegalHold.lifted_at.is_(None))) or 0,
            s.scalar(select(func.count()).select_from(RetentionPolicy)) or 0,
            s.scalar(select(func.count()).select_from(GraftReceipt)) or 0,
            s.scalar(select(func.count()).select_from(Envelope)) or 0,
            s.scalar(select(func.count()).select_from(NamespaceObject)) or 0,
        )


def test_every_compliance_change_logs_once_and_rolls_back_with_its_entry(reg: Reg) -> None:
    a = push(reg, "a", ref="p07")
    b = push(reg, "b")
    reader = user(reg, "reader")
    host = SigningKey.generate()
    hold_ids: list[int] = []

    def place(s: Any) -> None:
        hold_ids.append(holds.place(s, ROOT, ns_row(s), ref="p07", reason="r").id)

    changes: list[tuple[str, Callable[[Any], Any]]] = [
        ("hold.placed", place),
        ("hold.lifted", lambda s: holds.lift(s, ROOT, ns_row(s), hold_ids[-1], reason="done")),
        (
            "retention.set",
            lambda s: retention.set_policy(s, ROOT, ns_row(s), keep_versions=5, keep_days=None),
        ),
        ("retention.cleared", lambda s: retention.clear_policy(s, ROOT, ns_row(s))),
        (
            "graft.receipt",
            lambda s: receipts.store(
                s, reader, ns_row(s), receipts.check(signed_receipt(host, a), ns_row(s))
            ),
        ),
        ("envelope.deleted", lambda s: envelopes.delete_envelope(s, ROOT, ns_row(s), b)),
        ("ref.deleted", lambda s: refs.remove(s, ROOT, ns_row(s), "p07", expected=a)),
    ]
    for kind, change in changes:
        before = _counts(reg)
        with pytest.raises(RuntimeError), reg.db.write() as s:
            change(s)
            raise RuntimeError("a failure after the change, in the same transaction")
        assert _counts(reg) == before, f"{kind}: a failed change left something behind"
        if kind == "hold.placed":
            hold_ids.clear()
        with reg.db.write() as s:
            change(s)
        after = _counts(reg)
        assert after[0] == before[0] + 1, f"{kind}: {after[0] - before[0]} entries for one change"
        assert entries(reg)[-1]["type"] == kind

    # A refused attempt logs one entry of its own, and nothing else changes.
    a2 = push(reg, "c", ref="q")
    with reg.db.write() as s:
        holds.place(s, ROOT, ns_row(s), ref=None, reason="all")
    before = _counts(reg)
    with pytest.raises(LegalHoldError):
        attempt(reg, ROOT, lambda s: refs.remove(s, ROOT, ns_row(s), "q", expected=a2))
    after = _counts(reg)
    assert after[0] == before[0] + 1 and after[1:] == before[1:]


def test_in_use_still_wins_without_a_hold(reg: Reg) -> None:
    digest = push(reg, "a", ref="p07")
    before = size(reg)
    with pytest.raises(InUseError):
        attempt(reg, ROOT, lambda s: envelopes.delete_envelope(s, ROOT, ns_row(s), digest))
    assert size(reg) == before, "only legal-hold refusals are logged"
    with reg.db.read() as s:
        assert s.get(StoredObject, digest) is not None


# --- kvreg-admin -------------------------------------------------------------------------------


def test_admin_cli_holds_and_retention(tmp_path: Path) -> None:
    import subprocess
    import sys

    data = tmp_path / "data"

    def admin(*args: str, expect: int = 0) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "kvreg_registry.admin", "--data", str(data), "--json", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == expect, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    admin("namespace", "create", "aime25")
    assert admin("hold", "set", "aime25", expect=2)["error"]["code"] == "REQUEST_INVALID"  # no reason
    assert admin("hold", "set", "aime25", "p07", "--reason", "x", expect=1)["error"]["code"] == "REF_UNKNOWN"
    held = admin("hold", "set", "aime25", "--reason", "matter 42")
    assert held["active"] and held["ref"] is None and held["reason"] == "matter 42"
    assert [h["id"] for h in admin("hold", "list", "--active")["holds"]] == [held["id"]]
    lifted = admin("hold", "lift", str(held["id"]), "--reason", "closed")
    assert lifted["changed"] and not lifted["active"] and lifted["lift_reason"] == "closed"
    assert not admin("hold", "lift", str(held["id"]))["changed"]
    assert admin("hold", "list", "aime25", "--active")["holds"] == []
    assert admin("hold", "lift", "99", expect=1)["error"]["code"] == "HOLD_UNKNOWN"

    assert admin("retention", "set", "aime25", expect=2)["error"]["code"] == "REQUEST_INVALID"
    assert admin("retention", "set", "aime25", "--keep-versions", "3", "--keep-days", "30") == {
        "namespace": "aime25",
        "keep_versions": 3,
        "keep_days": 30,
    }
    assert admin("retention", "show", "aime25")["keep_days"] == 30
    assert admin("retention", "clear", "aime25")["keep_versions"] is None
    report = admin("gc", "--grace-seconds", "0")
    assert report["retention_deleted"] == 0 and report["retention_held"] == 0

    db = Database(f"sqlite:///{data / 'registry.sqlite3'}")
    try:
        with db.read() as s:
            types = list(s.scalars(select(AuditEntry.type).order_by(AuditEntry.seq)).all())
    finally:
        db.dispose()
    assert types == [
        "namespace.created",
        "hold.placed",
        "hold.lifted",
        "retention.set",
        "retention.cleared",
        "gc.run",
    ]


def test_a_ref_made_during_a_delete_turns_it_into_in_use(reg: Reg) -> None:
    """The refs' foreign key is the last word: a delete racing a new ref answers 409, not 500."""
    digest = push(reg, "a", ref="p07")
    before = size(reg)
    with reg.db.write() as s:
        ns = ns_row(s)
        row = envelopes.get(s, ns, digest)
        with pytest.raises(InUseError, match="while it was being deleted"):
            envelopes.remove(s, "test-admin", ns, row, {"reason": "request"})
        assert envelopes.get(s, ns, digest) is not None  # the savepoint rolled back, the session lives
    assert size(reg) == before and envelope_exists(reg, digest)


def test_an_upload_in_another_namespace_keeps_the_object_not_this_namespaces_link(reg: Reg) -> None:
    """GC drops a namespace's unreferenced link even while another namespace's upload session
    lists the same digest: that upload makes its own link when it completes. The stored object
    stays for it (a session anywhere protects the bytes)."""
    data = b"uploaded here, never referenced; in flight elsewhere"
    d = put_object(reg, data)
    writer = user(reg, "writer")
    with reg.db.write() as s:
        other = accounts.create_namespace(s, ROOT, "elsewhere")
        object_service.open_session(s, other, writer.user_id, [d], ttl_seconds=3600)
    report = collect_garbage(reg.db, reg.storage, ROOT, grace_seconds=0)
    assert report.links_removed == 1, report
    with reg.db.read() as s, pytest.raises(ObjectNotFoundError):
        object_service.held_size(s, ns_row(s), d)
    assert reg.storage.exists(d) and report.objects_removed == 0
