"""The audit trail pages: ``/audit``, ``/audit/entries/{seq}`` and ``/audit/export``.

Entries are made the way the registry makes them (``kvreg_registry.audit.append``,
and real pushes through the API), at chosen times where a test filters on time.
The export is checked with the client's own offline verifier and the ``kvreg``
command; a tampered entry (its stored bytes edited in the database) must show a
failed proof, never a crash or a green badge.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from cli.helpers import kvreg
from kvreg.core.checkpoint import verify_signed_checkpoint
from kvreg.core.merkle import leaf_hash, verify_inclusion
from kvreg.remote.auditexport import verify_export
from kvreg_registry import audit
from kvreg_registry.db.models import AuditEntry
from kvreg_registry.web import audit_export, views_audit

from .conftest import open_library
from .library import Library, count_queries

ROW = re.compile(r'<tr class="entry" data-seq="(\d+)">')
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
REPO = Path(__file__).resolve().parents[2]


# --- helpers -------------------------------------------------------------------------------------


def sign_in(client: TestClient, token: str) -> None:
    page = client.get("/signin")
    match = CSRF.search(page.text)
    assert match is not None
    r = client.post(
        "/signin", data={"token": token, "csrf": match.group(1), "next": "/"}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert client.cookies.get("kvreg_session")


def seqs(page_html: str) -> list[int]:
    return [int(s) for s in ROW.findall(page_html)]


def link(page_html: str, rel: str) -> str | None:
    match = re.search(rf'<a rel="{rel}" href="([^"]+)"', page_html)
    return html.unescape(match.group(1)) if match else None


def element(page_html: str, tag: str, element_id: str) -> str:
    """The unescaped text inside ``<tag id="element_id" ...>...</tag>`` (no nested tag of that name)."""
    match = re.search(rf'<{tag} id="{element_id}"[^>]*>(.*?)</{tag}>', page_html, re.S)
    assert match is not None, f"no {tag}#{element_id}"
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


def add_entries(library: Library, specs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Append entries as the registry does, in one transaction; a spec's ``at`` fixes its time."""
    out: list[int] = []
    with library.app_state.db.write() as s:
        for spec in specs:
            spec = dict(spec)
            at = spec.pop("at", None)
            with monkeypatch.context() as m:
                if at is not None:
                    m.setattr(audit, "utcnow", lambda at=at: at)
                out.append(audit.append(s, spec.pop("type"), **spec))
    return out


def filler(n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` entries of the kinds pushes leave, over two namespaces and two actors."""
    out: list[dict[str, Any]] = []
    for i in range(start, start + n):
        digest = f"sha256:{i:064x}"
        out.append(
            {
                "type": "ref.moved" if i % 2 else "envelope.stored",
                "actor": "alice" if i % 3 else "bob",
                "namespace": "team-a" if i % 4 else "team-b",
                "subjects": [digest],
                "old": f"sha256:{i + 1:064x}" if i % 2 else None,
                "new": digest if i % 2 else {"signer": "sha256:" + "ab" * 32, "objects": 3},
                "details": {"ref": f"team-a/p{i}"} if i % 2 else {},
            }
        )
    return out


def tamper(library: Library, seq: int, new_bytes: bytes) -> None:
    with library.app_state.db.write() as s:
        s.execute(update(AuditEntry).where(AuditEntry.seq == seq).values(entry=new_bytes))


def stored_entry(library: Library, seq: int) -> bytes:
    with library.app_state.db.read() as s:
        return bytes(s.execute(select(AuditEntry.entry).where(AuditEntry.seq == seq)).scalar_one())


@pytest.fixture
def public_log(tmp_path: Path) -> Iterator[Library]:
    """A registry whose log entries anyone may read (``KVREG_LOG_PUBLIC=1``)."""
    yield from open_library(tmp_path / "public-log", log_public=True)


# --- the list, its filters and pages -------------------------------------------------------------


def test_filters_select_the_right_entries(library: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    day = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    specs = []
    for i, spec in enumerate(filler(24)):
        spec["at"] = day + dt.timedelta(days=i // 4, minutes=i)  # 4 entries a day, 6 days
        specs.append(spec)
    made = add_entries(library, specs, monkeypatch)
    sign_in(library.client, library.admin_token)

    def shown(**params: str) -> list[int]:
        r = library.client.get("/audit", params=params)
        assert r.status_code == 200, r.text
        return seqs(r.text)

    with library.app_state.db.read() as s:
        rows = s.execute(
            select(
                AuditEntry.seq, AuditEntry.type, AuditEntry.actor, AuditEntry.namespace, AuditEntry.created_at
            )
        ).all()

    def expect(pred: Any) -> list[int]:
        return sorted((r.seq for r in rows if pred(r)), reverse=True)

    everything = shown()
    assert everything == expect(lambda r: True) and set(made) <= set(everything)
    assert everything == sorted(everything, reverse=True)  # newest first
    assert shown(type="ref.moved") == expect(lambda r: r.type == "ref.moved") != []
    assert shown(namespace="team-b") == expect(lambda r: r.namespace == "team-b") != []
    assert shown(actor="bob") == expect(lambda r: r.actor == "bob") != []
    both = shown(type="envelope.stored", namespace="team-a", actor="alice")
    assert both == expect(lambda r: (r.type, r.namespace, r.actor) == ("envelope.stored", "team-a", "alice"))
    assert both

    # Dates: since is inclusive from midnight, until to the end of its day; datetimes as given.
    assert shown(since="2026-03-03", until="2026-03-04") == [made[i] for i in range(15, 7, -1)]
    since = dt.datetime(2026, 3, 6, tzinfo=dt.UTC)
    assert shown(since="2026-03-06") == expect(lambda r: r.created_at >= since)
    assert set(shown(since="2026-03-06")) >= {made[i] for i in range(20, 24)}
    assert shown(until="2026-03-01") == [made[i] for i in range(3, -1, -1)]
    assert shown(since="2026-03-02T12:06:00Z", until="2026-03-02T12:07:00") == [made[7], made[6]]
    assert shown(since="2026-03-02T13:06:00+01:00", until="2026-03-02 12:06:59") == [made[6]]
    assert shown(until="2000-01-01") == []
    r = library.client.get("/audit", params={"until": "2000-01-01"})
    assert 'id="entries"' in r.text and 'id="no-entries"' in r.text

    # The type select offers the known types; an unknown one typed in the address still filters.
    r = library.client.get("/audit", params={"type": "no.such"})
    assert seqs(r.text) == [] and '<option value="no.such" selected>' in r.text
    assert '<option value="ref.moved">' in r.text

    # A malformed date is a 400 that says what is wrong, with the form kept, not a crash.
    r = library.client.get("/audit", params={"since": "yesterday", "actor": "bob"})
    assert r.status_code == 400 and "filter-error" in r.text and "yesterday" in html.unescape(r.text)
    assert 'id="audit-filters"' in r.text and 'value="bob"' in r.text


def test_pages_of_fifty_newest_first_with_filters_kept(
    library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_entries(library, filler(130), monkeypatch)
    sign_in(library.client, library.admin_token)
    with library.app_state.db.read() as s:
        all_seqs = sorted(s.scalars(select(AuditEntry.seq)), reverse=True)
    assert len(all_seqs) > 130

    pages: list[list[int]] = []
    url: str | None = "/audit"
    prev_links: list[str | None] = []
    while url is not None:
        r = library.client.get(url)
        assert r.status_code == 200
        pages.append(seqs(r.text))
        prev_links.append(link(r.text, "prev"))
        url = link(r.text, "next")
    assert [len(p) for p in pages[:-1]] == [50] * (len(pages) - 1) and 0 < len(pages[-1]) <= 50
    assert [s for p in pages for s in p] == all_seqs  # every entry once, in order
    assert prev_links[0] is None and all(prev_links[1:])

    # Back from the last page to the first through rel=prev.
    r = library.client.get(link(library.client.get(prev_links[-1]).text, "prev") or "/")
    assert seqs(r.text) == pages[-3]

    # Pages of a filter keep the filter.
    r = library.client.get("/audit", params={"namespace": "team-a"})
    first = seqs(r.text)
    nxt = link(r.text, "next")
    assert len(first) == 50 and nxt is not None and "namespace=team-a" in nxt
    second = seqs(library.client.get(nxt).text)
    with library.app_state.db.read() as s:
        team_a = sorted(
            s.scalars(select(AuditEntry.seq).where(AuditEntry.namespace == "team-a")), reverse=True
        )
    assert first + second == team_a[: len(first) + len(second)] and len(second) == min(50, len(team_a) - 50)


# --- one entry -----------------------------------------------------------------------------------


def entry_seq(library: Library, kind: str, digest: str) -> int:
    with library.app_state.db.read() as s:
        for seq, raw in s.execute(select(AuditEntry.seq, AuditEntry.entry).where(AuditEntry.type == kind)):
            if digest in json.loads(bytes(raw))["subjects"]:
                return int(seq)
    raise AssertionError(f"no {kind} entry about {digest}")


def test_an_entry_page_shows_the_entry_and_a_verified_proof(library: Library) -> None:
    ns = library.namespace(public=False)
    first = library.publish(ns, "p1", "the answer is 42", title="one")
    for i in range(5):
        library.publish(ns, f"q{i}", f"another answer {i}", title=f"t{i}")
    seq = entry_seq(library, "envelope.stored", str(first.digest))
    sign_in(library.client, library.admin_token)

    r = library.client.get(f"/audit/entries/{seq}")
    assert r.status_code == 200, r.text
    raw = stored_entry(library, seq)
    shown = json.loads(element(r.text, "pre", "entry"))
    assert shown == json.loads(raw) and shown["type"] == "envelope.stored" and shown["namespace"] == ns
    assert element(r.text, "code", "leaf-hash") == leaf_hash(raw).hex()
    status = element(r.text, "p", "proof-status")
    assert "verified" in status and "failed" not in status
    assert 'class="badge ok">verified' in r.text and "leaf-mismatch" not in r.text

    # The listed proof, with the root of the checkpoint the page shows, verifies here too.
    note = library.client.get("/api/v1/log/checkpoint").text
    checkpoint = verify_signed_checkpoint(note, library.app_state.log.verifier)
    size = int(element(r.text, "dd", "proof-size"))
    assert size == checkpoint.size
    hashes = [base64.b64decode(h) for h in re.findall(r"<li><code>([A-Za-z0-9+/=]+)</code></li>", r.text)]
    listed = re.search(r'<ol id="proof-hashes"[^>]*>(.*?)</ol>', r.text, re.S)
    assert listed is not None and hashes and len(hashes) == listed.group(1).count("<li>")
    verify_inclusion(leaf_hash(raw), seq, size, hashes, checkpoint.root)

    # Its subject is an artifact of the namespace: a link to the artifact page.
    assert f'href="/ns/{ns}/artifacts/{first.digest}"' in r.text
    # Other entries about the same artifact (its object.held and ref.created) are listed.
    ref_seq = entry_seq(library, "ref.created", str(first.digest))
    assert f'href="/audit/entries/{ref_seq}"' in r.text

    # No such entry: 404; not a number: an error page, not a crash.
    assert library.client.get("/audit/entries/999999").status_code == 404
    assert library.client.get("/audit/entries/abc").status_code == 400


def test_a_tampered_entry_shows_a_failed_proof(library: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = library.namespace()
    library.publish(ns, "p1", "some answer 7")
    made = add_entries(library, filler(6), monkeypatch)
    sign_in(library.client, library.admin_token)
    target = made[2]
    raw = stored_entry(library, target)
    assert b'"actor":"alice"' in raw
    tamper(library, target, raw.replace(b'"actor":"alice"', b'"actor":"mallory"'))

    r = library.client.get(f"/audit/entries/{target}")
    assert r.status_code == 200
    status = element(r.text, "p", "proof-status")
    assert "proof failed" in status and "altered" in status
    assert 'class="badge ok">verified' not in r.text and 'class="badge bad">proof failed' in r.text
    assert "leaf-mismatch" in r.text and "mallory" in element(r.text, "pre", "entry")
    # Its neighbours still verify; the list shows what is stored.
    assert 'class="badge ok">verified' in library.client.get(f"/audit/entries/{made[1]}").text
    r = library.client.get("/audit")
    assert r.status_code == 200 and target in seqs(r.text)

    # Bytes that are not even JSON: shown as text, still a failed proof.
    tamper(library, made[3], b"<script>alert(1)</script>\xff")
    r = library.client.get(f"/audit/entries/{made[3]}")
    assert r.status_code == 200 and "proof failed" in element(r.text, "p", "proof-status")
    assert "<script>alert(1)" not in r.text and "&lt;script&gt;alert(1)" in r.text
    r = library.client.get("/audit")
    assert r.status_code == 200 and "not a JSON object" in r.text

    # The export stops rather than deliver a file whose entry is not in the signed log.
    with pytest.raises(audit_export.ExportAborted, match=f"entry {target}"):
        library.client.get("/audit/export")


def test_script_in_an_entry_is_shown_as_text(library: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    evil = "<script>alert('x')</script>"
    (seq,) = add_entries(
        library,
        [{"type": "ref.moved", "actor": "eve", "namespace": "n1", "details": {"ref": f"n1/{evil}"}}],
        monkeypatch,
    )
    sign_in(library.client, library.admin_token)
    for url in ("/audit", f"/audit/entries/{seq}"):
        r = library.client.get(url)
        assert r.status_code == 200
        assert evil not in r.text and "&lt;script&gt;alert(" in r.text, url


# --- the export ----------------------------------------------------------------------------------


def download(client: TestClient, path: Path) -> tuple[Any, Path]:
    r = client.get("/audit/export")
    assert r.status_code == 200, r.text[:500]
    path.write_bytes(r.content)
    return r, path


def test_the_export_verifies_with_the_clients_offline_check(
    library: Library, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ns = library.namespace()
    library.publish(ns, "p1", "an answer of some words", title="x")
    library.publish(ns, "p1", "an answer of some more words", title="y")
    add_entries(library, filler(2300), monkeypatch)  # three pages of 1000
    sign_in(library.client, library.admin_token)
    log_ = library.app_state.log

    r, path = download(library.client, tmp_path / "export.jsonl")
    with library.app_state.db.read() as s:
        size = log_.size(s)
    assert (
        r.headers["content-disposition"] == f'attachment; filename="kvreg-audit-{log_.origin}-{size}.jsonl"'
    )
    lines = path.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "kvreg.audit-export/v1" and header["size"] == size == len(lines) - 1
    assert header["remote"] == log_.origin and header["url"] == "http://testserver"
    assert header["verifier_key"] == log_.verifier.to_text()
    assert sum(header["types"].values()) == size and header["types"]["ref.moved"] >= 1150

    check = verify_export(path, keys=[("the registry's key", log_.verifier)])
    assert len(check.leaves) == size and check.checkpoint.size == size
    with library.app_state.db.read() as s:
        assert check.checkpoint.root == log_.root(s, size)

    # The kvreg command agrees, offline, with the key given as a client pins it.
    run = kvreg(
        tmp_path / "home", "--json", "audit", "verify", "--file", path, "--key", log_.verifier.to_text()
    )
    assert run.json["file"]["entries_checked"] == size and run.json["file"]["origin"] == log_.origin

    # One edited line in the file is found by the same check.
    bad = tmp_path / "bad.jsonl"
    edited = json.loads(lines[1500])
    entry = base64.b64decode(edited["entry"])
    edited["entry"] = base64.b64encode(entry.replace(b'"type":"', b'"type":"x')).decode()
    bad.write_bytes(b"\n".join([*lines[:1500], json.dumps(edited).encode(), *lines[1501:]]) + b"\n")
    kvreg(tmp_path / "home", "audit", "verify", "--file", bad, "--key", log_.verifier.to_text(), expect=3)


def export_statements(library: Library) -> tuple[int, int]:
    """The statements and the SELECTs of one export (its checkpoint signed beforehand)."""
    library.app_state.log.checkpoint()
    with count_queries(library) as statements:
        r = library.client.get("/audit/export")
        assert r.status_code == 200
    return len(statements), sum(st.lstrip().upper().startswith("SELECT") for st in statements)


def test_the_export_reads_two_queries_per_page(library: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed number of queries (the visitor, the checkpoint, the type counts), then per page of
    ``EXPORT_PAGE`` entries a read transaction with two SELECTs: the entries, and every tree node
    their proofs need (SQLite adds its BEGIN: three statements a page).

    Counted with pages of 100 (a tenth of the real 1000, and a tenth of the entries to append: the
    appends were most of this test's time); pages of the real size, thousands of proof nodes a
    query, are exported and verified by test_the_export_verifies_with_the_clients_offline_check."""
    monkeypatch.setattr(audit_export, "EXPORT_PAGE", 100)
    sign_in(library.client, library.admin_token)
    add_entries(library, filler(90), monkeypatch)
    small, small_selects = export_statements(library)  # 1 page
    add_entries(library, filler(150, 90), monkeypatch)
    large, large_selects = export_statements(library)  # 3 pages
    assert large_selects - small_selects == 2 * 2, (small_selects, large_selects)
    assert large - small == 2 * 3, (small, large)
    assert small <= 15, small


def test_the_export_of_an_empty_log_is_a_header(tmp_path: Path) -> None:
    for lib in open_library(tmp_path / "empty", log_public=True):
        # The registry's own setup (the admin user and token) is already logged: read the size.
        r = lib.client.get("/audit/export")
        assert r.status_code == 200
        path = tmp_path / "e.jsonl"
        path.write_bytes(r.content)
        check = verify_export(path)
        with lib.app_state.db.read() as s:
            assert len(check.leaves) == lib.app_state.log.size(s)


# --- who may read --------------------------------------------------------------------------------


def test_entries_need_a_signed_in_user_unless_the_log_is_public(
    library: Library, public_log: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = library.namespace(public=False)
    library.publish(ns, "secret", "a private answer")

    anon = library.client
    r = anon.get("/audit")
    assert r.status_code == 200
    assert (
        'tr class="entry"' not in r.text
        and 'id="entries-public-only"' in r.text
        and 'href="/signin' in r.text
    )
    assert ns not in r.text  # nothing of the entries leaks
    assert "signature verified" in element(r.text, "dd", "checkpoint-status")  # the checkpoint is public
    assert 'id="export"' not in r.text
    for url in ("/audit/entries/0", "/audit/export"):
        r = anon.get(url, follow_redirects=False)
        assert r.status_code == 401 and 'href="/signin' in r.text, url
        assert ns not in r.text and "kvreg.audit-export" not in r.text

    # Any valid token reads every entry, whatever its roles (the API's rule).
    nobody = library.user({})
    sign_in(anon, nobody)
    r = anon.get("/audit")
    assert seqs(r.text) and ns in r.text and 'id="export"' in r.text
    assert anon.get("/audit/entries/0").status_code == 200
    assert anon.get("/audit/export").status_code == 200

    # KVREG_LOG_PUBLIC=1: anyone reads entries and the export.
    public_log.namespace("open-ns")
    r = public_log.client.get("/audit")
    assert seqs(r.text) and "open-ns" in r.text and 'id="entries-public-only"' not in r.text
    assert public_log.client.get("/audit/entries/0").status_code == 200
    assert public_log.client.get("/audit/export").status_code == 200


# --- bounded queries -----------------------------------------------------------------------------


def page_statements(library: Library, url: str) -> int:
    library.client.get(url)  # warm: the checkpoint of this size is signed and stored
    with count_queries(library) as statements:
        r = library.client.get(url)
        assert r.status_code == 200, r.text[:300]
    return len(statements)


@pytest.mark.parametrize(
    "url",
    [
        "/audit",
        "/audit?type=ref.moved&namespace=team-a&actor=alice&since=2000-01-01&until=2100-01-01",
        "/audit?before=15",
        "/audit?after=3",
        "/audit/entries/5",
    ],
)
def test_pages_run_the_same_queries_for_20_or_400_entries(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = []
    for n, name in ((20, "small"), (400, "large")):
        for lib in open_library(tmp_path / name):
            ns = lib.namespace()
            lib.publish(ns, "p", "some shared words and more")
            add_entries(lib, filler(n), monkeypatch)
            sign_in(lib.client, lib.admin_token)
            counts.append(page_statements(lib, url))
    assert counts[0] == counts[1], (url, counts)
    assert counts[0] <= 16, counts


# --- the type list -------------------------------------------------------------------------------


def test_the_type_list_is_the_documented_one() -> None:
    text = (REPO / "docs" / "audit.md").read_text(encoding="utf-8")
    section = text.split("## 2. What is recorded", 1)[1].split("## 3.", 1)[0]
    documented = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            documented |= set(re.findall(r"`([a-z]+(?:\.[a-z]+)+)`", line.split("|")[1]))
    assert documented == set(views_audit.KNOWN_TYPES)
    assert len(views_audit.KNOWN_TYPES) == len(set(views_audit.KNOWN_TYPES))


# --- PostgreSQL ----------------------------------------------------------------------------------


def test_the_pages_and_the_export_on_postgresql(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same queries on PostgreSQL: filters with times, pages, a proof, a tampered entry and
    an export of two pages that the client's offline check accepts."""
    from services import fresh_pg_database

    with fresh_pg_database() as url:
        gen = open_library(tmp_path / "pg", database_url=url)
        lib = next(gen)
        try:
            ns = lib.namespace()
            published = lib.publish(ns, "p1", "an answer on postgres")
            day = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
            specs = [{**spec, "at": day + dt.timedelta(minutes=i)} for i, spec in enumerate(filler(1100))]
            made = add_entries(lib, specs, monkeypatch)
            sign_in(lib.client, lib.admin_token)

            r = lib.client.get(
                "/audit", params={"since": "2026-03-01T12:10:00Z", "until": "2026-03-01T12:12:00"}
            )
            assert seqs(r.text) == [made[12], made[11], made[10]]
            r = lib.client.get("/audit", params={"type": "ref.moved", "actor": "bob", "namespace": "team-a"})
            first = seqs(r.text)
            assert len(first) == 50 and link(r.text, "next") is not None
            second = seqs(lib.client.get(link(r.text, "next") or "").text)
            assert second and max(second) < min(first)

            seq = entry_seq(lib, "envelope.stored", str(published.digest))
            page = lib.client.get(f"/audit/entries/{seq}").text
            assert 'class="badge ok">verified' in page
            assert f'href="/ns/{ns}/artifacts/{published.digest}"' in page

            r, path = download(lib.client, tmp_path / "pg.jsonl")
            check = verify_export(path, keys=[("the registry's key", lib.app_state.log.verifier)])
            assert len(check.leaves) == int(r.headers["x-kvreg-log-size"]) > 1100

            raw = stored_entry(lib, made[5])
            tamper(lib, made[5], raw.replace(b'"seq":', b'"seq": '))
            page = lib.client.get(f"/audit/entries/{made[5]}").text
            assert 'class="badge bad">proof failed' in page and 'class="badge ok">verified' not in page
        finally:
            next(gen, None)
