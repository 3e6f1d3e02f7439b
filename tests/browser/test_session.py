"""Signing in and out (``/signin``, ``form#signout``), what a session may see, CSRF, and ``/admin``."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from .helpers import clean, sign_in, sign_out, text, total_of, visit
from .helpers import hidden as is_hidden
from .seed import READER, SECRET_WORD, Seeded

SESSION_COOKIE = "kvreg_session"


def _session_cookie(context: Any) -> dict[str, Any] | None:
    found = [c for c in context.cookies() if c["name"] == SESSION_COOKIE]
    return found[0] if found else None


def _private_paths(server: Seeded, ns: str | None = None) -> list[str]:
    ns = ns or server.private_ns
    return [f"/ns/{ns}", f"/ns/{ns}/artifacts/{server.digests['secret']}", f"/ns/{ns}/refs/secret"]


def _search(page: Any, q: str) -> tuple[int, list[str]]:
    visit(page, "/?" + urlencode({"q": q}))
    links = page.eval_on_selector_all(
        "#results li.result a.artifact-link", "as => as.map(a => a.getAttribute('href'))"
    )
    return total_of(text(page, "#total")), list(links)


def _csrf_field(page: Any) -> tuple[str, str]:
    """The hidden CSRF field of the sign-out form: (name, value)."""
    hidden = page.locator("form#signout input[type=hidden]").first
    return str(hidden.get_attribute("name")), str(hidden.get_attribute("value"))


def test_signin_sets_an_http_only_same_site_session(
    page: Any, context: Any, server: Seeded, shot: Any
) -> None:
    visit(page, "/signin")
    field = page.locator("form#signin input[name=token]")
    assert field.get_attribute("type") == "password"
    assert page.locator("form#signin [type=submit]").count() >= 1
    assert page.locator("#whoami").count() == 0
    shot(page, "signin")
    clean(page)

    # A wrong token: still signed out, and no session cookie.
    page.fill("form#signin input[name=token]", "kvreg_not-a-token")
    with page.expect_navigation():
        page.click("form#signin [type=submit]")
    assert page.locator("#whoami").count() == 0 and _session_cookie(context) is None

    sign_in(page, server.reader_token)
    assert READER in text(page, "#whoami")
    assert page.locator("form#signout [type=submit]").count() == 1
    cookie = _session_cookie(context)
    assert cookie is not None, [c["name"] for c in context.cookies()]
    assert cookie["httpOnly"] is True, cookie
    assert cookie["sameSite"] in ("Strict", "Lax"), cookie
    assert SESSION_COOKIE not in page.evaluate("document.cookie")
    # The token itself is kept nowhere in the browser: not in a cookie, the page or its storage.
    assert all(server.reader_token not in c["value"] for c in context.cookies())
    assert server.reader_token not in page.content()
    assert server.reader_token not in page.evaluate("JSON.stringify(Object.entries(localStorage))")
    clean(page)


def test_a_private_namespace_is_seen_only_while_signed_in_with_a_role(
    page: Any, context: Any, server: Seeded
) -> None:
    secret = server.artifacts["secret"]
    link = server.artifact_path("secret")

    def hidden(who: str, anonymous: bool = False) -> None:
        twins = _private_paths(server, "no-such-namespace")
        for path, twin in zip(_private_paths(server), twins, strict=True):
            assert is_hidden(page, path, twin) == ("signin" if anonymous else "404"), (path, who)
            page.goto(path)
            assert SECRET_WORD not in page.content(), f"{path} shows the secret to {who}"
        for q in (secret.title, SECRET_WORD):
            total, links = _search(page, q)
            assert total == 0 and link not in links, f"searching {q!r} as {who} found {links}"

    hidden("an anonymous visitor", anonymous=True)
    # A user without a role in the namespace sees no more than anyone.
    sign_in(page, server.tokens["gina"])
    hidden("gina (no role there)")
    sign_out(page)

    sign_in(page, server.reader_token)
    for path in _private_paths(server):
        visit(page, path)
    assert page.url.endswith(link)
    assert SECRET_WORD in text(page, "#solution")
    visit(page, f"/ns/{server.private_ns}")
    assert page.locator(f'#artifacts a[href="{link}"]').count() >= 1
    for q in (secret.title, SECRET_WORD):
        total, links = _search(page, q)
        assert (total, links) == (1, [link]), f"searching {q!r} as {READER} found {total}: {links}"
    stale = _session_cookie(context)
    assert stale is not None

    sign_out(page)
    assert page.locator("#whoami").count() == 0
    assert page.locator("#signin-link, a[href^='/signin']").count() >= 1
    hidden("a visitor who signed out", anonymous=True)
    # The server ended the session: its old cookie, sent again, opens nothing.
    context.add_cookies([{k: stale[k] for k in ("name", "value", "domain", "path")}])
    page.goto(link)
    assert SECRET_WORD not in page.content()
    assert page.locator("#whoami").count() == 0
    clean(page)


def test_posts_without_the_csrf_field_are_refused(page: Any, context: Any, server: Seeded) -> None:
    sign_in(page, server.reader_token)
    name, value = _csrf_field(page)
    assert value
    for form, headers in (
        ({}, {}),
        ({name: "0" * len(value)}, {}),
        ({name: value}, {"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"}),
    ):
        r = page.request.post("/signout", form=form, headers=headers, max_redirects=0)
        assert r.status in (400, 403), f"POST /signout {sorted(form)} {headers}: {r.status}"
    visit(page, "/")
    assert READER in text(page, "#whoami"), "a refused sign-out signed the user out"
    r = page.request.post("/signin", form={"token": server.admin_token}, max_redirects=0)
    assert r.status in (400, 403), f"POST /signin without the CSRF field: {r.status}"
    visit(page, "/")
    assert READER in text(page, "#whoami"), "a sign-in without the CSRF field changed the session"

    # An admin form: create a namespace, without the field, then with it (through the form).
    sign_out(page)
    sign_in(page, server.admin_token)
    r = page.request.post("/admin/namespaces", form={"name": "csrf-probe", "public": "on"}, max_redirects=0)
    assert r.status in (400, 403), f"POST /admin/namespaces without the CSRF field: {r.status}"
    visit(page, "/ns/csrf-probe", status=404)
    visit(page, "/admin")
    page.fill("form#namespace-create input[name=name]", "made-in-browser")
    with page.expect_navigation():
        page.click("form#namespace-create [type=submit]")
    visit(page, "/ns/made-in-browser")
    clean(page)


def test_admin_page(page: Any, server: Seeded, shot: Any) -> None:
    r = page.goto("/admin")
    assert r is not None
    assert r.status in (401, 403, 404) or "/signin" in page.url, f"/admin anonymously: {r.status} {page.url}"
    assert page.locator("#tokens").count() == 0

    sign_in(page, server.admin_token)
    visit(page, "/admin")
    for section in ("#namespaces", "#tokens", "#keys", "#retention", "#holds"):
        assert page.locator(section).is_visible(), f"/admin: no visible {section}"
    namespaces = text(page, "#namespaces")
    for ns in (server.public_ns, server.private_ns, server.paging_ns):
        assert ns in namespaces
    assert "litigation hold: case 42" in text(page, "#holds")
    shot(page, "admin")
    clean(page)
    sign_out(page)

    # A user who administers nothing sees no namespace's holds or admin forms.
    sign_in(page, server.reader_token)
    visit(page, "/admin")
    assert "litigation hold: case 42" not in page.content()
    assert page.locator(f"form[action^='/admin/namespaces/{server.public_ns}/']").count() == 0
    clean(page)


def test_an_admin_offboards_a_user_whose_session_ends(page: Any, browser: Any, server: Seeded) -> None:
    """Disable a user from /admin (through its confirmation page): their open session ends at its
    next request; then revoke their token from the list of every user's tokens, and enable them."""
    from .conftest import DESKTOP, _context

    name = "leaver-" + uuid.uuid4().hex[:8]
    with server.registry.admin() as c:
        assert c.post("/users", json={"name": name}).status_code == 201
        made = c.post(f"/users/{name}/tokens", json={"label": "laptop"})
        assert made.status_code == 201, made.text
    token, token_id = made.json()["token"], made.json()["id"]
    theirs_context = _context(browser, server, viewport=DESKTOP)
    try:
        theirs = theirs_context.new_page()
        sign_in(theirs, token)
        assert name in text(theirs, "#whoami")

        sign_in(page, server.admin_token)
        visit(page, "/admin")
        assert "active" in text(page, f"#user-{name}")
        with page.expect_navigation():
            page.click(f"form#user-disable-{name} button")
        assert f"Disable user {name}?" in text(page, "#confirm-heading")
        visit(theirs, "/")  # nothing happened yet
        assert name in text(theirs, "#whoami")
        with page.expect_navigation():
            page.click("form#confirm button[type=submit]")
        assert "done=user-disabled" in page.url
        assert f"User {name} disabled" in text(page, "#admin-done")
        assert "disabled" in text(page, f"#user-{name}")

        visit(theirs, "/")
        assert theirs.locator("#whoami").count() == 0, "the disabled user's session still works"

        # Their token, from the list of every user's tokens: revoked after its confirmation page.
        visit(page, f"/admin?token_user={name}#user-tokens")
        assert "user disabled" in text(page, f"#user-token-{token_id}")
        with page.expect_navigation():
            page.click(f"form#user-token-revoke-{token_id} button")
        assert f"of user {name}" in text(page, "#confirm-message")
        with page.expect_navigation():
            page.click("form#confirm button[type=submit]")
        assert "done=token-revoked" in page.url

        # Enabled again: the revoked token stays refused.
        visit(page, "/admin")
        with page.expect_navigation():
            page.click(f"form#user-enable-{name} button")
        with page.expect_navigation():
            page.click("form#confirm button[type=submit]")
        assert "done=user-enabled" in page.url and "active" in text(page, f"#user-{name}")
        with server.registry.http(token) as c:
            assert c.get("/whoami").headers["x-kvreg-error-code"] == "UNAUTHENTICATED"
        clean(theirs)
    finally:
        theirs_context.close()
    clean(page)
