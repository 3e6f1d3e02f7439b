"""The audit trail pages: ``/audit`` (entries, filters, the signed checkpoint),
``/audit/entries/{seq}`` (one entry and its verified inclusion proof) and
``/audit/export`` (the whole log with proofs, the file ``kvreg audit export`` writes).

The checkpoint is shown to everyone (the API serves it without a token). Every entry and
the export follow the API's rule for ``GET /api/v1/log/entries``: a signed-in visitor
(any valid token, whatever its roles), or anyone when the registry sets
``KVREG_LOG_PUBLIC=1``. Other visitors read the entries of public namespaces (list and
entry pages), as on Rekor; the export stays for signed-in users. The list hides the
low-level entries of pushes unless asked and folds each push into one row
(``web.audit_groups``). Queries and view models are in ``kvreg_registry.web.views_audit``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from sqlalchemy import select

from kvreg.core.errors import NotFoundError, UnauthenticatedError
from kvreg_registry.api.deps import state
from kvreg_registry.db.models import Namespace
from kvreg_registry.web import audit_export, audit_groups, audit_sentences, views_audit
from kvreg_registry.web.render import SECURITY_HEADERS, render
from kvreg_registry.web.session import Visitor, apply_cookies, visitor

router = APIRouter()

MAX_SEQ = 2**53


def _cursor(value: str | None) -> int | None:
    """A pagination cursor (an entry number); anything else is ignored."""
    if value is None or not value.isdigit() or len(value) > 16:
        return None
    return int(value)


def _sign_in_needed(request: Request, who: Visitor, what: str) -> HTMLResponse:
    """401 with a sign-in link (not a redirect: the address stays the one asked for)."""
    return render(
        request,
        who,
        "error.html",
        {
            "status": 401,
            "heading": "Sign-in needed",
            "message": f"On this registry, {what} needs a signed-in user.",
            "hint": "any API token of this registry may read its log; the signed checkpoint is on /audit",
            "code": UnauthenticatedError.code,
        },
        status=401,
        title="Sign-in needed",
    )


@router.get("/audit", response_class=HTMLResponse, include_in_schema=False)
def audit_page(request: Request) -> HTMLResponse:
    st = state(request)
    query = dict(request.query_params)
    filters, problems = views_audit.parse_filters(query)
    before, after = _cursor(query.get("before")), _cursor(query.get("after"))
    page = None
    groups: list[audit_groups.Group] = []
    with st.db.read() as s:
        who = visitor(s, request)
        allowed = views_audit.may_read_entries(who.principal, st.settings)
        if not problems:
            page = views_audit.list_entries(s, filters, before=before, after=after, public_only=not allowed)
            groups = audit_groups.group(page.rows, audit_groups.titles(s, page.rows))
    checkpoint = views_audit.latest_checkpoint(st.log)
    types = list(views_audit.KNOWN_TYPES)
    if filters.type and filters.type not in types:
        types.append(filters.type)
    return render(
        request,
        who,
        "audit.html",
        {
            "allowed": allowed,
            "groups": groups,
            "low_level": views_audit.LOW_LEVEL_TYPES,
            "filters": filters,
            "params": filters.params(),
            "problems": problems,
            "page": page,
            "types": types,
            "cp": checkpoint,
            "paged": before is not None or after is not None,
        },
        status=400 if problems else 200,
        title="Audit trail",
    )


@router.get("/audit/entries/{seq}", response_class=HTMLResponse, include_in_schema=False)
def entry_page(seq: int, request: Request) -> HTMLResponse:
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        public_only = not views_audit.may_read_entries(who.principal, st.settings)
        if not 0 <= seq <= MAX_SEQ:
            raise NotFoundError(f"the audit log has no entry {seq}")
        detail = views_audit.entry_detail(s, st.log, seq, public_only=public_only)
        if public_only and not (
            detail.namespace
            and s.scalar(select(Namespace.public).where(Namespace.name == detail.namespace)) is True
        ):
            return _sign_in_needed(request, who, "reading an entry that is not about a public namespace")
    # The checkpoint after the entry was read: it includes it.
    checkpoint = views_audit.latest_checkpoint(st.log)
    with st.db.read() as s:
        views_audit.prove_entry(s, st.log, detail, checkpoint.checkpoint if checkpoint.verified else None)
    return render(
        request,
        who,
        "audit_entry.html",
        {
            "e": detail,
            "cp": checkpoint,
            "sentence": audit_sentences.sentence(detail.type, detail.actor, detail.namespace, detail.doc, {}),
            "links": audit_sentences.links(detail.namespace, detail.doc),
        },
        title=f"Audit entry {seq}",
    )


@router.get("/audit/export", include_in_schema=False)
def export_download(request: Request) -> Response:
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
    if not views_audit.may_read_entries(who.principal, st.settings):
        return _sign_in_needed(request, who, "exporting the audit log")
    export = audit_export.export_stream(st.db, st.log, str(request.base_url).rstrip("/"))
    headers = {
        **SECURITY_HEADERS,
        "Content-Disposition": f'attachment; filename="{export.filename}"',
        "X-Kvreg-Log-Size": str(export.checkpoint.size),
    }
    response = StreamingResponse(export.body, media_type="application/x-ndjson", headers=headers)
    apply_cookies(response, who, request, st.settings)
    return response
