"""The artifact page (/ns/{ns}/artifacts/{digest}) and the ref redirect: content, shared chunks,
prefix relations, receipts, history, access, escaping, bounded queries."""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from kvreg.core.digest import Digest
from kvreg.core.keys import SigningKey
from kvreg.core.receipt import Receipt, format_time

from .conftest import open_library
from .helpers import sign_in
from .library import Library, Published, count_queries

SHORT = "a b c d e f g h"  # 8 tokens: 2 full blocks of 4
LONG = "a b c d e f g h i j k"  # 11 tokens: the same 2 full blocks and a partial one


@pytest.fixture
def big_library(tmp_path: Path) -> Iterator[Library]:
    """A second, separate registry (for comparing the query counts of two library sizes)."""
    yield from open_library(tmp_path / "big")


def page_url(p: Published) -> str:
    return f"/ns/{p.namespace}/artifacts/{p.digest}"


def section(page: str, ident: str) -> str:
    """The HTML of the element with id ``ident`` up to the next <section> (or the end)."""
    start = page.index(">", page.index(f'id="{ident}"')) + 1
    end = page.find("<section", start)
    return page[start : end if end != -1 else len(page)]


def text_of(fragment: str) -> str:
    """The visible text of an HTML fragment, whitespace collapsed, entities decoded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def title_of(page: str) -> str:
    match = re.search(r'<h1 id="title">(.*?)</h1>', page, re.S)
    assert match is not None
    return html.unescape(match.group(1))


def compare_links(fragment: str) -> list[tuple[str, str]]:
    """The (a, b) of every compare link in ``fragment``."""
    out = []
    for href in re.findall(r'href="(/compare\?[^"]+)"', fragment):
        query = parse_qs(urlsplit(html.unescape(href)).query)
        out.append((query["a"][0], query.get("b", [""])[0]))
    return out


def get_ok(library: Library, url: str) -> str:
    r = library.client.get(url)
    assert r.status_code == 200, r.text
    return r.text


def send_receipt(library: Library, p: Published, token: str, key: SigningKey, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "kvreg.receipt/v1",
        "artifact": {"namespace": p.namespace, "ref": p.ref, "digest": str(p.digest)},
        "host": {
            "config_fingerprint": str(Digest.of_bytes(b"host-config")),
            "model_fingerprint": str(Digest.of_bytes(b"web-model")),
            "tokenizer_fingerprint": str(Digest.of_bytes(b"web-tokenizer")),
            "device": "cpu",
            "hostname": "gpu-17",
        },
        "witness": "pass",
        "check": {"byte_exact": True, "steps": 32, "sha256_equal_steps": 32},
        "time": format_time(dt.datetime(2026, 11, 29, 15, 15, 28, tzinfo=dt.UTC)),
        "signer": key.public_key.to_text(),
    }
    doc.update(over)
    body = Receipt.from_doc(doc).sign(key).to_json_bytes()
    r = library.api("POST", f"/namespaces/{p.namespace}/receipts", token, content=body)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def test_the_page_shows_the_artifact(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p07", LONG, title="Problem 7", question="What comes after h?")
    page = get_ok(library, page_url(p))
    assert title_of(page) == "Problem 7"
    assert "What comes after h?" in text_of(section(page, "question"))
    assert f"<pre>\n{LONG}</pre>" in section(page, "solution")
    assert re.search(r'<span data-status="pass" class="badge ok" id="verdict"[^>]*>pass</span>', page)
    verification = section(page, "verification")
    assert "exact-match" in text_of(verification)
    assert '"answer": "k"' in html.unescape(verification)  # the evidence, as pretty JSON
    keyid = library.key.public_key.keyid
    signature = section(page, "signature")
    assert text_of(signature).startswith(f"Signature Checked now against the keys registered for {ns}")
    assert f'title="{keyid}"' in signature and f'id="signer">{keyid}<' in signature
    fingerprints = text_of(section(page, "fingerprints"))
    for expected in (
        "tiny-llama",
        "LlamaForCausalLM",
        "llama",
        "full_attention, full_attention",
        "tiny-tok",
        "native",
        "threads",
        "float32",
        str(p.manifest.model.fingerprint),
        str(p.manifest.tokenizer.fingerprint),
        str(p.manifest.config.fingerprint),
    ):
        assert expected in fingerprints, expected
    about = text_of(section(page, "about"))
    assert "Tokens 11 in 3 chunks of 4 tokens" in about
    assert str(p.manifest.merkle_root) in about
    stored = text_of(section(page, "audit"))
    assert stored.startswith("History and audit Stored by root just now") and "2026-11-29T12:00:00Z" in stored
    chunks = section(page, "chunks")
    assert len(re.findall(r'<tr class="chunk">', chunks)) == 3
    assert "8–11" in text_of(chunks) and "(partial)" in chunks
    assert "0 of 3 chunks shared with 0 other artifacts" in text_of(chunks)
    pull = section(page, "pull-command")
    assert f"<code data-copy>kvreg pull REMOTE {ns}/p07</code>" in pull
    assert "<code data-copy>kvreg remote add REMOTE http://testserver</code>" in pull
    assert "no verification" not in page
    refs = text_of(section(page, "refs"))
    assert f"{ns}/p07" in refs


def test_a_ref_redirects_to_its_artifact(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p07", SHORT)
    r = library.client.get(f"/ns/{ns}/refs/p07", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == page_url(p)
    assert library.client.get(f"/ns/{ns}/refs/nope").status_code == 404
    assert library.client.get(f"/ns/{ns}/refs/a/b").status_code == 400
    assert library.client.get(f"/ns/{ns}/artifacts/sha256:{'0' * 64}").status_code == 404
    assert library.client.get(f"/ns/{ns}/artifacts/not-a-digest").status_code == 400


def test_without_a_ref_the_page_says_how_to_pull_by_ref(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p07", SHORT, title="")
    r = library.api("DELETE", f"/namespaces/{ns}/refs/p07", headers={"If-Match": f'"{p.digest}"'})
    assert r.status_code in (200, 204), r.text
    page = get_ok(library, page_url(p))
    assert title_of(page) == str(p.digest)  # no title, no ref: the digest
    pull = text_of(section(page, "pull-command"))
    assert "takes a ref" in pull and str(p.digest) in pull and "kvreg pull REMOTE" in pull
    assert "No ref points at this artifact" in text_of(section(page, "refs"))


def test_shared_chunks_and_prefix_relations(library: Library) -> None:
    ns = library.namespace()
    short = library.publish(ns, "short", SHORT, title="Short one")
    long = library.publish(ns, "long", LONG, title="Long one")
    unrelated = library.publish(ns, "other", "z y x w v u", title="Unrelated")

    page = get_ok(library, page_url(long))
    chunks = section(page, "chunks")
    cells = re.findall(r'<td class="shared">(.*?)</td>', chunks)
    assert len(cells) == 2  # the two full blocks; the partial third one is long's own
    for cell in cells:
        assert f'href="{page_url(short)}"' in cell and f"{ns}/Short one" in text_of(cell)
        assert page_url(unrelated) not in cell
    assert "2 of 3 chunks shared with 1 other artifact." in text_of(chunks)
    relations = text_of(section(page, "prefix-relations"))
    assert f"extends {ns}/Short one (2 shared blocks) — proof checked" in relations
    assert "Unrelated" not in relations
    links = compare_links(section(page, "prefix-relations"))
    assert links == [(f"{ns}/{long.digest}", f"{ns}/{short.digest}")]
    assert (f"{ns}/{long.digest}", f"{ns}/{short.digest}") in compare_links(section(page, "related"))

    page = get_ok(library, page_url(short))
    assert "2 of 2 chunks shared with 1 other artifact." in text_of(section(page, "chunks"))
    relations = text_of(section(page, "prefix-relations"))
    assert f"extended by {ns}/Long one (2 shared blocks) — proof checked" in relations

    page = get_ok(library, page_url(unrelated))
    assert "No artifact you can read extends" in text_of(section(page, "prefix-relations"))
    assert 'class="shared"' not in section(page, "chunks")


def test_shared_chunks_in_a_private_namespace_are_shown_only_to_its_readers(library: Library) -> None:
    public = library.namespace()
    private = library.namespace(public=False)
    long = library.publish(public, "long", LONG, title="Public long")
    library.publish(private, "short", SHORT, title="Private short")
    page = get_ok(library, page_url(long))
    assert "Private short" not in page
    assert "0 of 3 chunks shared with 0 other artifacts" in text_of(section(page, "chunks"))
    sign_in(library.client, library.user({private: "read"}))
    page = get_ok(library, page_url(long))
    assert "2 of 3 chunks shared with 1 other artifact." in text_of(section(page, "chunks"))
    assert f"extends {private}/Private short (2 shared blocks) — proof checked" in text_of(
        section(page, "prefix-relations")
    )


def test_history_shows_the_ref_created_and_moved(library: Library) -> None:
    ns = library.namespace()
    first = library.publish(ns, "p", SHORT, title="v1")
    second = library.publish(ns, "p", "a b c d q r s t", title="v2")

    page = get_ok(library, page_url(first))
    rows = re.findall(r'<tr class="entry">(.*?)</tr>', section(page, "history"), re.S)
    types = [re.search(r"<code>([^<]+)</code>", r).group(1) for r in rows]  # type: ignore[union-attr]
    # Newest first; object.held: the manifest uploaded as an object before its envelope.
    assert types == ["ref.moved", "ref.created", "envelope.stored", "object.held"]
    moved, created = text_of(rows[0]), text_of(rows[1])
    assert f"{ns}/p: {first.digest.short()}… → {second.digest.short()}…" in moved
    assert f"{ns}/p: none → {first.digest.short()}…" in created and "root" in created
    seqs = [int(s) for s in re.findall(r'<a href="/audit/entries/(\d+)">', section(page, "history"))]
    assert seqs == sorted(seqs, reverse=True) and len(seqs) == 4

    page = get_ok(library, page_url(second))
    rows = re.findall(r'<tr class="entry">(.*?)</tr>', section(page, "history"), re.S)
    assert [re.search(r"<code>([^<]+)</code>", r).group(1) for r in rows] == [  # type: ignore[union-attr]
        "ref.moved",
        "envelope.stored",
        "object.held",
    ]
    # The first version has no ref now; the second has p.
    assert "No ref points at this artifact" in text_of(section(get_ok(library, page_url(first)), "refs"))
    assert f"{ns}/p" in text_of(section(page, "refs"))


def test_graft_receipts_are_listed(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p07", LONG)
    grafter = library.user({ns: "read"})
    host_key = SigningKey.generate()
    send_receipt(library, p, grafter, host_key)
    send_receipt(library, p, grafter, library.key, witness="fail", check=None, time="2026-11-30T08:00:00Z")
    page = get_ok(library, page_url(p))
    receipts = section(page, "receipts")
    # One host configuration sent both; only the first carried a check (byte-exact).
    assert text_of(receipts).startswith(
        "Graft receipts 2 receipts: 1 byte-exact, 1 without a check. They come from 1 host."
    )
    # The trust line counts the hosts whose grafts were byte-exact.
    assert '<a href="#receipts">byte-exact grafts by 1 host</a>' in section(page, "trust")
    rows = re.findall(r'<tr class="receipt">(.*?)</tr>', receipts, re.S)
    assert len(rows) == 2
    newest, first = text_of(rows[0]), text_of(rows[1])
    host = Digest.of_bytes(b"host-config").short()
    assert 'title="2026-11-29 15:15:28 UTC"' in rows[1] and host in first and "(gpu-17)" in first
    assert "pass" in first and "yes" in first and host_key.public_key.keyid[:19] in first
    assert "unregistered key" in first
    assert "fail" in newest and "registered key" in newest and "unregistered" not in newest
    assert '<span data-status="fail" class="badge bad">fail</span>' in rows[0]
    assert "no logits check" in newest and 'title="The host grafted without --check' in rows[0]
    assert "32/32 steps" in first and "cpu" in first
    # Each receipt links to itself in the API and to its audit entry.
    listed = library.api("GET", f"/namespaces/{ns}/receipts").json()["receipts"]
    sign_in(library.client, library.admin_token)
    for r, row in zip(listed, rows, strict=True):
        assert f'href="/api/v1/namespaces/{ns}/receipts/{r["id"]}"' in row
        assert f'href="/audit/entries/{r["log_index"]}"' in row
        assert library.client.get(f"/audit/entries/{r['log_index']}").status_code == 200
    history = text_of(section(page, "history"))
    assert history.count("graft.receipt") == 2


def labelled_namespace(library: Library, label: str, owner: str | None = None) -> tuple[str, SigningKey]:
    """A namespace whose signing key is registered with ``label`` (and ``owner``); and that key."""
    ns = library.namespace()
    r = library.api("DELETE", f"/namespaces/{ns}/keys/{library.key.public_key.keyid}")
    assert r.status_code == 200, r.text
    key = SigningKey.generate()
    body: dict[str, Any] = {"public_key": key.public_key.to_text(), "label": label}
    if owner is not None:
        body["owner"] = owner
    r = library.api("POST", f"/namespaces/{ns}/keys", json=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["label"] == label.strip() and out["log_index"] is not None
    return ns, key


def test_the_page_leads_with_content_one_trust_line_and_the_commands(library: Library) -> None:
    ns, key = labelled_namespace(library, "CI signer", owner="alice")
    library.key, old_key = key, library.key
    try:
        p = library.publish(ns, "p07", LONG, title="Problem 7", question="What comes after h?")
    finally:
        library.key = old_key
    page = get_ok(library, page_url(p))
    # The order: title, the trust line, the question, the commands, the solution, then the sections.
    order = ['id="title"', 'id="trust"', 'id="question"', 'id="pull-command"', 'id="solution"']
    order += ['id="evidence"', 'id="receipts"', 'id="audit"', 'id="files"']
    positions = [page.index(ident) for ident in order]
    assert positions == sorted(positions), order
    # One trust line: verdict by verifier, signer (label, owner) and the check now, grafts.
    trust = section(page, "trust")
    assert text_of(trust).startswith(
        "pass by exact-match ? signed by CI signer (alice) verified ? no graft reported yet ?"
    ), text_of(trust)
    assert 'href="/?verifier=exact-match"' in trust
    found = get_ok(library, "/?verifier=exact-match")
    assert "Problem 7" in found
    # Each fact once: the verdict badge and the signature's badge appear only in the trust line.
    assert page.count('data-status="pass"') == 1 and page.count('id="signature-badge"') == 1
    assert page.count("CI signer") == 2  # the trust line, and the key's fields in the signature section
    # The copyable commands, before the solution.
    pull = section(page, "pull-command")
    assert f"<code data-copy>kvreg pull REMOTE {ns}/p07</code>" in pull
    assert f"<code data-copy>kvreg graft {ns}/p07 --model MODEL --check --receipt REMOTE</code>" in pull
    assert "<code data-copy>kvreg ask --model MODEL --prompt-file question.txt --remote REMOTE" in pull
    # Jargon is explained where it appears: a hover text and a link to the glossary.
    assert 'href="/glossary#verdict"' in trust and 'href="/glossary#signature"' in trust
    fingerprints = section(page, "fingerprints")
    assert re.search(r'<abbr class="term" title="Attention heads[^"]*">KV heads</abbr>', fingerprints)
    assert 'href="/glossary#kv-heads"' in fingerprints
    # The model by its name, architecture and size, not only a fingerprint.
    text = text_of(fingerprints)
    assert re.search(r"Model tiny-llama Size \d+ layers, \d+ KV heads what is this\? × \d+, float32", text), (
        text
    )
    assert "of KV cache per token" in text
    assert 'href="/?model=tiny-llama"' in fingerprints
    assert 'details class="config-details"' in fingerprints
    # The signature section names the key and the audit entry that registered it.
    keys = library.api("GET", f"/namespaces/{ns}/keys").json()["keys"]
    entry = next(k for k in keys if k["keyid"] == key.public_key.keyid)["log_index"]
    signature = section(page, "signature")
    assert "Label CI signer" in text_of(signature) and "Owner alice" in text_of(signature)
    assert f'href="/audit/entries/{entry}">audit entry {entry}</a>' in signature
    assert f'href="/ns/{ns}#keys"' in signature
    sign_in(library.client, library.admin_token)
    assert library.client.get(f"/audit/entries/{entry}").status_code == 200
    assert re.search(
        r'id="stored-by">Stored by root .*?<a href="/audit/entries/\d+">audit entry \d+</a>', page
    )


def test_a_hostile_key_label_is_escaped(library: Library) -> None:
    hostile = '<script>alert("key")</script><img src=x onerror=alert(1)>'
    ns, key = labelled_namespace(library, hostile)
    library.key, old_key = key, library.key
    try:
        p = library.publish(ns, "p07", SHORT)
    finally:
        library.key = old_key
    grafter = library.user({ns: "read"})
    send_receipt(library, p, grafter, key)
    page = get_ok(library, page_url(p))
    assert '<script>alert("key")' not in page and "<img src=x" not in page
    escaped = "&lt;script&gt;alert(&#34;key&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert escaped in section(page, "trust")
    assert escaped in section(page, "receipts")
    assert escaped in section(page, "signature")
    # Owner defaults to the user who registered it (here the admin token's user).
    assert "(root) verified" in text_of(section(page, "trust"))


def test_a_key_label_with_control_characters_is_refused(library: Library) -> None:
    ns = library.namespace()
    key = SigningKey.generate()
    for body in (
        {"public_key": key.public_key.to_text(), "label": "bad\u0007bell"},
        {"public_key": key.public_key.to_text(), "owner": "Not A User"},
    ):
        r = library.api("POST", f"/namespaces/{ns}/keys", json=body)
        assert r.status_code in (400, 422), r.text
        assert r.json()["error"]["code"] in ("REQUEST_INVALID", "NAME_INVALID")
    # Without a label (as before this field existed) the key is still registered, label "".
    r = library.api("POST", f"/namespaces/{ns}/keys", json={"public_key": key.public_key.to_text()})
    assert r.status_code == 201 and r.json()["label"] == "" and r.json()["owner"] == "root"


def test_the_chunk_bar_shows_which_chunks_are_shared(library: Library) -> None:
    ns = library.namespace()
    base = library.publish(ns, "base", SHORT, title="Base")
    longer = library.publish(ns, "longer", LONG, title="Longer")
    page = get_ok(library, page_url(longer))
    chunks = section(page, "chunks")
    svg = re.search(r"<svg class=\"chunk-bar\" role=\"img\".*?</svg>", chunks, re.S)
    assert svg is not None
    bar = svg.group(0)
    assert '<title id="chunk-bar-title">Longer: 2 of 3 chunks shared with other artifacts</title>' in bar
    assert bar.count("<rect ") == 3
    assert re.findall(r'<rect class="([a-z0-9-]+)"', bar) == ["seg-0", "seg-0", "seg-own"]
    assert "#" not in bar.split("</desc>")[1]  # colours come from CSS classes, not from the SVG
    legend = [
        text_of(li).replace(" :", ":") for li in re.findall(r'<li class="chunk-run">(.*?)</li>', chunks, re.S)
    ]
    assert legend == [
        f"chunks 0–1 (tokens 0–8): shared with {ns}/Base",
        "chunk 2 (tokens 8–11): only in this artifact",
    ]
    assert f'href="{page_url(base)}"' in chunks


def test_the_chunk_bar_escapes_titles(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "base", SHORT, title='<b>base</b> & "x"')
    longer = library.publish(ns, "longer", LONG, title="<i>long</i>")
    bar = section(get_ok(library, page_url(longer)), "chunks")
    assert "<b>base" not in bar and "<i>long" not in bar
    assert "&lt;i&gt;long&lt;/i&gt;: 2 of 3 chunks" in bar
    assert "&lt;b&gt;base&lt;/b&gt; &amp; &#34;x&#34;" in bar


def test_a_private_artifact_is_hidden_until_sign_in(library: Library) -> None:
    private = library.namespace(public=False)
    p = library.publish(private, "secret", "a secret solution zebra", title="Secret")
    url = page_url(p)
    r = library.client.get(url, follow_redirects=False)
    # Anonymous: sent to sign in, exactly as for a namespace that does not exist.
    assert r.status_code == 303 and r.headers["location"] == f"/signin?next={quote(url)}"
    missing = f"/ns/no-such-ns/artifacts/{p.digest}"
    r2 = library.client.get(missing, follow_redirects=False)
    assert r2.status_code == 303 and r2.headers["location"] == f"/signin?next={quote(missing)}"
    r = library.client.get(f"/ns/{private}/refs/secret", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/signin?")
    assert str(p.digest) not in r.headers["location"]

    sign_in(library.client, library.user())  # signed in, but no role in it: 404 as in the API
    r = library.client.get(url)
    assert r.status_code == 404 and "zebra" not in r.text and "Secret" not in r.text
    assert library.client.get(f"/ns/{private}/refs/secret", follow_redirects=False).status_code == 404

    sign_in(library.client, library.user({private: "read"}))
    page = get_ok(library, url)
    assert "zebra" in text_of(section(page, "solution"))
    assert "kvreg login REMOTE --token TOKEN" in text_of(section(page, "pull-command"))
    r = library.client.get(f"/ns/{private}/refs/secret", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == url


def test_markup_in_the_artifact_is_shown_as_text(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(
        ns,
        "xss",
        "Solution <script>alert(1)</script> </pre><b>bold</b>",
        title="<script>alert(2)</script> title",
        question='<img src=x onerror="alert(3)"> question',
        verifier="hand<i>checked</i>",
    )
    page = get_ok(library, page_url(p))
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>bold" not in page
    assert "<i>checked" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt; title" in section(page, "title")
    assert "<title>&lt;script&gt;alert(2)" in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt; &lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;"
    assert escaped in section(page, "solution")
    assert "&lt;img src=x onerror=&#34;alert(3)&#34;&gt; question" in section(page, "question")
    assert "hand&lt;i&gt;checked&lt;/i&gt;" in section(page, "verification")


def test_a_key_revoked_since_the_push_shows_the_signature_not_verified(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p07", SHORT)
    keyid = library.key.public_key.keyid
    r = library.api("DELETE", f"/namespaces/{ns}/keys/{keyid}")
    assert r.status_code == 200, r.text
    page = get_ok(library, page_url(p))
    status = text_of(section(page, "signature"))
    assert status.startswith(f"Signature It does not verify now: the signer's key {keyid} was revoked on")
    assert keyid in status  # the signer's key id is still shown
    assert re.search(
        r'class="badge bad" id="signature-badge" title="the signer&#39;s key [^"]*">NOT verified<', page
    )


def test_a_long_text_is_cut_with_a_note(library: Library) -> None:
    ns = library.namespace()
    words = " ".join(f"w{i:06d}" for i in range(40_000))  # 320,000 bytes
    p = library.publish(ns, "long", words, block_size=4096)
    solution = section(get_ok(library, page_url(p)), "solution")
    assert "Only the first 256.0 KiB of 312.5 KiB are shown." in text_of(solution)
    assert "w000000 w000001" in solution and "w039999" not in solution


def test_an_object_missing_from_storage_is_said_not_a_crash(library: Library) -> None:
    ns = library.namespace()
    p = library.publish(ns, "p", LONG)
    other = library.publish(ns, "q", SHORT)
    library.app_state.storage.delete(p.manifest.text.digest)
    library.app_state.storage.delete(other.manifest.tokens.digest)
    page = get_ok(library, page_url(p))
    assert f"cannot be shown: the object {p.manifest.text.digest} is not in storage" in text_of(
        section(page, "solution")
    )
    compare = get_ok(library, f"/compare?a={ns}/p&b={ns}/q")
    assert "cannot be read (not in storage)" in text_of(section(compare, "shared-tokens"))
    assert "cannot be read (not in storage)" in text_of(section(compare, "divergence"))
    assert "2 leading full blocks in common" in text_of(section(compare, "shared-blocks"))


def _library_of(library: Library, n: int, receipts: int) -> Published:
    """An artifact, ``n`` others extending it (every other one in a private namespace), and
    ``receipts`` graft receipts for it (each one an audit entry about it too)."""
    public = library.namespace()
    private = library.namespace(public=False)
    base = library.publish(public, "base", SHORT + " base", title="Base")
    for i in range(n):
        ns = public if i % 2 else private
        library.publish(ns, f"x{i}", f"{SHORT} base more words number {i}", title=f"Extension {i}")
    grafter = library.user({public: "read"})
    key = SigningKey.generate()
    for i in range(receipts):
        send_receipt(library, base, grafter, key, time=f"2026-11-29T15:{i // 60:02d}:{i % 60:02d}Z")
    return base


def _statements(library: Library, url: str) -> tuple[int, str]:
    with count_queries(library) as statements:
        r = library.client.get(url)
    assert r.status_code == 200, r.text
    return len(statements), r.text


def test_the_number_of_queries_does_not_grow_with_the_library(library: Library, big_library: Library) -> None:
    small_base = _library_of(library, 3, 3)
    big_base = _library_of(big_library, 30, 60)

    small, page = _statements(library, page_url(small_base))
    assert "3 receipts: 3 byte-exact." in page and "shared with 1 other artifact." in page  # public only
    # object.held, envelope.stored, ref.created and the 3 receipts' graft.receipt entries.
    assert len(re.findall(r'<tr class="entry">', page)) == 6
    big, page = _statements(big_library, page_url(big_base))
    assert "60 receipts: 60 byte-exact; the newest 50 are shown." in page
    assert "byte-exact grafts by 1 host</a>" in page  # counted over all 60, not only those shown
    assert "shared with 15 other artifacts." in page
    assert page.count("extended by ") == 15
    assert len(re.findall(r'<tr class="entry">', page)) == 50  # history capped
    assert len(re.findall(r'<tr class="receipt">', page)) == 50
    assert big == small, (small, big)

    # Signed in (a session to look up; a server admin reads every namespace): the same again.
    sign_in(library.client, library.admin_token)
    sign_in(big_library.client, big_library.admin_token)
    small, _ = _statements(library, page_url(small_base))
    big, page = _statements(big_library, page_url(big_base))
    assert "shared with 30 other artifacts." in page and page.count("extended by ") == 30
    assert big == small, (small, big)


def test_the_pages_on_postgresql(tmp_path: Path) -> None:
    """The same queries on PostgreSQL: shared chunks, relations, history, receipts, compare."""
    from services import fresh_pg_database

    with fresh_pg_database() as url:
        gen = open_library(tmp_path / "pg", database_url=url)
        lib = next(gen)
        try:
            public, private = lib.namespace(), lib.namespace(public=False)
            short = lib.publish(public, "short", SHORT, title="Short one")
            lib.publish(private, "hidden", SHORT + " hidden", title="Hidden")
            long = lib.publish(public, "long", LONG, title="Long one")
            send_receipt(lib, long, lib.user({public: "read"}), SigningKey.generate())
            page = get_ok(lib, page_url(long))
            assert "2 of 3 chunks shared with 1 other artifact." in text_of(section(page, "chunks"))
            assert "Hidden" not in page
            relations = text_of(section(page, "prefix-relations"))
            assert f"extends {public}/Short one (2 shared blocks) — proof checked" in relations
            assert "1 receipt: 1 byte-exact." in text_of(section(page, "receipts"))
            assert len(re.findall(r'<tr class="entry">', section(page, "history"))) == 4
            sign_in(lib.client, lib.user({private: "read"}))
            page = get_ok(lib, page_url(short))
            assert "2 of 2 chunks shared with 2 other artifacts." in text_of(section(page, "chunks"))
            compare = get_ok(lib, f"/compare?a={public}/short&b={private}/hidden")
            assert "2 leading full blocks in common" in text_of(section(compare, "shared-blocks"))
        finally:
            next(gen, None)
