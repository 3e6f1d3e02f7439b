"""Browser-like steps for the web tests: sign in through the form, read a form's CSRF token."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

CSRF_INPUT = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a page."""
    match = CSRF_INPUT.search(html)
    assert match is not None, "the page has no form with a csrf field"
    return match.group(1)


def sign_in(client: TestClient, token: str) -> None:
    """Sign in as the browser does: load the form, post it with its CSRF token."""
    page = client.get("/signin")
    assert page.status_code == 200
    r = client.post(
        "/signin", data={"token": token, "csrf": csrf_of(page.text), "next": "/"}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert client.cookies.get("kvreg_session")


def sign_out(client: TestClient) -> None:
    page = client.get("/")
    r = client.post("/signout", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert r.status_code == 303, r.text
