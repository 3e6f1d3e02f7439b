"""Offboarding: disabling a user refuses every way in at once, enabling gives it back; both are
audited, idempotent, for server admins only, and the last server admin cannot be disabled.
Listing tokens shows everything but the secret.

In process (``TestClient`` of the real app) on SQLite and PostgreSQL (``conftest.lib``): the
API (``USER_DISABLED``), an object read (the one-statement path and the general one), the
``/v2/`` routes with the API token (Basic) and with a scoped token issued before, the token
endpoint, a web session opened before and a new sign-in.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from kvreg.core.errors import (
    EXIT_ERROR,
    ForbiddenError,
    InvalidNameError,
    UserDisabledError,
    UserNotFoundError,
)
from kvreg.remote.errors import map_error
from kvreg_registry.api.ratelimit import AuthFailureLimiter
from kvreg_registry.auth import Principal, hash_token
from kvreg_registry.db.models import ApiToken, AuditEntry, User, WebSession
from kvreg_registry.services import accounts, object_reads
from remote.helpers import build_artifact
from web.helpers import sign_in
from web.library import OPERATOR, Library

from .test_oci_pull import basic, get, oci_error
from .test_oci_tokens import bearer, pull, token_of, www_authenticate


def _entries(lib: Library, type_: str) -> list[dict[str, Any]]:
    with lib.app_state.db.read() as s:
        rows = s.scalars(select(AuditEntry.entry).where(AuditEntry.type == type_).order_by(AuditEntry.seq))
        return [json.loads(e) for e in rows]


def _set(lib: Library, name: str, disabled: bool, who: Principal = OPERATOR) -> accounts.UserState:
    with lib.app_state.db.write() as s:
        return accounts.set_user_disabled(s, who, name, disabled)


def _user_with_tokens(lib: Library, roles: dict[str, str], n: int = 2) -> tuple[str, list[str]]:
    """A new user with ``roles`` and ``n`` tokens: (name, tokens)."""
    first = lib.user(roles)
    with lib.app_state.db.read() as s:
        name = s.scalars(select(User.name).order_by(User.id.desc())).first()
    assert name is not None
    tokens = [first]
    with lib.app_state.db.write() as s:
        tokens += [accounts.create_token(s, OPERATOR, name, label=f"t{i}").token for i in range(1, n)]
    return name, tokens


def _api_refused(r: Any) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["x-kvreg-error-code"] == "USER_DISABLED"
    assert r.json()["error"]["code"] == "USER_DISABLED"
    assert "disabled" in r.json()["error"]["message"]


def test_disabling_refuses_every_token_and_session_at_once(lib: Library) -> None:
    # Every caller here fails many times on purpose: the limiter has its own tests.
    lib.client.app.state.auth_failure_limiter = AuthFailureLimiter(  # type: ignore[attr-defined]
        limit=10_000, window_seconds=60, max_keys=100
    )
    ns = lib.namespace(public=False)
    built = build_artifact(lib.key, token_count=8, block_size=4, chunk_bytes=500)
    lib.push(ns, "answer", built)
    digest = str(next(iter(built.objects)))
    name, tokens = _user_with_tokens(lib, {ns: "read"})
    scoped = token_of(lib, pull(ns), auth=basic(tokens[1]))
    browser = TestClient(lib.client.app, base_url="http://testserver")
    sign_in(browser, tokens[0])
    assert browser.get("/admin", follow_redirects=False).status_code == 200

    def object_read(token: str) -> Any:
        return lib.api("GET", f"/namespaces/{ns}/objects/{digest}", token)

    def v2(auth: str) -> Any:
        return get(lib, f"/v2/{ns}/tags/list", auth=auth)

    for token in tokens:
        assert lib.api("GET", "/whoami", token).json()["user"] == name
        assert object_read(token).status_code == 200
        assert v2(basic(token)).status_code == 200
    assert v2(bearer(scoped)).status_code == 200

    state = _set(lib, name, True)
    assert (state.changed, state.disabled, state.active_tokens, state.web_sessions_ended) == (
        True,
        True,
        2,
        1,
    )
    for token in tokens:
        _api_refused(lib.api("GET", "/whoami", token))
        _api_refused(lib.api("GET", f"/namespaces/{ns}/refs", token))
        _api_refused(object_read(token))
        error = oci_error(v2(basic(token)), 401, "UNAUTHORIZED")
        assert error["detail"]["kvreg_code"] == "USER_DISABLED"
        error = oci_error(
            get(lib, "/v2/token", params={"scope": pull(ns)}, auth=basic(token)), 401, "UNAUTHORIZED"
        )
        assert error["detail"]["kvreg_code"] == "USER_DISABLED"
    # The scoped token issued before: refused at its next request, saying why.
    r = v2(bearer(scoped))
    error = oci_error(r, 401, "UNAUTHORIZED")
    assert (
        www_authenticate(r)["error"] == "invalid_token" and error["detail"]["kvreg_code"] == "USER_DISABLED"
    )
    # The one-statement object read does not grant it either (the general way then says why).
    with lib.app_state.db.read() as s:
        assert object_reads.readable_object(s, hash_token(tokens[0]), ns, built.digest) is None
    # The web session ended (its row is gone), and signing in again is refused.
    assert browser.get("/admin", follow_redirects=False).headers["location"].startswith("/signin")
    with lib.app_state.db.read() as s:
        assert s.scalar(select(func.count()).select_from(WebSession)) == 0
    again = TestClient(lib.client.app, base_url="http://testserver")
    page = again.get("/signin")
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    r = again.post("/signin", data={"token": tokens[0], "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 401 and "is disabled" in r.text and not again.cookies.get("kvreg_session")
    [entry] = _entries(lib, "user.disabled")
    assert entry["actor"] == OPERATOR.name and entry["new"] == {"user": name}
    assert entry["details"] == {"active_tokens": 2, "web_sessions_ended": 1}

    # Enabling gives the tokens back (the web session stays ended: sign in again).
    state = _set(lib, name, False)
    assert (state.changed, state.disabled, state.active_tokens) == (True, False, 2)
    for token in tokens:
        assert lib.api("GET", "/whoami", token).json()["user"] == name
        assert object_read(token).status_code == 200
        assert v2(basic(token)).status_code == 200
    assert v2(bearer(scoped)).status_code == 200
    [entry] = _entries(lib, "user.enabled")
    assert entry["actor"] == OPERATOR.name and entry["new"] == {"user": name}


def test_disable_and_enable_are_idempotent_and_for_server_admins(lib: Library) -> None:
    name, tokens = _user_with_tokens(lib, {}, n=1)
    assert _set(lib, name, True).changed
    again = _set(lib, name, True)
    assert not again.changed and again.disabled and again.disabled_at is not None
    assert len(_entries(lib, "user.disabled")) == 1
    assert _set(lib, name, False).changed and not _set(lib, name, False).changed
    assert len(_entries(lib, "user.enabled")) == 1
    with pytest.raises(UserNotFoundError, match="no user 'nobody'"):
        _set(lib, "nobody", True)
    with pytest.raises(InvalidNameError):
        _set(lib, "Not/A/Name", True)
    # Not a server admin (a namespace admin included): 403, nothing changes.
    ns = lib.namespace(public=False)
    other, _ = _user_with_tokens(lib, {ns: "admin"}, n=1)
    with lib.app_state.db.read() as s:
        row = s.scalars(select(User).where(User.name == other)).one()
        caller = Principal(user_id=row.id, name=other)
    with pytest.raises(ForbiddenError):
        _set(lib, name, True, caller)
    assert lib.api("GET", "/whoami", tokens[0]).status_code == 200


def test_the_last_enabled_server_admin_cannot_be_disabled(lib: Library) -> None:
    with pytest.raises(ForbiddenError, match="last server admin") as refused:
        _set(lib, "root", True)
    assert refused.value.hint is not None and "user create NAME --admin" in refused.value.hint
    assert lib.api("GET", "/whoami").status_code == 200 and _entries(lib, "user.disabled") == []
    # With a second admin, either may go, but not both.
    second = lib.user(admin=True)
    with lib.app_state.db.read() as s:
        second_name = s.scalars(select(User.name).where(User.is_admin.is_(True), User.name != "root")).one()
    assert _set(lib, "root", True).changed
    _api_refused(lib.api("GET", "/whoami"))
    with pytest.raises(ForbiddenError, match="last server admin"):
        _set(lib, second_name, True)
    assert lib.api("GET", "/whoami", second).json()["admin"] is True
    # A disabled admin does not count; an ordinary user is never "the last admin".
    assert _set(lib, "root", False).changed and _set(lib, second_name, True).changed


def test_two_admins_disabling_each_other_at_once_leave_one_enabled(lib: Library) -> None:
    """The second waits for the first's transaction, then sees that it would leave no admin."""
    second = lib.user(admin=True)
    second_name = _name_of_token(lib, second)
    outcome: list[BaseException | accounts.UserState] = []

    def disable_root() -> None:
        try:
            outcome.append(_set(lib, "root", True))
        except BaseException as e:  # the outcome is checked below
            outcome.append(e)

    with lib.app_state.db.write() as s:
        assert accounts.set_user_disabled(s, OPERATOR, second_name, True).changed
        racer = threading.Thread(target=disable_root)
        racer.start()
        time.sleep(0.5)
        assert racer.is_alive(), f"the second disable did not wait for the first: {outcome}"
    racer.join(timeout=60)
    [result] = outcome
    assert isinstance(result, ForbiddenError) and "last server admin" in result.message, result
    assert lib.api("GET", "/whoami").json()["admin"] is True
    assert [e["new"]["user"] for e in _entries(lib, "user.disabled")] == [second_name]


def _name_of_token(lib: Library, token: str) -> str:
    return str(lib.api("GET", "/whoami", token).json()["user"])


def test_listing_tokens_shows_everything_but_the_secret(lib: Library) -> None:
    name, tokens = _user_with_tokens(lib, {}, n=3)
    with lib.app_state.db.write() as s:
        ids = s.scalars(
            select(ApiToken.id).join(User, User.id == ApiToken.user_id).where(User.name == name)
        ).all()
        accounts.revoke_token(s, OPERATOR, ids[1])
        s.get_one(ApiToken, ids[2]).expires_at = accounts.utcnow()
    with lib.app_state.db.read() as s:
        active = accounts.list_tokens(s, OPERATOR, user=name)
        every = accounts.list_tokens(s, OPERATOR, user=name, include_inactive=True)
        all_users = accounts.list_tokens(s, OPERATOR)
        newest = accounts.list_tokens(s, OPERATOR, include_inactive=True, newest_first=True, limit=2)
        hashes = s.scalars(select(ApiToken.token_hash)).all()
    assert [t.id for t in active] == [ids[0]] and active[0].state() == "active"
    assert [(t.id, t.state()) for t in every] == [
        (ids[0], "active"),
        (ids[1], "revoked"),
        (ids[2], "expired"),
    ]
    assert {t.user for t in all_users} == {"root", name}
    assert [t.id for t in newest] == sorted(ids, reverse=True)[:2]
    shown = repr(every + all_users)
    assert not any(h in shown for h in hashes) and not any(t in shown for t in tokens)
    _set(lib, name, True)
    with lib.app_state.db.read() as s:
        assert accounts.list_tokens(s, OPERATOR, user=name)[0].state() == "user disabled"
    # A user lists their own; anyone else's, or everyone's, takes a server admin.
    other, _ = _user_with_tokens(lib, {}, n=1)
    with lib.app_state.db.read() as s:
        row = s.scalars(select(User).where(User.name == other)).one()
        caller = Principal(user_id=row.id, name=other)
        assert [t.user for t in accounts.list_tokens(s, caller, user=other)] == [other]
        for user in (name, None):
            with pytest.raises(ForbiddenError):
                accounts.list_tokens(s, caller, user=user)
        with pytest.raises(UserNotFoundError):
            accounts.list_tokens(s, OPERATOR, user="nobody")


def test_the_client_maps_user_disabled_with_a_hint_for_an_admin() -> None:
    body = json.dumps({"error": {"code": "USER_DISABLED", "message": "user 'bob' is disabled"}}).encode()
    error = map_error(401, {}, body, remote_name="origin")
    assert type(error) is UserDisabledError and error.exit_code == EXIT_ERROR
    assert error.hint is not None and "admin" in error.hint and "kvreg login" not in error.hint
    assert error.details["http_status"] == 401
