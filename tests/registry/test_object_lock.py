"""The per-object lock between uploads and GC (``kvreg_registry.services.objects``), on PostgreSQL
(and, where the interleaving does not matter, on SQLite too).

PostgreSQL's ``INSERT ... ON CONFLICT DO NOTHING`` does not wait on a committed row's
lock, so an upload can find the row present, then wait for it in its locking read while
GC holds it, and find it gone once GC has deleted it. The upload must insert the row
again, not fail (a 500). SQLite serializes writers, so the interleaving cannot happen
there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, func, select

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import StoredObject
from kvreg_registry.services import accounts
from kvreg_registry.services import objects as object_service
from services import wait_for_a_lock_wait

WAIT_S = 30.0
ROOT = Principal(user_id=None, name="test-admin", is_admin=True)


def test_lock_object_inserts_the_row_again_when_gc_deletes_it_meanwhile(fresh_pg_url: str) -> None:
    upgrade(fresh_pg_url)
    db = Database(fresh_pg_url)
    digest = Digest.of_bytes(b"an object GC is collecting")
    size = len(b"an object GC is collecting")
    try:
        with db.write() as s:
            object_service.lock_object(s, digest, size)
        locked: list[Digest] = []
        failed: list[BaseException] = []

        def upload() -> None:
            try:
                with db.write() as s:
                    object_service.lock_object(s, digest, size)
                    locked.append(digest)
            except BaseException as e:  # reported by the assertion below
                failed.append(e)

        with db.write() as gc:  # GC's sweep: the row locked, then deleted
            gc.execute(select(StoredObject).where(StoredObject.digest == digest).with_for_update()).one()
            thread = threading.Thread(target=upload)
            thread.start()
            wait_for_a_lock_wait(fresh_pg_url, "the upload", still_running=thread.is_alive)
            gc.execute(delete(StoredObject).where(StoredObject.digest == digest))
        thread.join(WAIT_S)
        assert not thread.is_alive()
        assert failed == []
        assert locked == [digest]
        with db.read() as s:
            assert s.scalar(select(StoredObject.size).where(StoredObject.digest == digest)) == size
    finally:
        db.dispose()


def _objects(*texts: bytes) -> list[tuple[Digest, int]]:
    return [(Digest.of_bytes(t), len(t)) for t in texts]


def test_lock_objects_inserts_again_only_the_rows_gc_deleted_meanwhile(fresh_pg_url: str) -> None:
    # A pack's objects are locked in two statements; one of them collected by GC while the
    # upload waits for it is inserted again, the others are locked as they are.
    upgrade(fresh_pg_url)
    db = Database(fresh_pg_url)
    kept, collected, new = _objects(b"kept by everyone", b"collected by GC", b"new in this pack")
    try:
        with db.write() as s:
            object_service.lock_objects(s, [kept, collected])
        failed: list[BaseException] = []

        def upload() -> None:
            try:
                with db.write() as s:
                    object_service.lock_objects(s, [new, collected, kept])
            except BaseException as e:  # reported by the assertion below
                failed.append(e)

        with db.write() as gc:
            gc.execute(
                select(StoredObject).where(StoredObject.digest == collected[0]).with_for_update()
            ).one()
            thread = threading.Thread(target=upload)
            thread.start()
            wait_for_a_lock_wait(fresh_pg_url, "the upload", still_running=thread.is_alive)
            gc.execute(delete(StoredObject).where(StoredObject.digest == collected[0]))
        thread.join(WAIT_S)
        assert not thread.is_alive()
        assert failed == []
        with db.read() as s:
            rows = dict(s.execute(select(StoredObject.digest, StoredObject.size)).all())
        assert rows == {str(d): size for d, size in (kept, collected, new)}
    finally:
        db.dispose()


def test_lock_objects_of_overlapping_packs_in_other_orders_never_deadlock(fresh_pg_url: str) -> None:
    # Two uploads lock the same objects (some stored, some new), listed in opposite orders,
    # while a third transaction holds one stored row: both wait, then both get every lock.
    upgrade(fresh_pg_url)
    db = Database(fresh_pg_url)
    stored = _objects(*(f"stored {i}".encode() for i in range(6)))
    new = _objects(*(f"new {i}".encode() for i in range(6)))
    try:
        with db.write() as s:
            object_service.lock_objects(s, stored)
        orders = [stored + new, list(reversed(new + stored))]
        done: list[int] = []
        failed: list[BaseException] = []

        def upload(i: int) -> None:
            try:
                with db.write() as s:
                    object_service.lock_objects(s, orders[i])
                done.append(i)
            except BaseException as e:  # reported by the assertion below
                failed.append(e)

        with db.write() as holder:
            holder.execute(
                select(StoredObject).where(StoredObject.digest == stored[0][0]).with_for_update()
            ).one()
            threads = [threading.Thread(target=upload, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            wait_for_a_lock_wait(
                fresh_pg_url, "the uploads", still_running=lambda: any(t.is_alive() for t in threads)
            )
        for t in threads:
            t.join(WAIT_S)
        assert not any(t.is_alive() for t in threads)
        assert failed == []  # a deadlock would fail one of them (PostgreSQL breaks it with an error)
        assert sorted(done) == [0, 1]
        with db.read() as s:
            assert s.scalar(select(func.count()).select_from(StoredObject)) == 12
    finally:
        db.dispose()


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    """A migrated database of each kind (SQLite, then PostgreSQL)."""
    upgrade(database_url)
    database = Database(database_url)
    try:
        yield database
    finally:
        database.dispose()


def test_lock_objects_refuses_them_all_when_one_stored_row_has_another_size(db: Database) -> None:
    a, b = _objects(b"first object", b"second object")
    with db.write() as s:
        object_service.lock_objects(s, [b])
    with pytest.raises(DigestMismatchError, match="cannot hash to it"), db.write() as s:
        object_service.lock_objects(s, [a, (b[0], b[1] + 1)])
    with db.read() as s:  # the refused transaction left nothing: a's row is not there
        assert s.scalars(select(StoredObject.digest)).all() == [str(b[0])]


def test_hold_many_says_which_digests_were_new_to_the_namespace(db: Database) -> None:
    a, b, c = _objects(b"a", b"b", b"c")
    with db.write() as s:
        ns = accounts.create_namespace(s, ROOT, "holder")
        object_service.lock_objects(s, [a, b, c])
        assert object_service.hold_many(s, ns, [a[0]]) == {str(a[0])}
        assert object_service.hold_many(s, ns, [c[0], a[0], b[0]]) == {str(b[0]), str(c[0])}
        assert object_service.hold_many(s, ns, []) == set()
        assert object_service.hold(s, ns, b[0]) is False
