"""The compare page (``/compare?a=NS/REF&b=NS/sha256:…``): two artifacts side by side.

Shows how much of their KV cache two artifacts share (leading equal full blocks,
with the Merkle consistency proof checked), the length of their common token
prefix (from the tokens objects), and where their texts diverge. Both must be
readable by the visitor (404 otherwise). See ``kvreg_registry.web.views_compare``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from kvreg_registry.api.deps import state
from kvreg_registry.web import views_compare
from kvreg_registry.web.render import render
from kvreg_registry.web.session import visitor

router = APIRouter()


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
def compare_page(request: Request, a: str = "", b: str = "") -> HTMLResponse:
    st = state(request)
    a, b = a.strip(), b.strip()
    with st.db.read() as s:
        who = visitor(s, request)
        sides = views_compare.load_sides(s, who.principal, a, b) if a and b else None
    result = views_compare.compare(st.storage, *sides) if sides is not None else None
    title = f"Compare {result.a.title} and {result.b.title}" if result is not None else "Compare artifacts"
    return render(
        request,
        who,
        "compare.html",
        {"a": a, "b": b, "c": result, "limits": views_compare},
        title=title,
    )
