"""Two creations of the same name racing on PostgreSQL: the loser gets its 409, not a 500.

On PostgreSQL a creation checks that the name is free, then inserts; a rival transaction
that inserted the same key and has not committed is invisible to the check, so the insert
waits for it and, once it commits, fails on the unique key. The registry catches that in
a savepoint around the insert. It once added the row *before* opening the savepoint,
so SQLAlchemy flushed it outside it, the whole transaction was aborted and the request
ended in a 500 (found by ``bench/soak.py``: two pushers creating the same ref).

Here the rival is a transaction of the test, holding the name uncommitted until the
server's request is seen waiting on its lock; then it commits. SQLite serializes writers
(the server's write transaction waits for the rival's to end, then sees the name taken),
so this interleaving exists on PostgreSQL only, and only that backend runs these tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from services import wait_for_a_lock_wait

from .http_helpers import envelope_bytes, error_code, upload_objects
from .registry_server import Registry

WAIT_S = 30.0


@pytest.fixture
def pg_registry(_registries: dict[str, Registry]) -> Registry:
    return _registries["postgres-s3"]


@contextmanager
def _database(registry: Registry) -> Iterator[Any]:
    from kvreg_registry.db.engine import Database

    db = Database(registry.env["KVREG_DATABASE_URL"])
    try:
        yield db
    finally:
        db.dispose()


def _race(
    registry: Registry, rival: Callable[[Session], object], request: Callable[[httpx.Client], httpx.Response]
) -> httpx.Response:
    """Run ``rival`` in a transaction that stays open until the server's ``request`` waits on
    one of its locks, then commit it; return the server's answer."""
    answers: list[httpx.Response] = []
    failures: list[BaseException] = []

    def send() -> None:
        try:
            with registry.admin() as c:
                answers.append(request(c))
        except BaseException as e:  # reported by the assertion below
            failures.append(e)

    with _database(registry) as db:
        with db.write() as s:
            rival(s)
            thread = threading.Thread(target=send)
            thread.start()
            wait_for_a_lock_wait(
                registry.env["KVREG_DATABASE_URL"], "the server's request", still_running=thread.is_alive
            )
        thread.join(WAIT_S)
    assert not thread.is_alive() and failures == [], failures
    return answers[0]


def test_the_loser_of_a_ref_creation_race_gets_409(pg_registry: Registry, depositor: dict[str, Any]) -> None:
    from kvreg_registry.admin import ACTOR
    from kvreg_registry.services import accounts, refs

    ns = pg_registry.namespace()
    pg_registry.register_key(ns, depositor["public_key"])
    m = depositor["manifests"]["p07"]
    with pg_registry.admin() as c:
        upload_objects(c, ns, depositor["home"], m)
        r = c.put(f"/namespaces/{ns}/envelopes/{m.digest}", content=envelope_bytes(depositor["home"], m))
        assert r.status_code == 201, r.text

    def rival(s: Session) -> None:
        refs.put(s, ACTOR, accounts.get_namespace(s, ns), "p07", m.digest, expected=None)

    r = _race(
        pg_registry,
        rival,
        lambda c: c.put(
            f"/namespaces/{ns}/refs/p07", json={"digest": str(m.digest)}, headers={"If-None-Match": "*"}
        ),
    )
    assert r.status_code == 409 and error_code(r) == "REF_CONFLICT", r.text
    with pg_registry.admin() as c:
        assert c.get(f"/namespaces/{ns}/refs/p07").json()["digest"] == str(m.digest)


def test_the_loser_of_a_namespace_creation_race_gets_409(pg_registry: Registry) -> None:
    from kvreg_registry.admin import ACTOR
    from kvreg_registry.services import accounts

    name = f"ns-race-{time.monotonic_ns() % 10**9}"
    r = _race(
        pg_registry,
        lambda s: accounts.create_namespace(s, ACTOR, name),
        lambda c: c.post("/namespaces", json={"name": name}),
    )
    assert r.status_code == 409 and error_code(r) == "ALREADY_EXISTS", r.text
