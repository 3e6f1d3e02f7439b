"""Rendering pages: the Jinja2 environment, its filters, and the headers every page gets.

Autoescaping is on for every template (``.html``), so text from an artifact — a
title, a question, the solution text, evidence — is always shown as text, never as
markup; templates must not use ``|safe`` on anything that came from a manifest or
a request. Pages get a strict Content-Security-Policy (no inline script, no
third-party origin), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy`` and
``frame-ancestors 'none'``.

This module knows nothing about the database; each page module queries what it
shows and hands a context to :func:`render`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

import kvreg
from kvreg_registry.web import components, glossary
from kvreg_registry.web.components import format_time, iso_time, relative_time
from kvreg_registry.web.markdown import plain_summary, render_markdown
from kvreg_registry.web.model_summary import listing_name
from kvreg_registry.web.session import CSRF_FIELD, Visitor, apply_cookies
from kvreg_registry.web.status import tone_of, verdict_status

HERE = Path(__file__).parent
TEMPLATES_DIR = HERE / "templates"
STATIC_DIR = HERE / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def short_digest(value: object, n: int = 12) -> str:
    """``sha256:0123456789ab…`` — the prefix people compare by eye."""
    text = str(value or "")
    if text.startswith("sha256:") and len(text) > 7 + n:
        return text[: 7 + n] + "…"
    return text


def human_size(n: object) -> str:
    if not isinstance(n, int):
        return "–"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def highlight(value: object, words: list[str]) -> Markup:
    """``value`` as escaped text with each search word (at the start of a word, any case) in
    ``<mark>``. Every piece is escaped on its own, so the result is as safe as autoescaping;
    hand-written because the search's own words (``search.query_words``) decide what matched."""
    text = "" if value is None else str(value)
    if not words or not text:
        return escape(text)
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + ")", re.IGNORECASE)
    out: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        out += [escape(text[last : m.start()]), Markup("<mark>"), escape(m.group(0)), Markup("</mark>")]
        last = m.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


_CHATML_USER = re.compile(r"<\|im_start\|>user\s*(.*?)(?:<\|im_end\|>|$)", re.S)


def question_text(value: object) -> str:
    """A question as a person asked it: for a prompt rendered with a ChatML chat template
    (SmolLM2, Qwen: ``<|im_start|>user ... <|im_end|>``), the last user turn; else the text."""
    text = "" if value is None else str(value)
    turns = _CHATML_USER.findall(text) if "<|im_start|>" in text else []
    return turns[-1].strip() if turns else text


def pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=select_autoescape(["html"], default_for_string=True, default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = short_digest
    env.filters["size"] = human_size
    env.filters["time"] = format_time
    env.filters["json"] = pretty_json
    env.filters["isotime"] = iso_time
    env.filters["highlight"] = highlight
    env.filters["question_text"] = question_text
    env.filters["ago"] = relative_time
    env.globals["ui_badge"] = components.badge
    env.globals["ui_verdict"] = components.verdict
    env.globals["ui_time"] = components.time
    env.globals["status_tone"] = tone_of
    env.globals["verdict_status"] = verdict_status
    env.filters["model_name"] = listing_name
    env.filters["markdown"] = render_markdown  # sanitized (web.markdown): the one unescaped user text
    env.filters["summary"] = plain_summary
    env.globals["glossary_short"] = glossary.short
    env.globals["glossary_word"] = glossary.word
    env.globals["listing_name"] = listing_name
    env.globals["version"] = kvreg.__version__
    env.globals["csrf_field"] = CSRF_FIELD
    return env


ENV = _environment()


def query_url(path: str, params: dict[str, Any], **changes: Any) -> str:
    """``path`` with ``params`` updated by ``changes``; empty values are dropped (pagination links)."""
    merged = {**params, **changes}
    kept = {k: v for k, v in merged.items() if v not in (None, "", False)}
    return f"{path}?{urlencode(kept)}" if kept else path


ENV.globals["query_url"] = query_url


def render(
    request: Request,
    who: Visitor,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    title: str | None = None,
) -> HTMLResponse:
    """The page ``template`` for ``who``, with the security headers and any cookie to set."""
    settings = request.app.state.registry.settings
    body = ENV.get_template(template).render(
        request=request,
        who=who,
        principal=who.principal,
        csrf_token=who.csrf_token,
        page_title=title,
        **context,
    )
    response = HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)
    apply_cookies(response, who, request, settings)
    return response


def with_security_headers(response: Response) -> Response:
    for k, v in SECURITY_HEADERS.items():
        response.headers.setdefault(k, v)
    return response
