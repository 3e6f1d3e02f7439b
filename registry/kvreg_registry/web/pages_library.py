"""The library's pages: home and search (``/``), and a namespace (``/ns/{ns}``).

Search runs in the database (``kvreg_registry.services.search``: full-text index,
filters, LIMIT/OFFSET and the total in SQL); this module only parses the query
string and shapes the page. The namespace page lists the namespace's artifacts and
refs (both paginated in SQL), its signing keys, retention policy and legal-hold
status; the details of holds (reasons, who placed them) are shown to the
namespace's admins only, as the API does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kvreg.core.errors import RequestInvalidError
from kvreg_registry.api.deps import state
from kvreg_registry.db.models import Envelope, LegalHold, Namespace, Ref, SigningKey
from kvreg_registry.services import accounts, retention
from kvreg_registry.services import search as search_service
from kvreg_registry.web.render import render
from kvreg_registry.web.session import visitor

router = APIRouter()

PAGE_SIZE = 20
MAX_PAGE = 10_000
MAX_QUERY_CHARS = 200


@dataclass(frozen=True)
class Pager:
    page: int
    size: int
    total: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def has_prev(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages

    @property
    def first_shown(self) -> int:
        return 0 if self.total == 0 else self.offset + 1

    @property
    def last_shown(self) -> int:
        return min(self.total, self.offset + self.size)


def _page_number(value: str | None) -> int:
    if not value:
        return 1
    if not value.isdigit() or not 1 <= int(value) <= MAX_PAGE:
        raise RequestInvalidError(f"page must be a number from 1 to {MAX_PAGE}")
    return int(value)


def _clean(value: str | None, limit: int = MAX_QUERY_CHARS) -> str:
    text = (value or "").strip()
    if len(text) > limit:
        raise RequestInvalidError(f"a search field is limited to {limit} characters")
    return text


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def home(request: Request) -> HTMLResponse:
    params = {
        k: _clean(request.query_params.get(k))
        for k in ("q", "namespace", "model", "verifier", "verdict", "since", "until")
    }
    page = _page_number(request.query_params.get("page"))
    query = search_service.Query(
        namespace=params["namespace"] or None,
        model=params["model"] or None,
        verifier=params["verifier"] or None,
        verdict=params["verdict"] or None,
        text=params["q"] or None,
        since=search_service.parse_time(params["since"]),
        until=search_service.parse_time(params["until"], end_of_day=True),
        limit=PAGE_SIZE,
        offset=(page - 1) * PAGE_SIZE,
    )
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        rows, total = search_service.search(s, who.principal, query)
        facets = search_service.facets(s, who.principal)
    searched = any(params.values())
    return render(
        request,
        who,
        "home.html",
        {
            "params": params,
            "results": rows,
            "pager": Pager(page, PAGE_SIZE, total),
            "facets": facets,
            "searched": searched,
        },
        title=f"Search: {params['q']}" if params["q"] else "Verified solutions",
    )


def _namespace_view(s: Session, ns: Namespace, page: int, refs_page: int, is_admin: bool) -> dict[str, Any]:
    total = s.scalar(select(func.count()).select_from(Envelope).where(Envelope.namespace_id == ns.id)) or 0
    artifacts = s.scalars(
        select(Envelope)
        .where(Envelope.namespace_id == ns.id)
        .order_by(Envelope.created_at.desc(), Envelope.manifest_digest)
        .limit(PAGE_SIZE)
        .offset((page - 1) * PAGE_SIZE)
    ).all()
    refs_total = s.scalar(select(func.count()).select_from(Ref).where(Ref.namespace_id == ns.id)) or 0
    ref_rows = s.execute(
        select(Ref, Envelope.title)
        .join(
            Envelope,
            (Envelope.namespace_id == Ref.namespace_id) & (Envelope.manifest_digest == Ref.manifest_digest),
        )
        .where(Ref.namespace_id == ns.id)
        .order_by(Ref.name)
        .limit(PAGE_SIZE)
        .offset((refs_page - 1) * PAGE_SIZE)
    ).all()
    keys = s.scalars(
        select(SigningKey).where(SigningKey.namespace_id == ns.id).order_by(SigningKey.created_at)
    ).all()
    holds = s.scalars(
        select(LegalHold)
        .where(LegalHold.namespace_id == ns.id, LegalHold.lifted_at.is_(None))
        .order_by(LegalHold.id)
        .limit(100)
    ).all()
    return {
        "artifacts": artifacts,
        "pager": Pager(page, PAGE_SIZE, total),
        "refs": ref_rows,
        "refs_pager": Pager(refs_page, PAGE_SIZE, refs_total),
        "keys": keys,
        "policy": retention.get_policy(s, ns),
        "holds": holds,
        "show_hold_details": is_admin,
    }


@router.get("/ns/{ns}", response_class=HTMLResponse, include_in_schema=False)
def namespace_page(request: Request, ns: str) -> HTMLResponse:
    page = _page_number(request.query_params.get("page"))
    refs_page = _page_number(request.query_params.get("refs_page"))
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        namespace = accounts.readable_namespace(s, who.principal, ns)
        role = who.principal.role_in(s, namespace)
        view = _namespace_view(s, namespace, page, refs_page, role == "admin")
    return render(
        request,
        who,
        "namespace.html",
        {"ns": namespace, "role": role, "page": page, "refs_page": refs_page, **view},
        title=namespace.name,
    )
