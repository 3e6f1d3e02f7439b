"""The audit log's append (dense sequence numbers under concurrency, one entry per change,
rolled back with the change) and token authentication, on SQLite and PostgreSQL."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from kvreg.core import logtree
from kvreg.core.errors import AlreadyExistsError, ForbiddenError, NamespaceNotFoundError, UnauthenticatedError
from kvreg.core.merkle import leaf_hash
from kvreg_registry import audit
from kvreg_registry.auth import Principal, authenticate, hash_token
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import ApiToken, AuditEntry, AuditSubject, LogHead, LogNode
from kvreg_registry.services import accounts

ROOT = Principal(user_id=None, name="test-admin", is_admin=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    url = (
        f"sqlite:///{tmp_path / 'r.sqlite3'}"
        if request.param == "sqlite"
        else request.getfixturevalue("fresh_pg_url")
    )
    upgrade(url)
    database = Database(url)
    request.addfinalizer(database.dispose)
    return database


def _entries(db: Database) -> list[AuditEntry]:
    with db.read() as s:
        return list(s.scalars(select(AuditEntry).order_by(AuditEntry.seq)).all())


def test_concurrent_appends_are_gap_free(db: Database) -> None:
    def work(i: int) -> int:
        with db.write() as s:
            return audit.append(s, "test.entry", actor=f"worker{i % 4}", details={"i": i})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        seqs = sorted(pool.map(work, range(60)))
    assert seqs == list(range(60))
    entries = _entries(db)
    assert [e.seq for e in entries] == list(range(60))
    for e in entries:
        doc = json.loads(e.entry)
        assert doc["seq"] == e.seq and doc["type"] == "test.entry"
        assert e.leaf_hash == leaf_hash(e.entry)
    with db.read() as s:
        assert s.scalar(select(LogHead.size)) == 60


def test_append_many_is_the_same_as_appends_one_by_one(db: Database, tmp_path: Path) -> None:
    """Batches of many lengths, at many positions of the tree: the same entries (but one time
    each batch), subjects and stored nodes as single appends, and the nodes are the tree's
    (the leaves hash the time, so the hashes are checked against the tree of the leaves)."""
    digest = "sha256:" + "ab" * 32
    single_url = f"sqlite:///{tmp_path / 'single.sqlite3'}"
    upgrade(single_url)
    single = Database(single_url)
    n = 0
    for batch in (1, 3, 0, 2, 5, 1, 8, 13):
        entries = [
            audit.NewEntry("held", actor="a", namespace="ns", subjects=[digest], details={"i": n + i})
            for i in range(batch)
        ]
        with db.write() as s:
            assert audit.append_many(s, entries) == list(range(n, n + batch))
        for e in entries:
            with single.write() as s:
                audit.append(
                    s, e.type, actor=e.actor, namespace=e.namespace, subjects=e.subjects, details=e.details
                )
        n += batch

    def dump(database: Database) -> tuple[list[Any], list[tuple[int, int, bytes]], list[tuple[str, int]]]:
        with database.read() as s:
            rows = s.scalars(select(AuditEntry).order_by(AuditEntry.seq))
            entries = [(e.seq, json.loads(e.entry)) for e in rows]
            stored = s.execute(select(LogNode.level, LogNode.idx, LogNode.hash))
            nodes = sorted((int(lv), int(ix), bytes(h)) for lv, ix, h in stored)
            pairs = s.execute(select(AuditSubject.digest, AuditSubject.seq))
            subjects = sorted((str(d), int(q)) for d, q in pairs)
            size = s.scalar(select(LogHead.size))
        assert size == n
        for _, doc in entries:
            doc.pop("time")
        return entries, nodes, subjects

    batched, alone = dump(db), dump(single)
    single.dispose()
    assert batched[0] == alone[0] and batched[2] == alone[2]  # the entries (but their time), subjects
    assert [node[:2] for node in batched[1]] == [node[:2] for node in alone[1]]  # the same nodes stored
    with db.read() as s:
        leaves = [bytes(h) for h in s.scalars(select(AuditEntry.leaf_hash).order_by(AuditEntry.seq))]
    assert {(lv, ix): h for lv, ix, h in batched[1]} == logtree.from_leaves(leaves)


def test_a_failed_change_leaves_no_entry(db: Database) -> None:
    with db.write() as s:
        accounts.create_namespace(s, ROOT, "ns")
    before = len(_entries(db))
    with pytest.raises(RuntimeError), db.write() as s:
        accounts.create_user(s, ROOT, "alice")
        raise RuntimeError("a failure after the change, in the same transaction")
    assert len(_entries(db)) == before
    with db.read() as s, pytest.raises(Exception, match="alice"):
        accounts.get_user(s, "alice")
    with pytest.raises(AlreadyExistsError), db.write() as s:
        accounts.create_namespace(s, ROOT, "ns")
    assert len(_entries(db)) == before


def test_every_account_change_is_logged_once(db: Database) -> None:
    from kvreg.core.keys import SigningKey

    key = SigningKey.generate().public_key
    with db.write() as s:
        accounts.create_namespace(s, ROOT, "ns")
        accounts.create_user(s, ROOT, "bob")
        token = accounts.create_token(s, ROOT, "bob", label="laptop")
        accounts.set_role(s, ROOT, "ns", "bob", "write")
        accounts.register_key(s, ROOT, "ns", key.to_text())
        accounts.revoke_key(s, ROOT, "ns", key.keyid)
        accounts.revoke_token(s, ROOT, token.id)
        accounts.remove_role(s, ROOT, "ns", "bob")
    types = [e.type for e in _entries(db)]
    assert types == [
        "namespace.created",
        "user.created",
        "token.created",
        "role.set",
        "key.registered",
        "key.revoked",
        "token.revoked",
        "role.removed",
    ]
    assert all(token.token not in e.entry.decode() for e in _entries(db)), "a token leaked into the log"


def test_tokens_are_stored_hashed_and_checked(db: Database) -> None:
    with db.write() as s:
        accounts.create_namespace(s, ROOT, "private")
        accounts.create_user(s, ROOT, "carol")
        t = accounts.create_token(s, ROOT, "carol", expires_in_days=1)
        accounts.set_role(s, ROOT, "private", "carol", "read")
    with db.read() as s:
        row = s.get(ApiToken, t.id)
        assert row is not None and row.token_hash == hash_token(t.token) and t.token not in row.token_hash
        who = authenticate(s, t.token)
        assert who.name == "carol" and not who.is_admin
        ns = accounts.get_namespace(s, "private")
        who.require(s, ns, "read")
        with pytest.raises(ForbiddenError):
            who.require(s, ns, "write")
        with pytest.raises(UnauthenticatedError):
            authenticate(s, t.token + "x")
        with pytest.raises(UnauthenticatedError):
            Principal().require(s, ns, "read")
    with db.write() as s:
        accounts.create_user(s, ROOT, "dave")
        dave = accounts.create_token(s, ROOT, "dave")
    with db.read() as s, pytest.raises(NamespaceNotFoundError):
        authenticate(s, dave.token).require(s, accounts.get_namespace(s, "private"), "read")
    with db.write() as s:
        s.get(ApiToken, t.id).expires_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)  # type: ignore[union-attr]
    with db.read() as s, pytest.raises(UnauthenticatedError, match="expired"):
        authenticate(s, t.token)
    with db.write() as s:
        accounts.revoke_token(s, ROOT, dave.id)
    with db.read() as s, pytest.raises(UnauthenticatedError, match="revoked"):
        authenticate(s, dave.token)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(ApiToken)) == 2
