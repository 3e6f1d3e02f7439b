"""The audit trail as people read it (issue 16): a push is one row that expands, low-level
entries are hidden until asked for, artifacts are named by title, and visitors without a
token read the entries of public namespaces only."""

from __future__ import annotations

import re

from sqlalchemy import select

from kvreg_registry.db.models import AuditEntry
from kvreg_registry.web.audit_groups import receipt_summary

from .helpers import sign_in
from .library import Library

ROW = re.compile(r'<tr class="entry" data-seq="(\d+)">')


def types_of(library: Library, seqs: list[int]) -> list[str]:
    with library.app_state.db.read() as s:
        found = dict(s.execute(select(AuditEntry.seq, AuditEntry.type).where(AuditEntry.seq.in_(seqs))).all())
    return [found[q] for q in seqs]


def shown(library: Library, **params: str) -> tuple[str, list[int]]:
    r = library.client.get("/audit", params=params)
    assert r.status_code == 200, r.text
    return r.text, [int(s) for s in ROW.findall(r.text)]


def test_a_push_is_one_row_and_low_level_entries_are_hidden_by_default(library: Library) -> None:
    ns = library.namespace("team")
    pushed = library.publish(ns, "p07", "one two three four five six", title="Problem seven")
    sign_in(library.client, library.admin_token)
    html, seqs = shown(library)
    kinds = types_of(library, seqs)
    assert "object.held" not in kinds and "upload.opened" not in kinds
    assert "envelope.stored" in kinds and "ref.created" in kinds
    group = re.search(r'<tr class="push-group".*?</details>', html, re.S)
    assert group is not None, "the push is not folded into one row"
    assert "Pushed “Problem seven” as team/p07" in group.group(0)
    assert f'href="/ns/{ns}/artifacts/{pushed.digest}"' in group.group(0)
    assert "<details>" in group.group(0) and "<summary>" in group.group(0)
    # Titles instead of digests in the summaries.
    assert "team/p07; new “Problem seven”" in html
    # Asking for them shows the uploads too, folded into the same push.
    html, every = shown(library, all="1")
    assert "object.held" in types_of(library, every) and set(seqs) < set(every)
    group = re.search(r'<tr class="push-group".*?</details>', html, re.S)
    assert group is not None and "objects uploaded" in group.group(0)
    assert 'id="f-all" name="all" type="checkbox" value="1" checked' in html
    # A type filter that names a low-level type shows it without the box ticked.
    _, held = shown(library, type="object.held")
    assert held and set(types_of(library, held)) == {"object.held"}


def test_signed_out_visitors_read_the_entries_of_public_namespaces_only(library: Library) -> None:
    public = library.namespace("open-team")
    private = library.namespace("closed-team", public=False)
    library.publish(public, "a", "alpha beta gamma delta", title="Open answer")
    library.publish(private, "b", "alpha beta gamma epsilon", title="Closed answer")
    html, seqs = shown(library)
    assert seqs and 'id="entries-public-only"' in html
    with library.app_state.db.read() as s:
        namespaces = dict(
            s.execute(select(AuditEntry.seq, AuditEntry.namespace).where(AuditEntry.seq.in_(seqs))).all()
        )
    assert set(namespaces.values()) == {public}
    assert "closed-team" not in html and "Closed answer" not in html
    assert 'id="export"' not in html
    _, every = shown(library, all="1")
    assert every and set(every) >= set(seqs)
    # An entry of the public namespace opens; one of the private namespace or of no namespace does not.
    with library.app_state.db.read() as s:
        rows = s.execute(select(AuditEntry.seq, AuditEntry.namespace)).all()
    open_seq = next(q for q, n in rows if n == public)
    closed_seq = next(q for q, n in rows if n == private)
    loose_seq = next(q for q, n in rows if n is None)
    assert library.client.get(f"/audit/entries/{open_seq}").status_code == 200
    for seq in (closed_seq, loose_seq):
        r = library.client.get(f"/audit/entries/{seq}", follow_redirects=False)
        assert r.status_code == 401 and "closed-team" not in r.text, seq
    assert library.client.get("/audit/export", follow_redirects=False).status_code == 401
    # Signed in, every entry (the API's rule: any valid token).
    sign_in(library.client, library.user())
    html, signed = shown(library)
    assert set(signed) > set(seqs) and "closed-team" in html


def test_a_graft_receipt_entry_says_what_the_host_found() -> None:
    digest = "sha256:" + "ab" * 32
    doc = {"subjects": [digest], "new": {"ref": "team/p07", "check": {"byte_exact": True, "steps": 8}}}
    names = {digest: "Problem seven"}
    assert receipt_summary(doc, names) == "grafted “Problem seven” (team/p07): byte-exact over 8 steps"
    doc["new"] = {"check": {"byte_exact": False, "steps": 8, "sha256_equal_steps": 3}}
    assert receipt_summary(doc, {}) == "grafted sha256:abababababab…: NOT byte-exact (3 of 8 steps equal)"
    doc["new"] = {"check": None}
    assert receipt_summary(doc, names) == "grafted “Problem seven”: no logits check"
    assert receipt_summary({"subjects": []}, names) is None
