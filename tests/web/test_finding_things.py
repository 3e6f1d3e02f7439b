"""Finding things (issue 16): the namespace list, the home page's overview and growth chart,
searches without words, hints on empty results, refs in natural order, the lineage graph,
the header's links, the favicon."""

from __future__ import annotations

import re
from pathlib import Path

from kvreg_registry.web import pages_library
from kvreg_registry.web.views_library import natural_key, prefix_edges

from .conftest import open_library
from .helpers import sign_in
from .library import Library


def test_natural_key_orders_numbers_by_value() -> None:
    names = ["add-1467665", "add-191-413", "add-2", "Add-10", "b", "add-191-50"]
    assert sorted(names, key=natural_key) == [
        "add-2",
        "Add-10",
        "add-191-50",
        "add-191-413",
        "add-1467665",
        "b",
    ]


def test_prefix_edges_link_each_artifact_to_its_longest_prefix() -> None:
    keys = {"a": ["k0"], "b": ["k0", "k1"], "c": ["k0", "k1", "k2"], "d": ["x0"], "e": ["k0", "y1"]}
    full = {"a": 1, "b": 2, "c": 3, "d": 1, "e": 2}
    tokens = {"a": 4, "b": 8, "c": 12, "d": 4, "e": 8}
    assert sorted(prefix_edges(keys, full, tokens)) == [("a", "b"), ("a", "e"), ("b", "c")]
    # The same blocks and length: not a prefix.
    assert prefix_edges({"a": ["k0"], "a2": ["k0"]}, {"a": 1, "a2": 1}, {"a": 4, "a2": 4}) == []
    # A partial last block does not count: "p" (one full block and a partial one) is a prefix
    # of "px", which shares the full block and goes on differently.
    keys = {"p": ["k0", "tail-p"], "px": ["k0", "k1", "k2"]}
    assert prefix_edges(keys, {"p": 1, "px": 3}, {"p": 6, "px": 12}) == [("p", "px")]
    # Without a full block there is nothing to graft.
    assert prefix_edges({"s": ["t"], "l": ["t2", "k"]}, {"s": 0, "l": 2}, {"s": 2, "l": 8}) == []


def test_the_namespace_list_shows_what_the_visitor_may_read(library: Library) -> None:
    public = library.namespace("open-lab")
    private = library.namespace("closed-lab", public=False)
    library.publish(public, "r1", "one two three four five", title="First")
    r = library.client.get("/ns")
    assert r.status_code == 200
    assert 'href="/ns/open-lab"' in r.text and "closed-lab" not in r.text
    row = re.search(r'<tr class="namespace">.*?open-lab.*?</tr>', r.text, re.S)
    assert row is not None and 'data-label="Artifacts">1<' in row.group(0)
    assert library.client.get("/ns", params={"q": "closed"}).text.count('class="namespace"') == 0
    sign_in(library.client, library.user({private: "read"}))
    r = library.client.get("/ns")
    assert 'href="/ns/closed-lab"' in r.text
    r = library.client.get("/ns", params={"q": "closed"})
    assert r.text.count('class="namespace"') == 1


def test_every_page_links_the_namespaces_and_compare_and_the_favicon(library: Library) -> None:
    html = library.client.get("/").text
    assert '<a href="/ns">Namespaces</a>' in html and '<a href="/compare">Compare</a>' in html
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html
    icon = library.client.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.text.startswith("<svg")
    r = library.client.get("/favicon.ico", follow_redirects=False)
    assert r.status_code == 301 and r.headers["location"] == "/static/favicon.svg"


def test_a_search_without_words_finds_nothing_and_says_why(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "r1", "alpha beta gamma", title="A")
    for q in ("!!!", "—", "🙂", "?? .."):
        r = library.client.get("/", params={"q": q})
        assert r.status_code == 200
        assert 'class="artifact-link"' not in r.text, q
        assert "the search has no word to look for" in r.text


def test_an_empty_result_hints_at_filters_and_signing_in(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "r1", "alpha beta gamma", title="A")
    r = library.client.get("/", params={"q": "zebra", "verdict": "pass"})
    hint = re.search(r'<div id="empty-hint".*?</div>', r.text, re.S)
    assert hint is not None
    assert 'id="clear-search-filters" href="/?q=zebra"' in hint.group(0)
    assert "/signin" in hint.group(0)
    sign_in(library.client, library.user())
    r = library.client.get("/", params={"q": "zebra"})
    hint = re.search(r'<div id="empty-hint".*?</div>', r.text, re.S)
    assert hint is not None and "/signin" not in hint.group(0) and "clear-search-filters" not in hint.group(0)
    assert 'id="empty-hint"' not in library.client.get("/", params={"q": "alpha"}).text


def test_the_home_page_gives_an_overview_and_a_growth_chart(library: Library) -> None:
    ns = library.namespace()
    hidden = library.namespace(public=False)
    library.publish(ns, "a", "alpha beta gamma", title="Alpha title")
    library.publish(ns, "b", "alpha beta delta", title="Beta title", verdict="fail")
    library.publish(hidden, "c", "secret words here", title="Hidden title")
    html = library.client.get("/").text
    assert '<strong id="stat-artifacts">2</strong>' in html
    assert '<strong id="stat-namespaces">1</strong>' in html
    recent = re.search(r'<ul id="recent".*?</ul>', html, re.S)
    assert recent is not None and "Alpha title" in recent.group(0) and "Hidden title" not in html
    # One day of activity: a sentence and the numbers, no chart (bars of one day say nothing).
    assert 'class="chart timeline"' not in html
    assert "2 artifacts stored on 1 day so far" in html
    assert 'id="timeline-data"' in html  # the numbers as a table
    # Three days: the chart, drawn from the same numbers.
    svg = pages_library.timeline([("2026-01-01", 1, 0), ("2026-01-02", 0, 2), ("2026-01-05", 1, 1)])
    assert svg is not None and str(svg).startswith('<svg class="chart timeline"')
    assert 'role="img"' in svg and "<title" in svg
    assert "2 artifacts stored and 3 graft receipts" in svg
    assert not re.search(r"#[0-9a-fA-F]{3,6}\b", svg), "colours come from CSS"
    assert pages_library.timeline([("2026-01-01", 1, 0), ("2026-01-02", 1, 0)]) is None
    # A search shows results only.
    assert 'id="overview"' not in library.client.get("/", params={"q": "alpha"}).text


def test_refs_are_listed_in_natural_order(library: Library) -> None:
    ns = library.namespace()
    for name in ("add-1467665", "add-191-413", "add-20"):
        library.publish(ns, name, f"words of {name}", title=name)
    html = library.client.get(f"/ns/{ns}").text
    section = html[html.index('id="refs"') :]
    names = re.findall(r'<a href="/ns/[^/]+/refs/([^"]+)">', section)
    assert names == ["add-20", "add-191-413", "add-1467665"]


def test_the_namespace_page_draws_the_prefix_lineage(library: Library) -> None:
    ns = library.namespace()
    short = library.publish(ns, "short", "one two three four five six seven eight", title="Short one")
    long = library.publish(
        ns, "long", "one two three four five six seven eight nine ten eleven twelve", title="Long one"
    )
    library.publish(ns, "apart", "completely different words in this one here", title="Apart")
    html = library.client.get(f"/ns/{ns}").text
    svg = re.search(r'<svg class="chart lineage".*?</svg>', html, re.S)
    assert svg is not None and 'role="img"' in svg.group(0) and "<title" in svg.group(0)
    assert f'href="/ns/{ns}/artifacts/{short.digest}"' in svg.group(0)
    assert f'href="/ns/{ns}/artifacts/{long.digest}"' in svg.group(0)
    assert "Apart" not in svg.group(0)
    listing = re.search(r'<ul id="lineage-list">.*?</ul>', html, re.S)
    assert listing is not None and 'Long one</a> <span class="muted">extends Short one' in listing.group(0)
    lone = library.namespace()
    library.publish(lone, "x", "nothing to extend", title="X")
    assert "No artifact here extends another" in library.client.get(f"/ns/{lone}").text


def test_the_overview_the_lineage_and_the_namespace_list_on_postgresql(tmp_path: Path) -> None:
    from services import fresh_pg_database

    with fresh_pg_database() as url:
        gen = open_library(tmp_path / "pg", database_url=url)
        lib = next(gen)
        try:
            ns = lib.namespace("pg-team")
            lib.publish(ns, "add-191-413", "one two three four five six seven eight", title="Short")
            lib.publish(ns, "add-1467665", "one two three four five six seven eight nine ten", title="Long")
            html = lib.client.get("/").text
            assert '<strong id="stat-artifacts">2</strong>' in html and 'id="timeline-data"' in html
            html = lib.client.get(f"/ns/{ns}").text
            assert 'class="chart lineage"' in html
            assert html.index("refs/add-191-413") < html.index("refs/add-1467665")
            assert 'href="/ns/pg-team"' in lib.client.get("/ns").text
        finally:
            gen.close()
