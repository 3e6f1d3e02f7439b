"""The design system's pieces on their own: the status -> tone map and the badge macro, relative
times, search-word highlighting (escaped), and that every badge of every template goes through
the components (so one status has one colour on every page)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from kvreg_registry.web.render import ENV, TEMPLATES_DIR, highlight, relative_time
from kvreg_registry.web.status import STATUS_TONES, TONE_COLOURS, tone_of, verdict_status

from .library import Library

COMPONENTS = ENV.get_template("components.html")


def test_every_status_has_a_tone_with_a_colour() -> None:
    assert set(STATUS_TONES.values()) <= set(TONE_COLOURS)
    # the cases the pages disagreed on: one meaning, one tone
    assert tone_of("unknown") == tone_of("unverified") == "warn"
    assert tone_of("public") == tone_of("private") == "neutral"
    assert [verdict_status(v) for v in ("pass", "fail", "unknown", "odd", None, "")] == [
        "pass",
        "fail",
        "unknown",
        "unknown",
        "unverified",
        "unverified",
    ]
    with pytest.raises(KeyError, match="not in"):
        tone_of("shiny")


def test_the_badge_macro_takes_its_colour_from_the_map() -> None:
    m = COMPONENTS.module
    assert str(m.badge("unknown")) == '<span data-status="unknown" class="badge warn">unknown</span>'
    assert 'class="badge neutral">public<' in str(m.badge("public"))
    assert 'data-status="unverified" class="badge warn"' in str(m.verdict(None))
    assert ">not verified<" in str(m.verdict(None))
    assert 'data-status="unknown" class="badge warn"' in str(m.verdict("maybe"))
    assert re.search(r'data-status="pass" class="badge ok"[^>]*>pass<', str(m.verdict("pass")))
    assert "&lt;b&gt;" in str(m.badge("label", "<b>"))


def test_times_read_relative_with_the_exact_time_on_hover() -> None:
    now = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
    ago = [relative_time(now - dt.timedelta(seconds=s), now) for s in (5, 200, 7300, 86400, 3 * 86400)]
    assert ago == ["just now", "3 min ago", "2 h ago", "1 day ago", "3 days ago"]
    assert relative_time(now - dt.timedelta(days=40), now) == "2026-10-27"
    assert relative_time(None) == "–"
    html = str(COMPONENTS.module.time(now))
    assert 'datetime="2026-12-06T12:00:00Z"' in html and 'title="2026-12-06 12:00:00 UTC"' in html


def test_search_words_are_marked_and_everything_else_escaped() -> None:
    out = str(highlight("Modular <b>arithmetic</b> & modules", ["modul", "b"]))
    assert (
        out == "<mark>Modul</mark>ar &lt;<mark>b</mark>&gt;arithmetic&lt;/<mark>b</mark>&gt; "
        "&amp; <mark>modul</mark>es"
    )
    assert str(highlight("<script>", [])) == "&lt;script&gt;"


# Templates draw a badge only through components.html (c.badge, c.verdict).


def test_no_template_draws_a_status_badge_by_hand() -> None:
    offenders = []
    for path in sorted(TEMPLATES_DIR.glob("*.html")):
        if path.name == "components.html":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r'class="badge[ "]', line):
                offenders.append(f"{path.name}:{n}: {line.strip()[:100]}")
    assert not offenders, "badges drawn by hand:\n" + "\n".join(offenders)


def test_the_home_page_marks_the_search_words(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "a", "alpha beta gamma", title="Alpha <i>title</i>")
    html = library.client.get("/", params={"q": "alpha"}).text
    assert "<mark>Alpha</mark> &lt;i&gt;title&lt;/i&gt;" in html


def test_audit_entries_read_as_sentences() -> None:
    from kvreg_registry.web.audit_sentences import links, sentence

    digest = "sha256:" + "cd" * 32
    hold = {"new": {"id": 3, "ref": "other", "digest": digest, "reason": "litigation hold"}}
    assert (
        sentence("hold.placed", "root", "aime25", hold, {})
        == "root placed a legal hold on aime25/other: litigation hold"
    )
    moved = {"old": "sha256:" + "ab" * 32, "new": digest, "details": {"ref": "aime25/p07"}}
    assert (
        sentence("ref.moved", "dana", "aime25", moved, {digest: "Problem 7"})
        == "dana moved aime25/p07 from sha256:abababababab… to “Problem 7”"
    )
    assert links("aime25", moved) == {
        "ref": "/ns/aime25/refs/p07",
        "artifact": f"/ns/aime25/artifacts/{digest}",
    }
    # an altered entry, or one with fields of the wrong kind, still reads as a sentence
    assert (
        sentence("hold.placed", None, None, {"new": ["odd"]}, {})
        == "someone placed a legal hold on the whole of the registry"
    )
    assert sentence("no.such.type", "x", "ns", {}, {}) == "x: no.such.type in ns"
    assert "not a JSON object" in sentence("ref.created", "x", "ns", None, {})


def test_the_audit_list_has_one_row_shape_with_sentences_and_links(library: Library) -> None:
    from .helpers import sign_in

    ns = library.namespace("team")
    library.publish(ns, "p07", "one two three four five six", title="Problem seven")
    sign_in(library.client, library.admin_token)
    html = library.client.get("/audit").text
    group = re.search(r'<tr class="push-group".*?</details>\s*</td>\s*</tr>', html, re.S)
    assert group is not None
    cells = re.findall(r'<td data-label="([^"]+)"', group.group(0).split("<table", 1)[0])
    assert cells == ["Seq", "Time", "Type", "Actor", "Namespace", "What happened"]
    assert f'<a href="/ns/{ns}">{ns}</a>' in group.group(0) and '<a href="/audit?actor=root">root</a>' in html
    assert f"root created the namespace {ns} (public)" in html


def test_a_chat_prompt_is_shown_as_the_question_asked() -> None:
    from kvreg_registry.web.render import question_text

    rendered = (
        "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n"
        "<|im_start|>user\nHow many eggs?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert question_text(rendered) == "How many eggs?"
    assert question_text("Plain question?") == "Plain question?"
    assert question_text(None) == ""


def test_an_audit_entry_page_opens_with_its_sentence(library: Library) -> None:
    from .helpers import sign_in

    ns = library.namespace("team")
    pushed = library.publish(ns, "p07", "one two three four five six", title="Problem seven")
    sign_in(library.client, library.admin_token)
    html = library.client.get("/audit", params={"type": "ref.created"}).text
    seq = re.findall(r'class="entry-link" href="/audit/entries/(\d+)"', html)[0]
    page = library.client.get(f"/audit/entries/{seq}").text
    sentence = re.search(r'<p id="entry-sentence"[^>]*>(.*?)</p>', page, re.S)
    assert sentence is not None and f"created the ref {ns}/p07 for" in sentence.group(1)
    assert f'href="/ns/{ns}/refs/p07"' in sentence.group(1)
    assert f'href="/ns/{ns}/artifacts/{pushed.digest}"' in sentence.group(1)
