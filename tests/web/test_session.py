"""Sign-in with an API token: cookies, CSRF, expiry with the token, and safe redirects."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update

from kvreg_registry.auth import hash_token
from kvreg_registry.db.models import ApiToken, WebSession

from .helpers import csrf_of, sign_in, sign_out
from .library import Library


def test_sign_in_sets_an_httponly_samesite_session_cookie_and_stores_only_its_hash(library: Library) -> None:
    token = library.user()
    page = library.client.get("/signin")
    r = library.client.post(
        "/signin", data={"token": token, "csrf": csrf_of(page.text), "next": "/"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("kvreg_session=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    value = library.client.cookies.get("kvreg_session")
    assert value and token not in cookie
    with library.app_state.db.read() as s:
        stored = s.scalars(select(WebSession.id_hash)).all()
    assert len(stored) == 1 and stored[0] != value and len(stored[0]) == 64
    home = library.client.get("/")
    assert 'id="whoami"' in home.text


def test_sign_in_refuses_a_missing_or_wrong_csrf_token_and_a_foreign_origin(library: Library) -> None:
    token = library.user()
    library.client.get("/signin")
    r = library.client.post("/signin", data={"token": token}, follow_redirects=False)
    assert r.status_code == 403 and r.headers["x-kvreg-error-code"] == "FORBIDDEN"
    r = library.client.post("/signin", data={"token": token, "csrf": "x" * 43}, follow_redirects=False)
    assert r.status_code == 403
    good = csrf_of(library.client.get("/signin").text)
    r = library.client.post(
        "/signin",
        data={"token": token, "csrf": good},
        headers={"Origin": "http://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "another site" in r.text
    r = library.client.post(
        "/signin", data={"token": token, "csrf": good}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert r.status_code == 403
    assert library.client.cookies.get("kvreg_session") is None


def test_a_wrong_token_shows_the_form_again_with_the_reason(library: Library) -> None:
    page = library.client.get("/signin")
    r = library.client.post("/signin", data={"token": "kvreg_" + "A" * 43, "csrf": csrf_of(page.text)})
    assert r.status_code == 401
    assert 'id="signin-error"' in r.text and "unknown token" in r.text
    assert library.client.cookies.get("kvreg_session") is None


def test_sign_out_deletes_the_session_and_needs_the_csrf_token(library: Library) -> None:
    sign_in(library.client, library.user())
    cookie = library.client.cookies.get("kvreg_session")
    r = library.client.post("/signout", data={}, follow_redirects=False)
    assert r.status_code == 403
    sign_out(library.client)
    with library.app_state.db.read() as s:
        assert s.scalars(select(WebSession)).all() == []
    # The old cookie, replayed, is anonymous now.
    library.client.cookies.set("kvreg_session", cookie or "")
    assert 'id="whoami"' not in library.client.get("/").text


def test_revoking_or_expiring_the_token_ends_the_session(library: Library) -> None:
    token = library.user()
    sign_in(library.client, token)
    assert 'id="whoami"' in library.client.get("/").text
    with library.app_state.db.write() as s:
        s.execute(
            update(ApiToken)
            .values(revoked_at=dt.datetime.now(dt.UTC))
            .where(ApiToken.token_hash == hash_token(token))
        )
    r = library.client.get("/")
    assert 'id="whoami"' not in r.text
    assert "kvreg_session=" in r.headers.get("set-cookie", "")  # the stale cookie is cleared


def test_an_expired_session_is_anonymous(library: Library) -> None:
    sign_in(library.client, library.user())
    with library.app_state.db.write() as s:
        s.execute(update(WebSession).values(expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)))
    assert 'id="whoami"' not in library.client.get("/").text


def test_next_only_goes_to_local_paths(library: Library) -> None:
    token = library.user()
    for target, expected in [
        ("/ns/x", "/ns/x"),
        ("//evil.example/", "/"),
        ("https://evil.example", "/"),
        ("/\\evil", "/"),
    ]:
        library.client.cookies.clear()
        page = library.client.get("/signin", params={"next": target})
        r = library.client.post(
            "/signin",
            data={"token": token, "csrf": csrf_of(page.text), "next": target},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == expected, target


def test_pages_carry_security_headers(library: Library) -> None:
    r = library.client.get("/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"


def test_forms_refuse_multipart_and_oversized_bodies(library: Library) -> None:
    page = library.client.get("/signin")
    r = library.client.post("/signin", files={"token": ("t", b"x")}, data={"csrf": csrf_of(page.text)})
    assert r.status_code == 400
    r = library.client.post(
        "/signin",
        content=b"token=" + b"a" * 70_000,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 413
