"""The library's pages: home and search (``/``), the namespace list (``/ns``) and a
namespace (``/ns/{ns}``).

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
from markupsafe import Markup
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kvreg.core.errors import RequestInvalidError
from kvreg_registry.api.deps import state
from kvreg_registry.db.models import Envelope, LegalHold, Namespace, SigningKey
from kvreg_registry.services import accounts, retention
from kvreg_registry.services import search as search_service
from kvreg_registry.web import svg_lineage, svg_timeline, views_library
from kvreg_registry.web.model_summary import listing_name
from kvreg_registry.web.render import render
from kvreg_registry.web.session import visitor

router = APIRouter()

PAGE_SIZE = 20
# The home page draws its growth chart from this many days with activity on.
MIN_CHART_DAYS = 3
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


def timeline(days: list[tuple[str, int, int]]) -> Markup | None:
    """The growth chart, once there are ``MIN_CHART_DAYS`` days with activity: with fewer, bars
    and a running total say nothing that one sentence does not (the page says that instead)."""
    return svg_timeline.render(days) if len(days) >= MIN_CHART_DAYS else None


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def home(request: Request) -> HTMLResponse:
    params = {
        k: _clean(request.query_params.get(k))
        for k in ("q", "namespace", "model", "verifier", "verdict", "since", "until")
    }
    page = _page_number(request.query_params.get("page"))
    # Text with no searchable word (only punctuation, an emoji) matches nothing, rather than
    # being dropped and listing everything.
    no_words = bool(params["q"]) and not search_service.query_words(params["q"])
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
    searched = any(params.values())
    st = state(request)
    overview = None
    with st.db.read() as s:
        who = visitor(s, request)
        rows, total = ([], 0) if no_words else search_service.search(s, who.principal, query)
        facets = search_service.facets(s, who.principal)
        if not searched and page == 1:
            overview = views_library.overview(s, who.principal)
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
            "no_words": no_words,
            "filtered": any(v for k, v in params.items() if k != "q"),
            "filters_set": sum(1 for k, v in params.items() if k != "q" and v),
            "model_options": [(m, listing_name(m)) for m in facets.models],
            "words": search_service.query_words(params["q"]),
            "overview": overview,
            "timeline": timeline(overview.days) if overview else None,
            "min_chart_days": MIN_CHART_DAYS,
        },
        title=f"Search: {params['q']}" if params["q"] else "Verified solutions",
    )


@router.get("/ns", response_class=HTMLResponse, include_in_schema=False)
def namespaces_page(request: Request) -> HTMLResponse:
    page = _page_number(request.query_params.get("page"))
    name = _clean(request.query_params.get("q"), limit=64)
    st = state(request)
    with st.db.read() as s:
        who = visitor(s, request)
        rows, total = views_library.namespace_summaries(s, who.principal, page=page, name_filter=name)
    return render(
        request,
        who,
        "namespaces.html",
        {
            "namespaces": rows,
            "pager": Pager(page, views_library.NAMESPACES_PER_PAGE, total),
            "q": name,
        },
        title="Namespaces",
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
    ref_rows, refs_total = views_library.refs_page(s, ns.id, refs_page, PAGE_SIZE)
    keys = s.scalars(
        select(SigningKey).where(SigningKey.namespace_id == ns.id).order_by(SigningKey.created_at)
    ).all()
    holds = s.scalars(
        select(LegalHold)
        .where(LegalHold.namespace_id == ns.id, LegalHold.lifted_at.is_(None))
        .order_by(LegalHold.id)
        .limit(100)
    ).all()
    lineage = views_library.lineage(s, ns.id)
    placed = svg_lineage.layout(
        [n.digest for n in lineage.nodes],
        lineage.edges,
        {n.digest: n.title or n.digest[7:19] for n in lineage.nodes},
    )
    return {
        "lineage": lineage,
        "lineage_rows": placed,
        "lineage_svg": (
            svg_lineage.render(placed, lambda d: f"/ns/{ns.name}/artifacts/{d}") if placed else None
        ),
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
