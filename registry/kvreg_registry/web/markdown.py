"""Markdown written by users (a namespace's description) rendered to HTML that is safe to show.

Two well-kept libraries, one after the other, so that a flaw in either alone lets nothing
through:

1. ``markdown-it-py`` (CommonMark, plus GitHub's tables and strikethrough) with raw HTML
   **off**: ``<script>`` or ``<iframe>`` typed in the text comes out as escaped text, and
   its link validator drops ``javascript:``, ``vbscript:``, ``file:`` and ``data:`` URLs
   (but images) before anything is rendered. Headings are moved down two levels
   (``#`` becomes ``<h3>``): the description sits under the page's own ``<h1>``/``<h2>``.
2. ``nh3`` (the Rust ``ammonia`` sanitizer) then keeps only the tags and attributes in
   :data:`TAGS` and :data:`ATTRIBUTES`, links only to ``http``, ``https`` and ``mailto``
   URLs (or relative ones), each with ``rel="nofollow noopener noreferrer"``. Images are
   not kept: the pages' Content-Security-Policy would not load a remote one anyway, and a
   description must not make readers' browsers fetch from elsewhere.

:func:`render_markdown` returns :class:`markupsafe.Markup`, the one way user text reaches a
template unescaped (the ``markdown`` filter of ``web.render``).
"""

from __future__ import annotations

from functools import lru_cache
from html import unescape

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

TAGS = frozenset(
    {
        "p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "blockquote",
        "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
    }
)  # fmt: skip
# No ``style``: the pages' Content-Security-Policy refuses inline styles (a table's column
# alignment is dropped with it).
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
HEADING_SHIFT = 2

_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)


def _cleaned(html: str) -> str:
    return nh3.clean(
        html,
        tags=set(TAGS),
        attributes={k: set(v) for k, v in ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="nofollow noopener noreferrer",
        strip_comments=True,
    )


@lru_cache(maxsize=256)
def render_markdown(text: str) -> Markup:
    """``text`` (Markdown) as sanitized HTML; an empty text gives an empty string."""
    if not text.strip():
        return Markup("")
    tokens = _MD.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + HEADING_SHIFT)}"
    html = _MD.renderer.render(tokens, _MD.options, {})
    # nh3's output holds only the allowed tags with escaped text: markup by construction.
    return Markup(_cleaned(html))  # noqa: S704


def plain_summary(text: str, limit: int = 160) -> str:
    """The first paragraph of ``text`` as plain words (for lists of namespaces), cut at ``limit``."""
    html = _MD.render(text.strip().split("\n\n", 1)[0]) if text.strip() else ""
    # nh3 with no tags kept: the text alone, its entities still escaped; html.unescape gives the words.
    words = unescape(" ".join(nh3.clean(html, tags=set()).split()))
    return words if len(words) <= limit else words[: limit - 1].rstrip() + "…"
