"""The per-object lock between uploads and GC (``kvreg_registry.services.objects``), on PostgreSQL.

PostgreSQL's ``INSERT ... ON CONFLICT DO NOTHING`` does not wait on a committed row's
lock, so an upload can find the row present, then wait for it in its locking read while
GC holds it, and find it gone once GC has deleted it. The upload must insert the row
again, not fail (a 500). SQLite serializes writers, so the interleaving cannot happen
there.
"""

from __future__ import annotations

import threading

from sqlalchemy import delete, select

from kvreg.core.digest import Digest
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import StoredObject
from kvreg_registry.services import objects as object_service
from services import wait_for_a_lock_wait

WAIT_S = 30.0


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
