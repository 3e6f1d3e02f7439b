"""An API token past its ``expires_at`` is refused on every path that authenticates one.

One test per path, each on SQLite and PostgreSQL (``conftest.lib``): the token works, its
expiry passes (``expires_at`` set a second into the past), then the same request is refused.
The paths: the API (bearer), an object read (the one-statement path and the general one),
``/v2/`` with the token as Basic password or as bearer, the token endpoint ``/v2/token``, a
scoped OCI token issued before the expiry, a web sign-in, and a web session opened before.
(``GET /metrics`` takes ``KVREG_METRICS_TOKEN``, a setting, not an API token: it has no expiry.)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from kvreg_registry.api.ratelimit import AuthFailureLimiter
from kvreg_registry.auth import hash_token
from kvreg_registry.db.models import ApiToken
from kvreg_registry.services import object_reads
from remote.helpers import build_artifact
from web.helpers import csrf_of, sign_in
from web.library import Library

from .test_oci_pull import basic, get, oci_error
from .test_oci_tokens import bearer, pull, token_of, www_authenticate


@dataclass
class Case:
    lib: Library
    ns: str
    digest: str
    token: str

    def expire(self) -> None:
        past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        with self.lib.app_state.db.write() as s:
            s.execute(
                update(ApiToken).where(ApiToken.token_hash == hash_token(self.token)).values(expires_at=past)
            )


@pytest.fixture
def case(lib: Library) -> Case:
    """A private namespace with one artifact, and a reader's token that never expired yet."""
    lib.client.app.state.auth_failure_limiter = AuthFailureLimiter(  # type: ignore[attr-defined]
        limit=10_000, window_seconds=60, max_keys=100
    )
    ns = lib.namespace(public=False)
    built = build_artifact(lib.key, token_count=8, block_size=4, chunk_bytes=500)
    lib.push(ns, "answer", built)
    return Case(lib, ns, str(next(iter(built.objects))), lib.user({ns: "read"}))


def _api_expired(r: Any) -> None:
    assert r.status_code == 401, r.text
    error = r.json()["error"]
    assert (error["code"], error["message"]) == ("UNAUTHENTICATED", "this token has expired")
    assert r.headers["x-kvreg-error-code"] == "UNAUTHENTICATED"


def _oci_expired(r: Any) -> None:
    error = oci_error(r, 401, "UNAUTHORIZED")
    assert "expired" in error["message"], error


def test_the_api(case: Case) -> None:
    assert case.lib.api("GET", "/whoami", case.token).status_code == 200
    case.expire()
    _api_expired(case.lib.api("GET", "/whoami", case.token))
    _api_expired(case.lib.api("GET", f"/namespaces/{case.ns}/refs", case.token))


@pytest.mark.parametrize("one_statement", [True, False], ids=["one-statement", "general"])
def test_an_object_read(case: Case, one_statement: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not one_statement:
        monkeypatch.setattr(object_reads, "readable_object", lambda *a, **k: None)
    path = f"/namespaces/{case.ns}/objects/{case.digest}"
    for method in ("GET", "HEAD"):
        assert case.lib.api(method, path, case.token).status_code == 200
    case.expire()
    _api_expired(case.lib.api("GET", path, case.token))
    r = case.lib.api("HEAD", path, case.token)
    assert r.status_code == 401 and r.headers["x-kvreg-error-code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize("scheme", [basic, bearer], ids=["basic", "bearer"])
def test_v2_with_the_api_token(case: Case, scheme: Callable[[str], str]) -> None:
    path = f"/v2/{case.ns}/tags/list"
    assert get(case.lib, path, auth=scheme(case.token)).status_code == 200
    case.expire()
    _oci_expired(get(case.lib, path, auth=scheme(case.token)))


def test_the_token_endpoint(case: Case) -> None:
    assert token_of(case.lib, pull(case.ns), auth=basic(case.token))
    case.expire()
    _oci_expired(get(case.lib, "/v2/token", params={"scope": pull(case.ns)}, auth=basic(case.token)))


def test_a_scoped_token_issued_before(case: Case) -> None:
    scoped = token_of(case.lib, pull(case.ns), auth=basic(case.token))
    path = f"/v2/{case.ns}/tags/list"
    assert get(case.lib, path, auth=bearer(scoped)).status_code == 200
    case.expire()
    r = get(case.lib, path, auth=bearer(scoped))
    _oci_expired(r)
    assert www_authenticate(r)["error"] == "invalid_token"


def _sign_in_answer(case: Case, browser: TestClient) -> Any:
    page = browser.get("/signin")
    return browser.post(
        "/signin", data={"token": case.token, "csrf": csrf_of(page.text)}, follow_redirects=False
    )


def test_a_web_sign_in(case: Case) -> None:
    assert (
        _sign_in_answer(case, TestClient(case.lib.client.app, base_url="http://testserver")).status_code
        == 303
    )
    case.expire()
    browser = TestClient(case.lib.client.app, base_url="http://testserver")
    r = _sign_in_answer(case, browser)
    assert r.status_code == 401 and "this token has expired" in r.text
    assert not browser.cookies.get("kvreg_session")


def test_a_web_session_opened_before(case: Case) -> None:
    browser = TestClient(case.lib.client.app, base_url="http://testserver")
    sign_in(browser, case.token)
    assert browser.get(f"/ns/{case.ns}").status_code == 200
    case.expire()
    # The next request is anonymous: the private namespace sends to the sign-in page.
    r = browser.get(f"/ns/{case.ns}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/signin")
    assert browser.get("/admin", follow_redirects=False).headers["location"].startswith("/signin")
