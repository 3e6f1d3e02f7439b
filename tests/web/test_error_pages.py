"""Errors: JSON with stable codes under /api/, HTML pages with the same status elsewhere."""

from __future__ import annotations

from .library import Library


def test_a_malformed_public_key_is_a_400_key_invalid_not_a_500(library: Library) -> None:
    ns = library.namespace()
    r = library.api("POST", f"/namespaces/{ns}/keys", json={"public_key": "ed25519:nope"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "KEY_INVALID"


def test_api_errors_stay_json_and_page_errors_are_html_with_the_same_code(library: Library) -> None:
    r = library.client.get("/api/v1/no-such-route")
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/json")
    r = library.client.get("/no-such-page")
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert r.headers["x-kvreg-error-code"] == "NOT_FOUND"
    assert "Not found" in r.text and "content-security-policy" in r.headers


def test_a_page_error_never_shows_a_traceback(library: Library) -> None:
    r = library.client.get("/", params={"page": "-1"})
    assert r.status_code == 400 and "Traceback" not in r.text
    assert 'id="error-message"' in r.text
