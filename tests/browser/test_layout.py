"""Keyboard use of the search form, and pages on a phone-sized screen."""

from __future__ import annotations

from typing import Any

from .helpers import clean, no_horizontal_scroll, text, total_of, visit
from .seed import SOLUTION_ONLY_WORD, Seeded

SEARCH_BOX = "form#search input[name=q]"


def test_the_search_box_is_reached_with_tab_and_submitted_with_enter(page: Any, server: Seeded) -> None:
    visit(page, "/")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    presses = 0
    while not page.evaluate(f"document.activeElement.matches({SEARCH_BOX!r})"):
        if presses == 40:
            focused = page.evaluate("document.activeElement.outerHTML.slice(0, 200)")
            raise AssertionError(f"40 presses of Tab never reached the search box (last focus: {focused})")
        page.keyboard.press("Tab")
        presses += 1
    assert presses <= 10, f"the search box is the {presses}th stop of Tab"
    page.keyboard.type(SOLUTION_ONLY_WORD)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert total_of(text(page, "#total")) == 1
    assert page.locator("#results li.result a.artifact-link").get_attribute("href") == server.artifact_path(
        "other"
    )
    clean(page)


def test_a_phone_never_scrolls_sideways(phone: Any, server: Seeded, shot: Any) -> None:
    visit(phone, "/")
    no_horizontal_scroll(phone)
    shot(phone, "phone-home")
    visit(phone, server.artifact_path("p07x"))
    phone.wait_for_selector("#chunks", state="attached")
    no_horizontal_scroll(phone)
    shot(phone, "phone-artifact")
    clean(phone)
