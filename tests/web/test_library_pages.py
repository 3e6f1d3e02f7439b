"""The home/search page and the namespace page: content, access, escaping, bounded queries."""

from __future__ import annotations

import re

from .helpers import sign_in
from .library import Library, count_queries

SOLUTION = "we reduce modulo seven then the answer is 204 quokka"


def result_links(html: str) -> list[str]:
    return re.findall(r'class="artifact-link" href="([^"]+)"', html)


def test_search_finds_an_artifact_by_a_word_of_its_solution_text(library: Library) -> None:
    ns = library.namespace()
    hit = library.publish(ns, "p07", SOLUTION, title="Problem 7", question="What is the answer?")
    library.publish(ns, "other", "an unrelated solution about graphs", title="Problem 9")
    r = library.client.get("/", params={"q": "quokka"})
    assert r.status_code == 200
    assert result_links(r.text) == [f"/ns/{ns}/artifacts/{hit.digest}"]
    assert "1–1 of 1 artifact matching" in r.text
    page = library.client.get(result_links(r.text)[0])
    assert page.status_code == 200


def test_filters_narrow_the_results_and_are_kept_in_the_form(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "a", "alpha beta gamma", title="A", verdict="pass")
    failed = library.publish(ns, "b", "alpha beta delta", title="B", verdict="fail")
    other = library.namespace()
    library.publish(other, "c", "alpha beta epsilon", title="C", model_name="other-model")
    r = library.client.get("/", params={"q": "alpha", "verdict": "fail"})
    assert result_links(r.text) == [f"/ns/{ns}/artifacts/{failed.digest}"]
    assert '<option value="fail" selected>' in r.text
    r = library.client.get("/", params={"q": "alpha", "namespace": other})
    assert len(result_links(r.text)) == 1
    r = library.client.get("/", params={"model": "other-model"})
    assert len(result_links(r.text)) == 1
    r = library.client.get("/", params={"since": "2999-01-01"})
    assert result_links(r.text) == [] and "No artifacts match" in r.text
    r = library.client.get("/", params={"until": "2000-01-01"})
    assert result_links(r.text) == []


def test_results_are_paginated(library: Library) -> None:
    ns = library.namespace()
    for i in range(25):
        library.publish(ns, f"r{i}", f"common words number {i}", title=f"T{i}")
    first = library.client.get("/", params={"q": "common"})
    assert (
        len(result_links(first.text)) == 20 and 'rel="next"' in first.text and 'rel="prev"' not in first.text
    )
    second = library.client.get("/", params={"q": "common", "page": "2"})
    assert len(result_links(second.text)) == 5 and 'rel="prev"' in second.text
    assert not set(result_links(first.text)) & set(result_links(second.text))
    assert "21–25 of 25" in second.text
    assert library.client.get("/", params={"page": "0"}).status_code == 400
    assert library.client.get("/", params={"page": "x"}).status_code == 400
    assert library.client.get("/", params={"since": "yesterday"}).status_code == 400


def test_a_private_namespace_is_hidden_until_sign_in(library: Library) -> None:
    private = library.namespace(public=False)
    secret = library.publish(private, "s", "a secret solution with the word zebra", title="Secret")
    assert result_links(library.client.get("/", params={"q": "zebra"}).text) == []
    r = library.client.get(f"/ns/{private}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/signin?next=/ns/{private}"
    # The same answer for a namespace that does not exist: nothing leaks.
    r = library.client.get("/ns/no-such-namespace", follow_redirects=False)
    assert r.status_code == 303
    # A user without a role in it gets a 404, like the API.
    sign_in(library.client, library.user())
    assert result_links(library.client.get("/", params={"q": "zebra"}).text) == []
    assert library.client.get(f"/ns/{private}").status_code == 404
    library.client.cookies.clear()
    sign_in(library.client, library.user({private: "read"}))
    assert result_links(library.client.get("/", params={"q": "zebra"}).text) == [
        f"/ns/{private}/artifacts/{secret.digest}"
    ]
    page = library.client.get(f"/ns/{private}")
    assert page.status_code == 200 and "Secret" in page.text


def test_artifact_text_is_escaped_in_results_and_namespace_pages(library: Library) -> None:
    ns = library.namespace()
    library.publish(
        ns, "x", "<script>alert(1)</script> solution", title="<script>alert(1)</script>", question="<b>q</b>"
    )
    for html in (
        library.client.get("/", params={"q": "solution"}).text,
        library.client.get(f"/ns/{ns}").text,
    ):
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_namespace_page_shows_artifacts_refs_keys_retention_and_holds(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p07", SOLUTION, title="Problem 7")
    r = library.api("PUT", f"/namespaces/{ns}/retention", json={"keep_versions": 3, "keep_days": None})
    assert r.status_code == 200, r.text
    r = library.api("POST", f"/namespaces/{ns}/holds", json={"reason": "audit 2026-Q4"})
    assert r.status_code == 201, r.text
    html = library.client.get(f"/ns/{ns}").text
    for section in ("artifacts", "refs", "keys", "retention", "holds"):
        assert f'id="{section}"' in html
    assert f"/ns/{ns}/artifacts/{p.digest}" in html
    assert f"/ns/{ns}/refs/p07" in html
    assert library.key.public_key.to_text() in html
    assert "beyond the newest 3" in html
    assert "1 active hold" in html
    assert "audit 2026-Q4" not in html  # hold reasons are for the namespace's admins
    sign_in(library.client, library.user({ns: "admin"}))
    assert "audit 2026-Q4" in library.client.get(f"/ns/{ns}").text


def _queries(library: Library, path: str, params: dict[str, str] | None = None) -> int:
    with count_queries(library) as statements:
        r = library.client.get(path, params=params)
    assert r.status_code == 200, r.text
    return len(statements)


def test_home_and_namespace_pages_run_a_bounded_number_of_queries(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "r0", "shared words of a solution 0", title="T0")
    sign_in(library.client, library.user({ns: "read"}))
    pages = [
        ("/", None),
        ("/", {"q": "solution"}),
        ("/", {"q": "solution", "verdict": "pass"}),
        (f"/ns/{ns}", None),
        ("/ns", None),
    ]
    small = [_queries(library, path, params) for path, params in pages]
    for i in range(1, 45):
        library.publish(ns, f"r{i}", f"shared words of a solution {i}", title=f"T{i}")
        library.api("POST", f"/namespaces/{ns}/holds", json={"reason": f"hold {i}", "ref": f"r{i}"})
    for _ in range(10):
        library.namespace()
    large = [_queries(library, path, params) for path, params in pages]
    assert large == small
    # The home page without a search adds its overview (six queries: see views_library.overview).
    assert max(large) <= 18


def test_listings_and_the_model_filter_name_models_kvreg_knows(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "s", "a smollm2 solution", title="S", model_name="smollm2")
    library.publish(ns, "g", "a solution of a folder called model", title="G", model_name="model")
    home = library.client.get("/", params={"q": "solution"})
    assert home.status_code == 200
    assert "SmolLM2-135M-Instruct" in home.text and "unnamed model" in home.text
    assert '<option value="smollm2">SmolLM2-135M-Instruct</option>' in home.text  # the value stays the name
    listing = library.client.get(f"/ns/{ns}")
    assert "SmolLM2-135M-Instruct" in listing.text and "unnamed model" in listing.text
