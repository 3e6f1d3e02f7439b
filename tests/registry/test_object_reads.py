"""An object's GET and HEAD read the caller, the namespace, the role and the object with one
statement (``kvreg_registry.services.object_reads``), and answer exactly as the general way
(``auth.authenticate``, ``accounts.readable_namespace``, ``objects.held_size``) does, for
every kind of caller, namespace and digest, on SQLite and on PostgreSQL: the one statement
only ever grants, and hands everything else to the general way in the same transaction."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, update

from kvreg.core.digest import Digest
from kvreg_registry.api.ratelimit import AuthFailureLimiter
from kvreg_registry.app import create_app
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import ApiToken, User
from kvreg_registry.services import accounts, object_reads
from kvreg_registry.settings import Settings

OPERATOR = Principal(is_admin=True, name="operator")


def _digest(data: bytes) -> Digest:
    return Digest.from_hex(hashlib.sha256(data).hexdigest())


TEAM_DATA = b"held by the private namespace 'team'\n" * 50
PUB_DATA = b"held by the public namespace 'pub'\n" * 50
NEVER = _digest(b"stored nowhere")


@dataclass
class Reg:
    client: TestClient
    app: Any
    tokens: dict[str, str | None]
    statements: list[str]

    def ask(self, method: str, token: str | None, namespace: str, digest: str) -> tuple[Any, ...]:
        headers = {} if token is None else {"Authorization": token}
        r = self.client.request(method, f"/api/v1/namespaces/{namespace}/objects/{digest}", headers=headers)
        return r.status_code, r.headers.get("x-kvreg-error-code"), r.headers.get("content-length"), r.content


@pytest.fixture
def reg(tmp_path: Path, database_url: str) -> Iterator[Reg]:
    """A registry on each database (``database_url``: SQLite, then PostgreSQL) with a private and a
    public namespace holding one object each, and a token of every kind."""
    app = create_app(Settings(data_dir=tmp_path / "reg", database_url=database_url))
    with TestClient(app, base_url="http://testserver") as client:
        st = app.state.registry
        tokens: dict[str, str | None] = {"anonymous": None}
        with st.db.write() as s:
            for user in ("writer", "reader", "stranger", "admin", "gone", "disabled"):
                accounts.create_user(s, OPERATOR, user, admin=user == "admin")
                tokens[user] = "Bearer " + accounts.create_token(s, OPERATOR, user, label=user).token
            tokens["expired"] = (
                "Bearer " + accounts.create_token(s, OPERATOR, "reader", label="expired").token
            )
            accounts.create_namespace(s, OPERATOR, "team")
            accounts.create_namespace(s, OPERATOR, "pub", public=True)
            for ns in ("team", "pub"):
                accounts.set_role(s, OPERATOR, ns, "writer", "write")
            accounts.set_role(s, OPERATOR, "team", "reader", "read")
            accounts.set_role(s, OPERATOR, "team", "gone", "read")
            accounts.set_role(s, OPERATOR, "team", "disabled", "read")
        for ns, data in (("team", TEAM_DATA), ("pub", PUB_DATA)):
            r = client.put(
                f"/api/v1/namespaces/{ns}/objects/{_digest(data)}",
                content=data,
                headers={"Authorization": tokens["writer"] or ""},
            )
            assert r.status_code in (200, 201), r.text
        with st.db.write() as s:
            gone = s.query(ApiToken).filter(ApiToken.label == "gone").one()
            accounts.revoke_token(s, OPERATOR, gone.id)
            s.execute(
                update(ApiToken)
                .where(ApiToken.label == "expired")
                .values(expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
            )
            s.execute(update(User).where(User.name == "disabled").values(disabled_at=dt.datetime.now(dt.UTC)))
        tokens["unknown"] = "Bearer kvreg_" + "U" * 43
        tokens["malformed"] = "Basic dXNlcjpwYXNz"
        # No caller is ever locked out here: the limiter has its own tests.
        app.state.auth_failure_limiter = AuthFailureLimiter(limit=10_000, window_seconds=60, max_keys=100)
        statements: list[str] = []
        event.listen(
            st.db.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0].upper())
        )
        yield Reg(client=client, app=app, tokens=tokens, statements=statements)


def test_a_granted_read_is_one_statement(reg: Reg) -> None:
    for caller, namespace, data in (
        ("writer", "team", TEAM_DATA),
        ("reader", "team", TEAM_DATA),
        ("admin", "team", TEAM_DATA),
        ("anonymous", "pub", PUB_DATA),
        ("stranger", "pub", PUB_DATA),
    ):
        for method in ("GET", "HEAD"):
            reg.ask(method, reg.tokens[caller], namespace, str(_digest(data)))  # last-used time touched
            reg.statements.clear()
            status, _, length, body = reg.ask(method, reg.tokens[caller], namespace, str(_digest(data)))
            assert (status, length) == (200, str(len(data))), (caller, namespace, method)
            assert body == (data if method == "GET" else b"")
            selects = [s for s in reg.statements if s == "SELECT"]
            assert len(selects) == 1, f"{caller} {method} {namespace}: {reg.statements}"


def test_every_answer_equals_the_general_way(reg: Reg, monkeypatch: pytest.MonkeyPatch) -> None:
    digests = [str(_digest(TEAM_DATA)), str(_digest(PUB_DATA)), str(NEVER), "sha256:ABC", "not-a-digest"]
    cases = list(
        itertools.product(("GET", "HEAD"), reg.tokens, ("team", "pub", "nowhere", "Bad..Name"), digests)
    )
    one_statement = {case: reg.ask(case[0], reg.tokens[case[1]], case[2], case[3]) for case in cases}
    monkeypatch.setattr(object_reads, "readable_object", lambda *a, **k: None)
    general = {case: reg.ask(case[0], reg.tokens[case[1]], case[2], case[3]) for case in cases}
    differ = {
        case: (one_statement[case][:2], general[case][:2])
        for case in cases
        if one_statement[case] != general[case]
    }
    assert not differ
    team, pub = str(_digest(TEAM_DATA)), str(_digest(PUB_DATA))
    expected = {(m, c, "team", team) for m in ("GET", "HEAD") for c in ("writer", "reader", "admin")} | {
        (m, c, "pub", pub)
        for m in ("GET", "HEAD")
        for c in ("anonymous", "writer", "reader", "stranger", "admin")
    }
    assert {case for case, answer in general.items() if answer[0] == 200} == expected
    # The matrix reaches each refusal an object's read has (400, 401, 404), not only grants.
    assert {answer[0] for answer in general.values() if answer[0] != 200} == {400, 401, 404}
