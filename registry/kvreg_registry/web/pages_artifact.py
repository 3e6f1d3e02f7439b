"""The artifact page (``/ns/{ns}/artifacts/{digest}``) and refs (``/ns/{ns}/refs/{ref}``: a redirect).

The page shows one signed artifact: its question and verified solution text, the
verification and the signature checked again now, its fingerprints, chunks (and
which other artifacts the visitor can read hold them), prefix relations checked
with Merkle consistency proofs, graft receipts, refs, history, and the commands to
pull it. The queries and view model are in ``kvreg_registry.web.views_artifact``.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from kvreg_registry.api.deps import state
from kvreg_registry.web import lookup, views_artifact
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import apply_cookies, visitor

router = APIRouter()


def base_url(request: Request) -> str:
    """This server's address as ``kvreg remote add`` takes it."""
    return str(request.base_url).rstrip("/")


@router.get("/ns/{ns}/artifacts/{digest}", response_class=HTMLResponse, include_in_schema=False)
def artifact_page(ns: str, digest: str, request: Request) -> HTMLResponse:
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        view = views_artifact.artifact_view(s, who.principal, ns, digest)
    views_artifact.add_contents(st.storage, view)
    return render(
        request,
        who,
        "artifact.html",
        {"a": view, "base_url": base_url(request), "limits": views_artifact},
        title=view.title,
    )


@router.get("/ns/{ns}/refs/{ref:path}", include_in_schema=False)
def ref_page(ns: str, ref: str, request: Request) -> RedirectResponse:
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        namespace = lookup.readable_namespace(s, who.principal, ns)
        digest = lookup.ref_digest(s, namespace, ref)
    response = RedirectResponse(
        lookup.artifact_url(quote(namespace.name), str(digest)),
        status_code=303,
        headers=SECURITY_HEADERS,
    )
    apply_cookies(response, who, request, st.settings)
    return response
