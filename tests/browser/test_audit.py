"""The audit trail: ``/audit`` (entries, filters, checkpoint, export) and ``/audit/entries/{seq}``.

The seeded registry keeps its log private (``KVREG_LOG_PUBLIC`` unset): every entry is read
signed in, here as the server admin; signed out, only the entries of public namespaces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli.helpers import kvreg

from .helpers import clean, set_field, sign_in, text, visit
from .seed import Seeded

FILTERS = ("type", "namespace", "actor", "since", "until")


def _rows(page: Any) -> list[list[str]]:
    """The cells of each ``tr.entry`` of ``table#entries``, stripped (a leading '#' too)."""
    page.wait_for_selector("table#entries", state="attached")
    cells = page.eval_on_selector_all(
        "table#entries tr.entry",
        "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim().replace(/^#/, '')))",
    )
    return [list(row) for row in cells]


def _filter(page: Any, **values: str) -> list[list[str]]:
    for name, value in values.items():
        set_field(page, f"form#audit-filters [name={name}]", value)
    with page.expect_navigation():
        page.click("form#audit-filters [type=submit]")
    return _rows(page)


def _has(row: list[str], value: str) -> bool:
    return any(value in cell for cell in row)


def _seqs(server: Seeded, kind: str, ns: str) -> set[str]:
    return {
        str(e["index"]) for e in server.audit_entries if e["type"] == kind and e["ref"].startswith(f"{ns}/")
    }


def test_anonymous_visitors_read_the_entries_of_public_namespaces_only(page: Any, server: Seeded) -> None:
    visit(page, "/audit?all=1")
    rows = _rows(page)
    namespaces = {row[4] for row in rows}
    assert rows and namespaces <= {server.public_ns, server.paging_ns, server.flywheel_ns}, namespaces
    assert page.locator("#entries-public-only").count() == 1
    private = next(e for e in server.audit_entries if e["ref"].startswith(f"{server.private_ns}/"))
    r = page.goto(f"/audit/entries/{private['index']}")
    assert r is not None and r.status == 401, r.status if r else None
    assert page.locator("#entry").count() == 0
    public = next(e for e in server.audit_entries if e["ref"].startswith(f"{server.public_ns}/"))
    visit(page, f"/audit/entries/{public['index']}")
    assert page.locator("#entry").count() == 1
    clean(page)


def test_the_default_view_shows_pushes_not_object_held_rows(page: Any, server: Seeded) -> None:
    sign_in(page, server.admin_token)
    visit(page, "/audit")
    types = page.eval_on_selector_all(
        "table#entries tr.entry td:nth-child(3)", "cs => cs.map(c => c.textContent)"
    )
    assert types and not {"object.held", "upload.opened", "upload.closed"} & {t.strip() for t in types}, types
    groups = page.locator("tr.push-group summary")
    assert groups.count() >= 4
    headline = groups.first.text_content() or ""
    assert headline.startswith("Pushed “"), headline
    assert not page.locator("tr.push-group table.push-entries").first.is_visible()  # folded
    groups.first.click()
    assert page.locator("tr.push-group table.push-entries").first.is_visible()
    visit(page, "/audit?all=1")
    assert "object.held" in (page.locator("table#entries").text_content() or "")
    clean(page)


def test_audit_page_shows_the_pushes_and_a_verified_checkpoint(page: Any, server: Seeded, shot: Any) -> None:
    sign_in(page, server.admin_token)
    visit(page, "/audit")
    assert "signature verified" in text(page, "#checkpoint-status")
    assert _rows(page), "no tr.entry in table#entries"
    for name in FILTERS:
        assert page.locator(f"form#audit-filters [name={name}]").count() == 1, f"no filter named {name!r}"
    headers = " ".join(page.locator("table#entries th").all_text_contents()).lower()
    for column in ("seq", "time", "type", "actor", "namespace"):
        assert column in headers, f"table#entries has no {column!r} column: {headers!r}"
    shot(page, "audit")

    ns = server.public_ns
    for kind in ("envelope.stored", "ref.created"):
        visit(page, "/audit")
        rows = _filter(page, type=kind, namespace=ns)
        assert rows and all(_has(row, kind) and _has(row, ns) for row in rows), rows
        shown = {cell for row in rows for cell in row}
        wanted = _seqs(server, kind, ns)
        assert len(wanted) == 4 and wanted <= shown, f"{kind} entries {sorted(wanted)} not all in {rows}"
    clean(page)

    rows = _filter(page, actor="dana", type="ref.created", namespace="")
    assert rows and all(_has(row, "dana") for row in rows), rows
    assert _filter(page, until="2000-01-01", actor="", type="") == []


def test_an_entry_page_shows_the_entry_and_its_checked_proof(page: Any, server: Seeded, shot: Any) -> None:
    (entry,) = [
        e
        for e in server.audit_entries
        if e["type"] == "envelope.stored" and e["ref"] == f"{server.public_ns}/p07"
    ]
    sign_in(page, server.admin_token)
    visit(page, f"/audit/entries/{entry['index']}")
    body = json.loads(text(page, "#entry"))
    assert body["type"] == "envelope.stored" and body["namespace"] == server.public_ns, body
    assert server.digests["p07"] in json.dumps(body)
    assert "verified" in text(page, "#proof-status")
    shot(page, "audit-entry")
    clean(page)


def test_the_export_download_verifies_with_the_cli(page: Any, server: Seeded, tmp_path: Path) -> None:
    sign_in(page, server.admin_token)
    visit(page, "/audit")
    assert "/audit/export" in str(page.get_attribute("a#export", "href"))
    with page.expect_download() as download:
        page.click("a#export")
    path = tmp_path / "audit.jsonl"
    download.value.save_as(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format"] == "kvreg.audit-export/v1"
    out = kvreg(server.admin_home, "--json", "audit", "verify", "--file", path, "--key", server.log_key).json
    newest = max(int(e["index"]) for e in server.audit_entries)
    assert out["file"]["entries_checked"] == len(lines) - 1 > newest, out


def test_the_audit_pages_list_every_entry_once_newest_first(page: Any, server: Seeded) -> None:
    sign_in(page, server.admin_token)
    visit(page, "/audit?all=1")
    headers = [h.lower() for h in page.locator("table#entries th").all_text_contents()]
    col = next(i for i, h in enumerate(headers) if "seq" in h)
    seqs: list[int] = []
    pages = 0
    while True:
        pages += 1
        seqs += [int(row[col]) for row in _rows(page)]
        if page.locator("a[rel=next]").count() == 0:
            break
        assert pages < 100, "more than 100 pages of audit entries"
        with page.expect_navigation():
            page.click("a[rel=next]")
    newest = max(int(e["index"]) for e in server.audit_entries)
    assert seqs[0] >= newest
    assert seqs == list(range(seqs[0], -1, -1)), "entries missing, repeated or out of order across pages"
    if pages > 1:
        with page.expect_navigation():
            page.click("a[rel=prev]")
        assert page.locator("a[rel=next]").count() == 1
    clean(page)
