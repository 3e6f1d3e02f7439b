"""Namespace descriptions: Markdown rendered safely on the namespace page, edited by the
namespace's admins (web form with CSRF and a confirmation to remove it; the API's PATCH),
each change an audit entry."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from kvreg_registry.services import accounts
from kvreg_registry.web.markdown import plain_summary, render_markdown

from .helpers import csrf_of, sign_in
from .library import Library

# Every way in which a description could smuggle script or a frame into the page.
HOSTILE = [
    "<script>alert(1)</script>",
    "<iframe src=https://evil.example/></iframe>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](  javascript:alert(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[click](vbscript:msgbox(1))",
    '<a href="javascript:alert(1)">x</a>',
    "![x](javascript:alert(1))",
    "<svg onload=alert(1)>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "[x]: javascript:alert(1)\n\n[ref][x]",
    "<style>body{display:none}</style>",
]


class _Tags(HTMLParser):
    """The elements and attributes of an HTML fragment, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, dict(attrs)))


def _elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.seen


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_never_lets_script_frames_or_dangerous_urls_through(text: str) -> None:
    html = str(render_markdown(text))
    for tag, attrs in _elements(html):
        assert tag in {"p", "a", "br"}, html  # no script, iframe, img, svg, style, div
        assert not any(name.startswith("on") or name == "style" for name in attrs), html
        href = (attrs.get("href") or "").strip().lower()
        assert tag != "a" or href.startswith(("http://", "https://", "mailto:")), html


def test_markdown_renders_what_a_description_needs() -> None:
    html = str(
        render_markdown(
            "# GSM8K\n\nSolutions **checked** by *exact-match*; see [the set](https://example.org/gsm8k).\n\n"
            "- one\n- two\n\n`kvreg pull` it.\n\n| a | b |\n| - | - |\n| 1 | 2 |"
        )
    )
    assert "<h3>GSM8K</h3>" in html  # moved under the page's own headings
    assert "<strong>checked</strong>" in html and "<em>exact-match</em>" in html
    assert '<a href="https://example.org/gsm8k" rel="nofollow noopener noreferrer">the set</a>' in html
    assert "<li>one</li>" in html and "<code>kvreg pull</code>" in html
    assert "<table>" in html and "<td>2</td>" in html
    assert str(render_markdown("  \n")) == ""


def test_plain_summary_is_the_first_paragraph_as_words() -> None:
    assert (
        plain_summary("**GSM8K** <b>solutions</b> & more\n\nsecond paragraph")
        == "GSM8K <b>solutions</b> & more"
    )
    assert plain_summary("word " * 100, limit=20).endswith("…")


def _edit(library: Library, ns: str, text: str, **extra: str) -> object:
    form = library.client.get(f"/ns/{ns}/description")
    assert form.status_code == 200, form.text
    data = {"csrf": csrf_of(form.text), "description": text, **extra}
    return library.client.post(f"/ns/{ns}/description", data=data, follow_redirects=False)


def test_a_namespace_admin_edits_the_description_and_the_page_renders_it(library: Library) -> None:
    ns = library.namespace()
    admin = library.user({ns: "admin"})
    sign_in(library.client, admin)
    page = library.client.get(f"/ns/{ns}").text
    assert 'id="description-edit"' in page and "Write a description" in page

    r = _edit(library, ns, "Verified **GSM8K** solutions.\n\n<script>alert(1)</script>")
    assert r.status_code == 303 and r.headers["location"] == f"/ns/{ns}#description"  # type: ignore[attr-defined]
    page = library.client.get(f"/ns/{ns}").text
    assert "Verified <strong>GSM8K</strong> solutions." in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'id="description-edited"' in page and "edited by u" in page

    api = library.api("GET", f"/namespaces/{ns}").json()
    assert api["description"].startswith("Verified **GSM8K**")
    assert api["description_updated_by"].startswith("u") and api["description_updated_at"]
    assert [e["new"] for e in _audit_bodies(library, ns)] == [api["description"]]


def test_the_change_is_an_audit_entry_with_the_old_and_new_text(library: Library) -> None:
    ns = library.namespace()
    for text in ("first", "second", "second"):  # the same text again changes nothing
        r = library.api("PATCH", f"/namespaces/{ns}", json={"description": text})
        assert r.status_code == 200, r.text
    entries = _audit_bodies(library, ns)
    assert [(e["old"], e["new"], e["actor"]) for e in entries] == [
        ("", "first", "root"),
        ("first", "second", "root"),
    ]


def _audit_bodies(library: Library, ns: str) -> list[dict[str, object]]:
    import json

    from sqlalchemy import select

    from kvreg_registry.db.models import AuditEntry

    with library.app_state.db.read() as s:
        rows = s.scalars(
            select(AuditEntry.entry)
            .where(AuditEntry.type == "namespace.description", AuditEntry.namespace == ns)
            .order_by(AuditEntry.seq)
        ).all()
    return [json.loads(bytes(r)) for r in rows]


def test_preview_shows_the_rendering_and_saves_nothing(library: Library) -> None:
    ns = library.namespace()
    sign_in(library.client, library.user({ns: "admin"}))
    r = _edit(library, ns, "*draft*", preview="1")
    assert r.status_code == 200  # type: ignore[attr-defined]
    assert "Preview (not saved)" in r.text and "<em>draft</em>" in r.text  # type: ignore[attr-defined]
    assert library.api("GET", f"/namespaces/{ns}").json()["description"] == ""


def test_removing_a_description_asks_for_confirmation_first(library: Library) -> None:
    ns = library.namespace()
    sign_in(library.client, library.user({ns: "admin"}))
    assert _edit(library, ns, "to be removed").status_code == 303  # type: ignore[attr-defined]
    r = _edit(library, ns, "")
    assert r.status_code == 200 and 'id="confirm"' in r.text  # type: ignore[attr-defined]
    assert library.api("GET", f"/namespaces/{ns}").json()["description"] == "to be removed"
    confirmed = _edit(library, ns, "", confirm="yes")
    assert confirmed.status_code == 303  # type: ignore[attr-defined]
    assert library.api("GET", f"/namespaces/{ns}").json()["description"] == ""


def test_only_the_namespace_admins_may_edit_and_every_post_needs_its_csrf_token(library: Library) -> None:
    ns = library.namespace()
    anonymous = library.client.get(f"/ns/{ns}/description", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/signin")
    sign_in(library.client, library.user({ns: "write"}))
    assert 'id="description-edit"' not in library.client.get(f"/ns/{ns}").text
    assert library.client.get(f"/ns/{ns}/description").status_code == 403
    token = csrf_of(library.client.get("/").text)
    r = library.client.post(f"/ns/{ns}/description", data={"csrf": token, "description": "mine"})
    assert r.status_code == 403
    sign_in(library.client, library.user({ns: "admin"}))
    r = library.client.post(f"/ns/{ns}/description", data={"csrf": "stale", "description": "x"})
    assert r.status_code == 403
    assert library.api("GET", f"/namespaces/{ns}").json()["description"] == ""


def test_bad_input_is_a_400_naming_the_field(library: Library) -> None:
    ns = library.namespace()
    sign_in(library.client, library.user({ns: "admin"}))
    too_long = _edit(library, ns, "x" * (accounts.MAX_DESCRIPTION + 1))
    assert too_long.status_code == 400 and "description" in too_long.text  # type: ignore[attr-defined]
    control = _edit(library, ns, "bell \x07")
    assert control.status_code == 400 and "description" in control.text  # type: ignore[attr-defined]
    r = library.api("PATCH", f"/namespaces/{ns}", json={"description": "x" * (accounts.MAX_DESCRIPTION + 1)})
    assert r.status_code == 400 and "description" in r.text
    r = library.api("PATCH", f"/namespaces/{ns}", json={"public": True})
    assert r.status_code == 400


def test_the_api_patch_needs_the_admin_role(library: Library) -> None:
    ns = library.namespace()
    writer = library.user({ns: "write"})
    r = library.api("PATCH", f"/namespaces/{ns}", token=writer, json={"description": "by a writer"})
    assert r.status_code == 403
    admin = library.user({ns: "admin"})
    text = "## About\n\nby an admin"
    r = library.api("PATCH", f"/namespaces/{ns}", token=admin, json={"description": text})
    assert r.status_code == 200, r.text
    assert r.json()["description"] == text
    assert "<h4>About</h4>" in library.client.get(f"/ns/{ns}").text
