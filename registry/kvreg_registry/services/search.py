"""Listing and searching the envelopes a caller may read: full-text matching, filters and
pagination, all in SQL; and the values of the filters (facets).

**The searchable text** of each envelope row (``search_text``) is made by
``services.search_text``; a query is split into words with the same function
(``search_text.words``), so that both backends' tokenizers only ever see plain words
split by spaces. ``services.search_index`` rewrites the fields of every envelope.

**The index.** Migration ``0004`` made it:

- PostgreSQL: a stored generated column ``search_vector`` =
  ``to_tsvector('simple', search_text)`` with a GIN index, queried with
  ``search_vector @@ to_tsquery('simple', "'w1':* & 'w2':*")``;
- SQLite: an FTS5 external-content table ``envelopes_fts`` (content ``envelopes``,
  by ``rowid``; tokenizer ``ascii``, which splits on ASCII non-alphanumerics only,
  so a normalized word is one token) kept in step by triggers, queried with
  ``rowid IN (SELECT rowid FROM envelopes_fts WHERE envelopes_fts MATCH '"w1"* AND "w2"*')``.

Every word of the query must occur as a prefix of some word of the artifact (AND of
prefix terms). Words hold only letters, digits and marks, so a term can contain no
quote, operator or column filter: no input can cause an SQL or FTS syntax error,
and text with no searchable words adds no text filter. Results are newest first,
paginated with LIMIT/OFFSET; the total is a ``count(*)`` with the same filters.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    exists,
    false,
    func,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy.orm import Session

from kvreg.core.errors import RequestInvalidError
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope, Namespace, Ref, Role
from kvreg_registry.services.search_text import words

log = logging.getLogger(__name__)

MAX_LIMIT = 200
#: At most this many values per facet (namespaces, models, verifiers, verdicts).
MAX_FACETS = 200
#: Words of a query beyond this many are ignored.
MAX_QUERY_WORDS = 20

FTS_TABLE = "envelopes_fts"  # SQLite (migration 0004)
PG_INDEX = "ix_envelopes_fulltext"  # PostgreSQL (migration 0004)


# --- query words ---------------------------------------------------------------------------------


def query_words(value: str | None) -> list[str]:
    """The distinct words of a query, at most ``MAX_QUERY_WORDS``."""
    return list(dict.fromkeys(words(value or "")))[:MAX_QUERY_WORDS]


# --- queries ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    namespace: str | None = None
    model: str | None = None
    verifier: str | None = None
    verdict: str | None = None
    text: str | None = None
    limit: int = 50
    offset: int = 0
    #: Only envelopes stored at or after ``since`` and before ``until`` (timezone-aware).
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def parse_time(value: str | None, *, end_of_day: bool = False) -> dt.datetime | None:
    """``YYYY-MM-DD`` (midnight UTC; with ``end_of_day`` the next midnight, so that an
    exclusive ``until`` includes that whole day) or an ISO 8601 datetime (UTC if it
    has no offset); empty → None; anything else → ``RequestInvalidError``."""
    if value is None or not value.strip():
        return None
    raw = value.strip()
    try:
        if len(raw) == 10:
            day = dt.date.fromisoformat(raw)
            moment = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
            return moment + dt.timedelta(days=1) if end_of_day else moment
        moment = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
        if moment.tzinfo is None:
            return moment.replace(tzinfo=dt.UTC)
        return moment.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise RequestInvalidError(
            f"{value[:40]!r} is not a date or time", hint="use YYYY-MM-DD or an ISO 8601 datetime"
        ) from None


def _visible(principal: Principal) -> Any:
    if principal.is_admin:
        return True
    if principal.user_id is None:
        return Namespace.public.is_(True)
    has_role = exists().where(Role.namespace_id == Namespace.id, Role.user_id == principal.user_id)
    return or_(Namespace.public.is_(True), has_role)


def visible_condition(principal: Principal) -> Any:
    """The SQL condition on ``Namespace`` that the namespaces ``principal`` may read satisfy
    (``True`` for a server admin: no condition). The web UI's artifact page reuses it."""
    return _visible(principal)


def _text_match(dialect: str, terms: list[str], *, steer: bool = False) -> ColumnElement[bool]:
    """The full-text condition on ``envelopes`` for words made by :func:`words` (letters,
    digits and marks only, so quoting them cannot break out of a term).

    SQLite, ``steer``: written ``+envelopes.rowid IN (...)``. The unary ``+`` keeps the
    planner from fetching every match by rowid to sort them (a common word: thousands of
    large rows read); it walks the ``created_at`` index newest first instead and stops
    after a page, testing each entry's rowid against the matches."""
    if dialect == "postgresql":
        tsquery = " & ".join(f"'{w}':*" for w in terms)
        return literal_column("envelopes.search_vector").bool_op("@@")(
            func.to_tsquery(literal_column("'simple'"), bindparam("fts_query", tsquery))
        )
    if dialect == "sqlite":
        match = " AND ".join(f'"{w}"*' for w in terms)
        hits: Select[Any] = (
            select(literal_column("rowid"))
            .select_from(text(FTS_TABLE))
            .where(text("envelopes_fts MATCH :fts_query").bindparams(fts_query=match))
        )
        return literal_column("+envelopes.rowid" if steer else "envelopes.rowid").in_(hits)
    raise NotImplementedError(f"full-text search on {dialect!r}")


def _equals(column: Any, value: str) -> ColumnElement[bool]:
    # PostgreSQL cannot even compare a string holding NUL, and no stored value holds one.
    return false() if "\x00" in value else column == value


def _in_namespaces(principal: Principal, name: str | None = None) -> ColumnElement[bool] | None:
    """``envelopes.namespace_id IN (the namespaces principal may read [named name])``, or None.

    A subquery rather than a join, so that the planner can answer from indexes of
    ``envelopes`` that hold ``namespace_id`` (the facets index) and keep the newest-first
    index walk of a page."""
    conditions = []
    visible = _visible(principal)
    if visible is not True:
        conditions.append(visible)
    if name:
        conditions.append(_equals(Namespace.name, name))
    if not conditions:
        return None
    return Envelope.namespace_id.in_(select(Namespace.id).where(*conditions))


def _conditions(q: Query, principal: Principal, dialect: str, *, steer: bool = False) -> list[Any]:
    """The WHERE conditions on ``envelopes`` alone for ``q`` as ``principal`` sees it."""
    out: list[Any] = []
    namespaces = _in_namespaces(principal, q.namespace)
    if namespaces is not None:
        out.append(namespaces)
    if q.model:
        out.append(or_(_equals(Envelope.model_fingerprint, q.model), _equals(Envelope.model_name, q.model)))
    if q.verifier:
        out.append(_equals(Envelope.verifier, q.verifier))
    if q.verdict:
        out.append(_equals(Envelope.verdict, q.verdict))
    if q.since is not None:
        out.append(Envelope.created_at >= q.since)
    if q.until is not None:
        out.append(Envelope.created_at < q.until)
    terms = query_words(q.text)
    if terms:
        out.append(_text_match(dialect, terms, steer=steer))
    return out


@contextmanager
def _index_scans(session: Session, on: bool) -> Iterator[None]:
    """PostgreSQL: no sequential scan of ``envelopes`` for a full-text search (``SET LOCAL
    enable_seqscan = off`` for the count and the page, reset after).

    The planner does not cost reading a row's ``search_vector`` back from TOAST (about 6 us
    each, for a vector of a few KB), so for a word in many rows it prefers reading every row
    (60 ms at 10,000 artifacts) to the GIN index (9 ms); the index paths it has left are the
    GIN bitmap and the ``created_at`` index (newest first, which stops after a page)."""
    if not on:
        yield
        return
    session.execute(text("SET LOCAL enable_seqscan = off"))
    yield
    # (After an error the transaction is rolled back, which undoes SET LOCAL anyway.)
    session.execute(text("RESET enable_seqscan"))


def search(
    session: Session, principal: Principal, q: Query
) -> tuple[list[tuple[Envelope, str, list[str]]], int]:
    """The matching envelopes (newest first) with their namespace name and ref names, and the
    total: three statements whatever the library's size (count, page, the page's refs; and on
    PostgreSQL two more around a text search, see ``_index_scans``).

    On SQLite the page is found in two steps within one statement: the rowids of the page
    (``created_at`` index, few columns), then those rows; sorting whole rows, which carry
    their envelope (kilobytes each), would read every match in full."""
    dialect = session.get_bind().dialect.name
    limit = max(1, min(q.limit, MAX_LIMIT))
    offset = max(0, q.offset)
    newest_first = (Envelope.created_at.desc(), Envelope.manifest_digest)
    total_stmt = select(func.count()).select_from(Envelope).where(*_conditions(q, principal, dialect))
    page_stmt = select(Envelope, Namespace.name).join(Namespace, Namespace.id == Envelope.namespace_id)
    if dialect == "sqlite":
        keys: Select[Any] = (
            select(literal_column("envelopes.rowid"))
            .select_from(Envelope)
            .where(*_conditions(q, principal, dialect, steer=True))
            .order_by(*newest_first)
            .limit(limit)
            .offset(offset)
        )
        page_stmt = page_stmt.where(literal_column("envelopes.rowid").in_(keys)).order_by(*newest_first)
    else:
        page_stmt = (
            page_stmt.where(*_conditions(q, principal, dialect))
            .order_by(*newest_first)
            .limit(limit)
            .offset(offset)
        )
    with _index_scans(session, dialect == "postgresql" and bool(query_words(q.text))):
        total = session.scalar(total_stmt) or 0
        rows = session.execute(page_stmt).all()
    refs: dict[tuple[int, str], list[str]] = {}
    if rows:
        keys_of_rows = [(e.namespace_id, e.manifest_digest) for e, _ in rows]
        conditions = [and_(Ref.namespace_id == a, Ref.manifest_digest == b) for a, b in keys_of_rows]
        for r in session.scalars(select(Ref).where(or_(*conditions)).order_by(Ref.name)).all():
            refs.setdefault((r.namespace_id, r.manifest_digest), []).append(r.name)
    return [(e, name, refs.get((e.namespace_id, e.manifest_digest), [])) for e, name in rows], total


@dataclass(frozen=True)
class Facets:
    """The values the search filters offer: the namespaces the caller can read, and the
    distinct model names, verifiers and verdicts of the envelopes in them (each sorted, at
    most ``MAX_FACETS``)."""

    namespaces: list[str]
    models: list[str]
    verifiers: list[str]
    verdicts: list[str]


def facets(session: Session, principal: Principal) -> Facets:
    """Four statements: one per facet, each DISTINCT ... LIMIT ``MAX_FACETS`` in SQL, answered
    from indexes (the namespaces as a subquery: see ``_in_namespaces``)."""
    visible = _visible(principal)
    namespaces = _in_namespaces(principal)

    def distinct(column: Any) -> list[str]:
        stmt = select(column).distinct().where(column.is_not(None), column != "")
        if namespaces is not None:
            stmt = stmt.where(namespaces)
        return list(session.scalars(stmt.order_by(column).limit(MAX_FACETS)).all())

    names = select(Namespace.name).order_by(Namespace.name).limit(MAX_FACETS)
    return Facets(
        namespaces=list(session.scalars(names if visible is True else names.where(visible)).all()),
        models=distinct(Envelope.model_name),
        verifiers=distinct(Envelope.verifier),
        verdicts=distinct(Envelope.verdict),
    )


# --- rebuilding ------------------------------------------------------------------------------------
