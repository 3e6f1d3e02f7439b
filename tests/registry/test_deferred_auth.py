"""Object GET and HEAD authenticate the caller inside the route's own read session
(``kvreg_registry.api.deps.deferred_namespace_access``): one transaction and one worker-thread
hop per object, the bulk of every pull, with every answer of the usual order kept: the caller
first (401, counted by the failed-authentication limiter), then the digest's syntax (400), then
the namespace and the role (404, never counted), then the object."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select, update

from kvreg.core.digest import Digest
from kvreg_registry.api.deps import NamespaceAccess
from kvreg_registry.api.ratelimit import AuthFailureLimiter
from kvreg_registry.app import create_app
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import ApiToken
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings

OPERATOR = Principal(is_admin=True, name="operator")
BAD = "kvreg_" + "B" * 43
DATA = b"an object of the private namespace 'team'\n" * 100
DIGEST = Digest.from_hex(hashlib.sha256(DATA).hexdigest())


@dataclass
class Reg:
    client: TestClient
    app: Any
    alice: str  # writes to 'team'
    bob: str  # no role in 'team'
    begins: list[str]

    def get(self, token: str | None, digest: str = str(DIGEST), method: str = "GET") -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.client.request(method, f"/api/v1/namespaces/team/objects/{digest}", headers=headers)

    def last_used(self, label: str) -> Any:
        """The last-used time of the token labelled ``label``."""
        with self.app.state.registry.db.read() as s:
            return s.scalar(select(ApiToken.last_used_at).where(ApiToken.label == label))


@pytest.fixture
def reg(tmp_path: Path) -> Iterator[Reg]:
    app = create_app(Settings(data_dir=tmp_path / "reg", auth_failure_limit=3))
    with TestClient(app, base_url="http://testserver") as client:
        st = app.state.registry
        with st.db.write() as s:
            accounts.create_user(s, OPERATOR, "alice")
            accounts.create_user(s, OPERATOR, "bob")
            alice = accounts.create_token(s, OPERATOR, "alice", label="alice").token
            bob = accounts.create_token(s, OPERATOR, "bob", label="bob").token
            accounts.create_namespace(s, OPERATOR, "team")
            accounts.set_role(s, OPERATOR, "team", "alice", "write")
        app.state.auth_failure_limiter = AuthFailureLimiter(limit=3, window_seconds=60, max_keys=100)
        r = client.put(
            f"/api/v1/namespaces/team/objects/{DIGEST}",
            content=DATA,
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert r.status_code in (200, 201), r.text
        begins: list[str] = []
        event.listen(st.db.engine, "begin", lambda conn: begins.append("begin"))
        yield Reg(client=client, app=app, alice=alice, bob=bob, begins=begins)


def test_an_object_get_or_head_is_one_transaction(reg: Reg) -> None:
    for method in ("GET", "HEAD", "GET"):
        reg.begins.clear()
        r = reg.get(reg.alice, method=method)
        assert r.status_code == 200 and r.headers["content-length"] == str(len(DATA))
        assert r.content == (DATA if method == "GET" else b"")
        assert reg.begins == ["begin"], f"{method} took {len(reg.begins)} transactions"
    ranged = reg.client.get(
        f"/api/v1/namespaces/team/objects/{DIGEST}",
        headers={"Authorization": f"Bearer {reg.alice}", "Range": "bytes=10-19"},
    )
    assert ranged.status_code == 206 and ranged.content == DATA[10:20]


def test_a_stale_last_used_time_is_brought_up_to_date_after_the_read(reg: Reg) -> None:
    with reg.app.state.registry.db.write() as s:
        s.execute(update(ApiToken).where(ApiToken.label == "alice").values(last_used_at=None))
    reg.begins.clear()
    assert reg.get(reg.alice).status_code == 200
    assert reg.begins == ["begin", "begin"]  # the read, then the token's touch
    assert reg.last_used("alice") is not None


def test_the_caller_is_checked_before_the_digest_and_the_namespace(reg: Reg) -> None:
    assert reg.get(BAD, "not-a-digest").status_code == 401
    # anonymous is a caller too: its digest is checked before the (private) namespace
    assert reg.get(None, "not-a-digest").status_code == 400
    r = reg.get(reg.alice, "not-a-digest")
    assert r.status_code == 400 and r.headers["x-kvreg-error-code"] == "DIGEST_INVALID"
    missing = Digest.from_hex(hashlib.sha256(b"nothing").hexdigest())
    assert reg.get(reg.alice, str(missing)).status_code == 404
    assert reg.get(None).status_code == 401
    assert reg.client.get(f"/api/v1/namespaces/nowhere/objects/{DIGEST}").status_code == 401


def test_failed_tokens_are_counted_and_a_missing_role_is_not(reg: Reg) -> None:
    for _ in range(5):  # bob is authenticated: not seeing the namespace is no failed authentication
        r = reg.get(reg.bob, method="HEAD")
        assert r.status_code == 404
    assert reg.get(reg.bob).status_code == 404
    for _ in range(3):
        r = reg.get(BAD)
        assert r.status_code == 401 and r.headers["x-kvreg-error-code"] == "UNAUTHENTICATED"
    r = reg.get(reg.alice)
    assert r.status_code == 429 and r.headers["x-kvreg-error-code"] == "RATE_LIMITED"


def test_a_revoked_token_is_refused_at_once(reg: Reg) -> None:
    assert reg.get(reg.alice).status_code == 200
    with reg.app.state.registry.db.write() as s:
        token_id = s.scalar(select(ApiToken.id).where(ApiToken.label == "alice"))
        accounts.revoke_token(s, OPERATOR, token_id)
    r = reg.get(reg.alice)
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]


def test_a_deferred_access_knows_its_caller_only_after_its_first_session(reg: Reg) -> None:
    access = NamespaceAccess(reg.app.state.registry, None, "team")
    with pytest.raises(RuntimeError, match="after its first session"):
        _ = access.who
