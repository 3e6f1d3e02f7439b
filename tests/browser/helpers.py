"""Helpers of the browser tests: signing in and out through the forms, reading numbers off pages."""

from __future__ import annotations

import re
from typing import Any


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


def number(text: str | None) -> int:
    """The first integer in ``text`` ("1,234 results" -> 1234)."""
    m = re.search(r"\d[\d,\u202f]*", text or "")
    assert m, f"no number in {text!r}"
    return int(re.sub(r"\D", "", m.group(0)))
