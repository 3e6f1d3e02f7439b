"""Helpers of the browser tests: signing in and out through the forms, reading numbers off pages."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote


def sign_in(page: Any, token: str) -> Any:
    """Sign in through the form of /signin, as a person would; returns the response after submitting."""
    page.goto("/signin")
    page.fill("form#signin input[name=token]", token)
    with page.expect_navigation():
        page.click("form#signin [type=submit]")
    return page


def sign_out(page: Any) -> Any:
    with page.expect_navigation():
        page.click("form#signout [type=submit]")
    return page


def numbers(text: str | None) -> list[int]:
    """The integers in ``text``, in order ("1,234 of 5" -> [1234, 5])."""
    return [int(re.sub(r"\D", "", m)) for m in re.findall(r"\d[\d,\u202f]*", text or "")]


def number(text: str | None) -> int:
    """The one integer in ``text`` ("1,234 blocks" -> 1234); fails when there is none or several."""
    found = numbers(text)
    assert len(found) == 1, f"wanted one number in {text!r}, found {found}"
    return found[0]


def total_of(text: str | None) -> int:
    """A result count as pages write it: "No artifacts" -> 0, "21 results" or "1–20 of 21" -> 21."""
    found = numbers(text)
    return max(found) if found else 0


def visit(page: Any, path: str, status: int = 200) -> Any:
    """``page.goto(path)``, checking the final response's status; returns the response."""
    response = page.goto(path)
    assert response is not None, f"no response for {path}"
    assert response.status == status, f"GET {path}: {response.status} (wanted {status}) at {page.url}"
    return response


def text(page: Any, selector: str) -> str:
    """The text of the one element ``selector`` matches (fails when there is none)."""
    page.wait_for_selector(selector, state="attached")
    return page.locator(selector).first.text_content() or ""


def set_field(page: Any, selector: str, value: str) -> None:
    """Fill an input or choose an option of a select, whichever ``selector`` is."""
    el = page.locator(selector).first
    if el.evaluate("e => e.tagName") == "SELECT":
        el.select_option(value)
    else:
        el.fill(value)


def no_horizontal_scroll(page: Any) -> tuple[int, int]:
    """``(scrollWidth, innerWidth)`` of the page, asserting the first is not larger."""
    sw, iw = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert sw <= iw, f"{page.url}: scrollWidth {sw} > innerWidth {iw} (the page scrolls sideways)"
    return sw, iw


def clean(page: Any) -> None:
    """No dialog opened and no uncaught script error on ``page`` so far."""
    assert page.dialogs == [], f"{page.url}: dialogs opened: {page.dialogs}"
    assert page.errors == [], f"{page.url}: script errors: {page.errors}"


def hidden(page: Any, path: str, twin: str) -> str:
    """``path`` shows nothing but what ``twin`` (the same path in a namespace that does not exist)
    shows: a 404 page, or for an anonymous visitor the sign-in redirect (the API's 401: "does not
    exist or needs a token"). Returns what it was: "404" or "signin"."""
    seen = []
    for p in (path, twin):
        r = page.request.get(p, max_redirects=0)
        location = r.headers.get("location", "")
        if r.status == 404:
            seen.append("404")
        elif r.status in (302, 303, 307) and location.startswith("/signin"):
            assert unquote(location.split("next=", 1)[-1]) == p, f"{p}: redirect to {location}"
            seen.append("signin")
        else:
            raise AssertionError(f"GET {p}: {r.status} {location}: neither a 404 nor the sign-in redirect")
    assert seen[0] == seen[1], f"{path} answers {seen[0]} but {twin} answers {seen[1]}: that tells them apart"
    return seen[0]
