"""Home and search (``/``) and the namespace page (``/ns/{ns}``), anonymously unless said otherwise."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from .helpers import clean, set_field, sign_in, text, total_of, visit
from .seed import PAGING_COUNT, SOLUTION_ONLY_WORD, Seeded

FILTERS = ("namespace", "model", "verifier", "verdict", "since", "until")


def _results(page: Any) -> list[str]:
    """The artifact links of ``#results``, in order."""
    page.wait_for_selector("#results", state="attached")
    return [
        str(page.locator("#results li.result a.artifact-link").nth(i).get_attribute("href"))
        for i in range(page.locator("#results li.result").count())
    ]


def _search(page: Any, **params: str) -> tuple[int, list[str]]:
    visit(page, "/?" + urlencode(params))
    return total_of(text(page, "#total")), _results(page)


def test_home_has_the_search_form_and_the_newest_artifacts(page: Any, server: Seeded, shot: Any) -> None:
    visit(page, "/")
    assert page.locator("form#search input[name=q]").is_visible()
    for name in FILTERS:
        assert page.locator(f"form#search [name={name}]").count() == 1, f"no filter named {name!r}"
    links = _results(page)
    # Newest first: the GSM8K chat artifact and the four of aime25 were pushed last, all public;
    # realistic content leads, the escaping test's artifact comes after it.
    newest = {server.artifact_path(n) for n in ("gsm8k-test-0001", "p07", "p07x", "other", "xss")}
    assert newest <= set(links), links
    assert links[0] == server.artifact_path("gsm8k-test-0001"), links
    assert links.index(server.artifact_path("xss")) > links.index(server.artifact_path("p07")), links
    assert server.artifact_path("secret") not in links
    assert total_of(text(page, "#total")) == 5 + PAGING_COUNT
    shot(page, "home")
    clean(page)


def test_search_finds_a_word_of_the_solution_text_and_opens_the_artifact(
    page: Any, server: Seeded, shot: Any
) -> None:
    other = server.artifacts["other"]
    assert SOLUTION_ONLY_WORD in other.text and SOLUTION_ONLY_WORD not in other.title
    assert other.prompt is None and not any(
        SOLUTION_ONLY_WORD in a.text for a in server.artifacts.values() if a is not other
    )

    visit(page, "/")
    page.fill("form#search input[name=q]", SOLUTION_ONLY_WORD)
    with page.expect_navigation():
        page.press("form#search input[name=q]", "Enter")
    assert f"q={SOLUTION_ONLY_WORD}" in page.url
    links = _results(page)
    assert links == [server.artifact_path("other")], f"searching {SOLUTION_ONLY_WORD!r} listed {links}"
    assert total_of(text(page, "#total")) == 1
    shot(page, "search")

    with page.expect_navigation():
        page.click("#results li.result a.artifact-link")
    assert page.url.endswith(server.artifact_path("other")), page.url
    assert "Compliance ruling" in text(page, "#title")
    assert SOLUTION_ONLY_WORD in text(page, "#solution")
    clean(page)


def test_search_filters(page: Any, server: Seeded) -> None:
    ns = server.public_ns
    total, links = _search(page, namespace=ns)
    assert total == 4 and len(links) == 4 and all(link.startswith(f"/ns/{ns}/") for link in links), links
    assert _search(page, verdict="unknown") == (1, [server.artifact_path("xss")])
    # The private namespace's "reviewer" artifact is not counted for an anonymous visitor.
    assert _search(page, verifier="reviewer") == (1, [server.artifact_path("other")])
    model = server.manifests["p07"]["model"]["fingerprint"]
    assert _search(page, model=model, namespace=ns)[0] == 4
    assert _search(page, until="2000-01-01")[0] == 0
    assert _search(page, since="2000-01-01", namespace=ns)[0] == 4
    assert _search(page, q="no such words anywhere")[0] == 0

    # The same through the form, as a person would: choose a namespace and a verdict, submit.
    visit(page, "/")
    set_field(page, "form#search [name=namespace]", ns)
    set_field(page, "form#search [name=verdict]", "pass")
    with page.expect_navigation():
        page.click("form#search [type=submit]")
    assert f"namespace={ns}" in page.url and "verdict=pass" in page.url
    links = _results(page)
    assert set(links) == {server.artifact_path(n) for n in ("p07", "p07x", "other")}, links
    clean(page)


def test_search_results_are_paginated(page: Any, server: Seeded) -> None:
    total, first = _search(page, q="paging exercise")
    assert total == PAGING_COUNT
    assert 0 < len(first) < PAGING_COUNT
    assert page.locator("a[rel=prev]").count() == 0
    seen = list(first)
    while page.locator("a[rel=next]").count():
        with page.expect_navigation():
            page.click("a[rel=next]")
        assert page.locator("a[rel=prev]").count() == 1
        assert total_of(text(page, "#total")) == PAGING_COUNT
        seen += _results(page)
    assert len(seen) == len(set(seen)) == PAGING_COUNT, seen
    assert all(link.startswith(f"/ns/{server.paging_ns}/artifacts/") for link in seen)
    with page.expect_navigation():
        page.click("a[rel=prev]")
    assert page.locator("a[rel=next]").count() == 1
    clean(page)


def test_namespace_page(page: Any, server: Seeded, shot: Any) -> None:
    ns = server.public_ns
    visit(page, f"/ns/{ns}")
    for section in ("#artifacts", "#refs", "#keys", "#retention", "#holds"):
        assert page.locator(section).is_visible(), f"/ns/{ns}: no visible {section}"
    for name in ("p07", "p07x", "other", "xss"):
        assert page.locator(f'#artifacts a[href="{server.artifact_path(name)}"]').count() >= 1, name
        assert name in text(page, "#refs")
    assert server.public_key in text(page, "#keys")
    retention = text(page, "#retention")
    assert "20" in retention and "365" in retention, retention
    assert "other" in text(page, "#holds")
    shot(page, "namespace")
    clean(page)

    # The namespace's admins (here the server admin) see why the hold was placed.
    sign_in(page, server.admin_token)
    visit(page, "/ns/no-such-namespace", status=404)
    visit(page, f"/ns/{ns}")
    assert "litigation hold: case 42" in text(page, "#holds")
