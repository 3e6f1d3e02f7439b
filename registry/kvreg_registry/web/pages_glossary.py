"""The glossary page (``/glossary``): the web UI's jargon in plain terms, one anchor per term.

The terms are ``web.glossary.TERMS``; the pages explain them where they appear with the
``term`` macro of ``templates/explain.html`` (hover text and a link to the anchor here).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from kvreg_registry.api.deps import state
from kvreg_registry.web.glossary import BY_ID, TERMS
from kvreg_registry.web.render import render
from kvreg_registry.web.session import visitor

router = APIRouter()


@router.get("/glossary", response_class=HTMLResponse, include_in_schema=False)
def glossary_page(request: Request) -> HTMLResponse:
    with state(request).db.read() as s:
        who = visitor(s, request)
    return render(request, who, "glossary.html", {"terms": TERMS, "by_id": BY_ID}, title="Glossary")
