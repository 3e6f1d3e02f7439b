"""The glossary page (/glossary) and the explanations of jargon where the pages use it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from kvreg_registry.web import glossary
from kvreg_registry.web.render import TEMPLATES_DIR

from .library import Library

# The words the pages used without help (each must have an entry and be explained where shown).
JARGON = {
    "kv-heads": "KV heads",
    "witness": "Witness",
    "no-logits-check": "No logits check",
    "leaf-hash": "SHA-256(0x00 ‖ …)",
    "verdict": "Verdict",
    "byte-exact": "Byte-exact",
    "graft": "Graft",
    "receipt": "Graft receipt",
}


def test_the_glossary_page_has_an_anchor_and_an_explanation_per_term(library: Library) -> None:
    r = library.client.get("/glossary")
    assert r.status_code == 200
    page = r.text
    for term in glossary.TERMS:
        match = re.search(rf'<dt id="{term.id}">(.*?)</dt>\s*<dd>(.*?)</dd>', page, re.S)
        assert match is not None, term.id
        assert html.unescape(re.sub(r"<[^>]+>", "", match.group(1))).strip() == term.word
        assert html.unescape(term.short) in html.unescape(match.group(2))
        for other in term.see:
            assert f'href="#{other}"' in match.group(2)
        assert f'<a href="#{term.id}">' in page  # the index at the top
    for term_id, word in JARGON.items():
        assert glossary.BY_ID[term_id].word == word


def test_every_term_a_template_explains_is_in_the_glossary() -> None:
    used = set()
    for path in Path(TEMPLATES_DIR).glob("*.html"):
        used |= set(re.findall(r'x\.(?:term|whatis)\("([a-z0-9-]+)"', path.read_text()))
    assert used, "no template explains a term"
    assert used <= set(glossary.BY_ID), used - set(glossary.BY_ID)
    # The artifact page explains the jargon it shows (the audit pages have their own).
    artifact = (Path(TEMPLATES_DIR) / "artifact.html").read_text()
    for term_id in ("kv-heads", "witness", "no-logits-check", "verdict", "byte-exact", "receipt"):
        assert f'x.term("{term_id}"' in artifact or f'x.whatis("{term_id}"' in artifact, term_id
    for term in glossary.TERMS:
        assert term.see == tuple(s for s in term.see if s in glossary.BY_ID), term.id
