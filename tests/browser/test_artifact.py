"""The artifact page (``/ns/{ns}/artifacts/{digest}``), refs that redirect to it, and ``/compare``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from .helpers import clean, no_horizontal_scroll, number, numbers, text, visit
from .seed import BLOCK, KEY_LABEL, SCRIPT, WRITER, Seeded


def _count(page: Any, selector: str) -> int:
    """The number ``selector`` shows: its text when that is one number, else its ``.count`` element's
    (the compare page writes ``<section id=shared-blocks>... <strong class=count>8</strong> ...``)."""
    whole = text(page, selector)
    if len(numbers(whole)) == 1:
        return number(whole)
    inner = page.locator(f"{selector} .count")
    assert inner.count() == 1, f"{selector} holds several numbers and no single .count: {whole!r}"
    return number(inner.text_content())


def test_a_ref_redirects_to_its_artifact(page: Any, server: Seeded) -> None:
    ns = server.public_ns
    r = page.request.get(f"/ns/{ns}/refs/p07x", max_redirects=0)
    assert r.status == 303, f"/ns/{ns}/refs/p07x answered {r.status}"
    assert r.headers["location"].endswith(server.artifact_path("p07x")), r.headers
    visit(page, f"/ns/{ns}/refs/p07x")
    assert page.url.endswith(server.artifact_path("p07x")), page.url
    visit(page, f"/ns/{ns}/refs/no-such-ref", status=404)


def test_artifact_page_of_an_extension(page: Any, server: Seeded, shot: Any) -> None:
    a = server.artifacts["p07x"]
    manifest = server.manifests["p07x"]
    p07 = server.artifact_path("p07")
    visit(page, server.artifact_path("p07x"))

    assert a.title in text(page, "#title")
    assert "Problem 7." in text(page, "#question")
    assert "Check: an exhaustive checker" in text(page, "#solution")
    assert "pass" in text(page, "#verdict")
    assert text(page, "#signature-badge").strip() == "verified"
    assert "it verifies with key" in text(page, "#signature-status")

    fingerprints = page.locator("#fingerprints").inner_html()
    for field in ("model", "tokenizer", "config"):
        fp = manifest[field]["fingerprint"]
        assert fp in fingerprints or fp.removeprefix("sha256:")[:12] in fingerprints, (
            f"#fingerprints does not show the {field} fingerprint {fp}"
        )

    # One row per chunk; the full blocks of p07 are shared with it, and say so with a link.
    rows = page.locator("#chunks tr.chunk")
    assert rows.count() == len(manifest["chunks"])
    shared = len(server.full_blocks("p07"))
    assert 0 < shared < rows.count()
    for i in range(rows.count()):
        links = rows.nth(i).locator(f'td.shared a[href="{p07}"]').count()
        if i < shared:
            assert links == 1, f"chunk {i} is a block of p07 but its row does not link to it"
        else:
            assert links == 0, f"chunk {i} is not a block of p07 but its row links to it"

    relation = page.locator("#prefix-relations").locator(f'a[href="{p07}"]')
    assert relation.count() >= 1, "#prefix-relations does not link to p07, which p07x extends"
    assert "proof checked" in text(page, "#prefix-relations")

    # "#pull-command" is the <code>, or holds it (with other commands: kvreg remote add...).
    pull = page.locator("#pull-command")
    if pull.evaluate("e => e.tagName") == "CODE":
        commands = [pull.text_content() or ""]
    else:
        commands = pull.locator("code").all_text_contents()
    pulls = [c.strip() for c in commands if c.strip().startswith("kvreg pull ")]
    assert any(f"{server.public_ns}/p07x" in c for c in pulls), f"#pull-command has no kvreg pull: {commands}"
    assert page.locator("#receipts").count() == 1
    assert "envelope.stored" in text(page, "#history")
    shot(page, "artifact")
    clean(page)


def test_artifact_page_of_the_base_shows_its_receipt_and_extension(page: Any, server: Seeded) -> None:
    visit(page, server.artifact_path("p07"))
    relation = page.locator("#prefix-relations").locator(f'a[href="{server.artifact_path("p07x")}"]')
    assert relation.count() >= 1, "#prefix-relations does not link to p07x, which extends p07"
    assert "proof checked" in text(page, "#prefix-relations")
    assert server.receipt is not None and server.receipt.get("sent") is True, server.receipt
    receipts = text(page, "#receipts")
    # The receipt gina's host sent after grafting p07: its witness probe passed.
    assert "pass" in receipts and "gina" in receipts, f"#receipts does not show gina's receipt: {receipts!r}"
    history = text(page, "#history")
    assert "envelope.stored" in history and "ref.created" in history, history
    # One trust line: the signer by its label and owner, the graft evidence.
    trust = text(page, "#trust")
    assert KEY_LABEL in trust and f"({WRITER})" in trust, trust
    assert "grafted by 1 host, byte-exactness not checked" in trust, trust  # gina ran without --check
    # Content first: the question, the commands and the solution come before every section.
    ys = [page.locator(s).bounding_box()["y"] for s in ("#trust", "#question", "#solution", "#evidence")]
    assert ys == sorted(ys), ys
    assert page.locator("#pull-command").bounding_box()["y"] < page.locator("#receipts").bounding_box()["y"]
    assert page.locator("#pull-command code", has_text="kvreg graft").count() == 1
    # The chunk-sharing bar: an image with a text alternative, drawn with the page's colours.
    bar = page.locator("#chunk-map svg.chunk-bar[role=img]")
    assert bar.count() == 1 and bar.is_visible()
    assert "shared with" in (bar.locator("title").first.text_content() or "")
    fill = bar.locator("rect").first.evaluate("e => getComputedStyle(e).fill")
    assert fill and fill != "none" and fill != "rgb(0, 0, 0)", fill
    clean(page)


def _on_first_screen(page: Any, selector: str) -> bool:
    """``selector`` is shown, whole, within the first screen (no scrolling)."""
    box = page.locator(selector).first.bounding_box()
    height = page.viewport_size["height"]
    return box is not None and box["height"] > 0 and box["y"] >= 0 and box["y"] + box["height"] <= height


def _first_screen(page: Any, server: Seeded, name: str) -> None:
    """What the first screen of an artifact's page must show: the title, the trust line, the
    start of the question and the pull command; the question's first line is its own."""
    visit(page, server.artifact_path(name))
    no_horizontal_scroll(page)
    for selector in ("#title", "#trust", "#question-h", '#pull-command .copy-row:has-text("kvreg pull")'):
        assert _on_first_screen(page, selector), f"{selector} is not on the first screen of {name}"
    question = page.locator("#question pre")
    box = question.bounding_box()
    assert box["y"] + 40 <= page.viewport_size["height"], f"the question of {name} starts below the screen"
    first_words = " ".join((server.artifacts[name].prompt or "").split()[:4])
    assert first_words in (question.text_content() or ""), first_words


def test_artifact_page_shows_content_first_on_a_desktop(page: Any, server: Seeded) -> None:
    for name in ("p07", "gsm8k-test-0001"):
        _first_screen(page, server, name)
        # ...and, on a wide screen, the start of the verified solution too.
        solution = page.locator("#solution pre").bounding_box()
        assert solution["y"] + 40 <= page.viewport_size["height"], f"the solution of {name} starts below"
    clean(page)


def test_artifact_page_shows_content_first_on_a_phone(phone: Any, server: Seeded, shot: Any) -> None:
    for name in ("p07", "p07x", "gsm8k-test-0001"):
        _first_screen(phone, server, name)
    # The chat artifact's question is the user's turn, not the chat template's markup.
    assert "<|im_start|>" not in text(phone, "#question")
    assert "<|im_start|>" in text(phone, "#prompt")
    shot(phone, "artifact-phone")
    clean(phone)


def test_compare_counts_the_shared_prefix(page: Any, server: Seeded, shot: Any) -> None:
    ns = server.public_ns
    a, b = f"{ns}/{server.digests['p07']}", f"{ns}/{server.digests['p07x']}"
    visit(page, "/compare?" + urlencode({"a": a, "b": b}))
    blocks = _count(page, "#shared-blocks")
    assert blocks == len(server.full_blocks("p07")) > 0
    tokens = _count(page, "#shared-tokens")
    assert blocks * BLOCK <= tokens <= int(server.manifests["p07"]["tokens"]["count"])
    assert text(page, "#divergence").strip()
    shot(page, "compare")
    clean(page)

    c = f"{ns}/{server.digests['other']}"
    visit(page, "/compare?" + urlencode({"a": a, "b": c}))
    assert _count(page, "#shared-blocks") == 0


def test_markup_in_an_artifact_is_shown_as_text(page: Any, server: Seeded, shot: Any) -> None:
    xss = server.artifacts["xss"]
    visit(page, server.artifact_path("xss"))
    page.wait_for_timeout(300)  # an injected onerror/onload would have fired by now
    assert SCRIPT in text(page, "#solution")
    assert SCRIPT in text(page, "#title")
    assert page.locator("#solution script").count() == 0
    assert page.locator("#title script, #question img, #question script").count() == 0
    assert page.locator("main script, [onerror], [onload]").count() == 0
    shown = page.locator("main").inner_text()
    if "hand" in shown:  # the verifier's name, hand<i>checked</i>, is shown as text if at all
        assert xss.verifier in shown
    assert '<img src=x onerror="alert(2)">' in text(page, "#question")
    # The page's own scripts are files; none has the artifact's code.
    inline = page.evaluate("[...document.scripts].map(s => s.src ? '' : s.textContent).join('\\n')")
    assert "alert(" not in inline
    shot(page, "escaping")
    clean(page)

    # Wherever the title is listed: search results, the namespace page, a comparison.
    visit(page, "/?" + urlencode({"q": "markup in a title"}))
    assert SCRIPT in text(page, "#results")
    visit(page, f"/ns/{server.public_ns}")
    assert SCRIPT in text(page, "#artifacts")
    ns = server.public_ns
    visit(
        page,
        "/compare?" + urlencode({"a": f"{ns}/{server.digests['xss']}", "b": f"{ns}/{server.digests['p07']}"}),
    )
    page.wait_for_timeout(300)
    assert page.locator("main script, [onerror], [onload]").count() == 0
    clean(page)
