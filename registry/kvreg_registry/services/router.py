"""The registry's router: which stored artifacts share the longest block-aligned prefix with
a prompt, found by the prompt's block keys (``POST /api/v1/route``, docs/design.md, "Flows").

The client computes the block keys of its prompt (``kvreg.core.blockkey``: key ``i``
names the model, tokenizer, config and every token up to the end of block ``i``) and
sends them with its engine's fingerprints and block size; tokens never leave it. The
registry keeps the key of every block of every envelope (``envelope_blocks``, written
by ``services.envelopes.store``, gone with the envelope) and answers, among the
envelopes of the namespaces the caller may read (the rule of search:
``search.visible_condition``) made with those fingerprints and that block size:

- ``matched_blocks``: the number of leading prompt keys the artifact holds *at the
  same index* — key ``i`` of the prompt stored as block ``i``. Keys chain, so the
  largest such ``i`` gives ``i + 1``; a key stored at another index counts for nothing
  (the semantics of the local index, ``kvreg.store.router_index`` with
  ``kvreg.engine.router``);
- with no keys (a prompt shorter than one block), every such artifact, with
  ``matched_blocks`` 0.

Order: ``matched_blocks`` descending, verdict ``pass`` first, newest first (the
registry's ``created_at``), then by digest; at most ``limit`` candidates. Each
candidate carries its namespace, digest, the names of the refs of that namespace
that point at it, and what the client filters on. Two statements in all, whatever the
library's size: the candidates, then their refs. The keys travel as one parameter, a
table of ``(key, index)`` (PostgreSQL ``unnest ... WITH ORDINALITY``, SQLite
``json_each``) joined to ``ix_envelope_blocks_block_key``: the work grows with the
number of stored blocks that hold one of the keys (a block 0 that every artifact
shares makes every artifact of the engine a candidate, aggregated then cut to
``limit``), not with the size of the library.

This module only reads. It does not check signatures, trust or tokens: the block keys
are what each signed manifest says, and the client opens every candidate through its
trust policy and compares tokens before any graft. It writes no audit entry (a route
is a read, like search).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, String, and_, bindparam, case, func, literal, or_, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.errors import InvalidDigestError, KvregError, RequestInvalidError
from kvreg.core.names import validate_namespace
from kvreg.core.timestamps import rfc3339
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope, EnvelopeBlock, Namespace, Ref
from kvreg_registry.services.search import visible_condition

#: Block keys per request: a prompt of 4096 blocks (64K tokens at block size 16).
MAX_KEYS = 4096
#: Namespaces a request may restrict itself to.
MAX_NAMESPACES = 100
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: Larger than any block size an engine uses; bounds the integer sent to the database.
MAX_BLOCK_SIZE = 1 << 20
PASS = "pass"


@dataclass(frozen=True)
class RouterQuery:
    """A validated route request (:func:`parse_query` makes one from the request's values)."""

    model_fingerprint: Digest
    tokenizer_fingerprint: Digest
    config_fingerprint: Digest
    block_size: int
    block_keys: tuple[Digest, ...]
    namespaces: tuple[str, ...] | None = None
    limit: int = DEFAULT_LIMIT


@dataclass(frozen=True)
class Candidate:
    """One artifact the caller may read, and how many leading blocks of the prompt it holds."""

    namespace: str
    manifest_digest: str
    refs: list[str]
    matched_blocks: int
    token_count: int
    prompt_tokens: int | None
    block_size: int
    verdict: str | None
    verifier: str | None
    created_at: dt.datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "manifest_digest": self.manifest_digest,
            "refs": list(self.refs),
            "matched_blocks": self.matched_blocks,
            "token_count": self.token_count,
            "prompt_tokens": self.prompt_tokens,
            "block_size": self.block_size,
            "verdict": self.verdict,
            "verifier": self.verifier,
            "created_at": rfc3339(self.created_at),
        }


def _digest(value: object, what: str) -> Digest:
    try:
        if not isinstance(value, str):
            raise InvalidDigestError("not a string")  # answered below, like any invalid digest
        return Digest(value)
    except KvregError:
        raise InvalidDigestError(
            f"{what} is not a valid digest: {str(value)[:80]!r}",
            hint="expected 'sha256:' followed by 64 lowercase hex digits",
        ) from None


def parse_query(
    *,
    model_fingerprint: object,
    tokenizer_fingerprint: object,
    config_fingerprint: object,
    block_size: object,
    block_keys: Sequence[object],
    namespaces: Sequence[object] | None = None,
    limit: object = DEFAULT_LIMIT,
) -> RouterQuery:
    """Check every value of a route request; raise ``InvalidDigestError`` (``DIGEST_INVALID``)
    naming the first bad digest, ``InvalidNameError`` for a bad namespace name, or
    ``RequestInvalidError`` for counts and sizes out of range or a repeated key."""
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, int)
        or not 0 < block_size <= MAX_BLOCK_SIZE
    ):
        raise RequestInvalidError(
            f"block_size must be an integer from 1 to {MAX_BLOCK_SIZE}, not {block_size!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_LIMIT:
        raise RequestInvalidError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
    if len(block_keys) > MAX_KEYS:
        raise RequestInvalidError(
            f"{len(block_keys)} block keys in one request, more than the limit of {MAX_KEYS}",
            hint=f"send the keys of the prompt's first {MAX_KEYS} blocks",
            limit=MAX_KEYS,
        )
    keys = tuple(_digest(k, f"block_keys[{i}]") for i, k in enumerate(block_keys))
    if len(set(keys)) != len(keys):
        first = next(i for i, k in enumerate(keys) if k in keys[:i])
        raise RequestInvalidError(
            f"block_keys[{first}] repeats an earlier key: the keys of one prompt are all different "
            "(each chains the one before it)",
            hint="send kvreg.core.blockkey.block_keys(...) of the prompt, block 0 first",
        )
    names: tuple[str, ...] | None = None
    if namespaces is not None:
        if len(namespaces) > MAX_NAMESPACES:
            raise RequestInvalidError(
                f"{len(namespaces)} namespaces in one request, more than the limit of {MAX_NAMESPACES}"
            )
        names = tuple(dict.fromkeys(validate_namespace(str(n)) for n in namespaces))
    return RouterQuery(
        model_fingerprint=_digest(model_fingerprint, "model_fingerprint"),
        tokenizer_fingerprint=_digest(tokenizer_fingerprint, "tokenizer_fingerprint"),
        config_fingerprint=_digest(config_fingerprint, "config_fingerprint"),
        block_size=block_size,
        block_keys=keys,
        namespaces=names,
        limit=limit,
    )


def _readable_namespaces(principal: Principal, names: tuple[str, ...] | None) -> Any:
    """``SELECT id FROM namespaces`` the caller may read (and, given ``names``, named so)."""
    conditions: list[Any] = []
    visible = visible_condition(principal)
    if visible is not True:
        conditions.append(visible)
    if names is not None:
        conditions.append(Namespace.name.in_(names))
    return select(Namespace.id).where(*conditions) if conditions else None


def _wanted(dialect: str, keys: tuple[Digest, ...]) -> tuple[Any, Any, Any]:
    """The prompt's keys as a table: ``(key column, index column, the table)``, index from 0.

    One bound parameter whatever the number of keys: PostgreSQL ``unnest(text[]) WITH
    ORDINALITY`` (whose row count the planner knows from the array), SQLite
    ``json_each(JSON array)`` (``key`` is the position, ``value`` the element)."""
    values = [str(k) for k in keys]
    if dialect == "postgresql":
        array = bindparam("route_keys", values, type_=postgresql.ARRAY(String))
        table = func.unnest(array).table_valued("key", with_ordinality="ordinality", name="wanted")
        table = table.render_derived()  # AS wanted(key, ordinality)
        return table.c.key, table.c.ordinality - 1, table
    if dialect == "sqlite":
        keys_json: BindParameter[str] = bindparam("route_keys", json.dumps(values))
        table = func.json_each(keys_json).table_valued("key", "value", name="wanted")
        return table.c.value, table.c.key, table
    raise NotImplementedError(f"routing on {dialect!r}")


def route(session: Session, principal: Principal, q: RouterQuery) -> list[Candidate]:
    """The candidates for ``q`` that ``principal`` may read, best first (see the module docstring)."""
    if q.namespaces is not None and not q.namespaces:
        return []
    readable = _readable_namespaces(principal, q.namespaces)
    conditions: list[Any] = [
        Envelope.model_fingerprint == q.model_fingerprint,
        Envelope.tokenizer_fingerprint == q.tokenizer_fingerprint,
        Envelope.config_fingerprint == q.config_fingerprint,
        Envelope.block_size == q.block_size,
    ]
    if readable is not None:
        conditions.append(Envelope.namespace_id.in_(readable))
    columns = (
        Envelope.namespace_id,
        Envelope.manifest_digest,
        Namespace.name,
        Envelope.token_count,
        Envelope.prompt_tokens,
        Envelope.block_size,
        Envelope.verdict,
        Envelope.verifier,
        Envelope.created_at,
    )
    not_pass = case((Envelope.verdict == PASS, 0), else_=1)
    if q.block_keys:
        # Block i of the artifact must hold key i of the prompt: the keys as a table of
        # (key, index) joined to the key index, one lookup per key.
        wanted_key, wanted_index, wanted = _wanted(session.get_bind().dialect.name, q.block_keys)
        hits = (
            select(
                EnvelopeBlock.namespace_id,
                EnvelopeBlock.manifest_digest,
                (func.max(EnvelopeBlock.block_index) + 1).label("matched"),
            )
            .select_from(wanted)
            .join(
                EnvelopeBlock,
                and_(EnvelopeBlock.block_key == wanted_key, EnvelopeBlock.block_index == wanted_index),
            )
        )
        if readable is not None:
            hits = hits.where(EnvelopeBlock.namespace_id.in_(readable))
        matched_sub = hits.group_by(EnvelopeBlock.namespace_id, EnvelopeBlock.manifest_digest).subquery()
        matched: Any = matched_sub.c.matched
        stmt = select(*columns, matched).join(
            matched_sub,
            and_(
                matched_sub.c.namespace_id == Envelope.namespace_id,
                matched_sub.c.manifest_digest == Envelope.manifest_digest,
            ),
        )
    else:
        matched = literal(0)
        stmt = select(*columns, matched.label("matched"))
    stmt = (
        stmt.join(Namespace, Namespace.id == Envelope.namespace_id)
        .where(*conditions)
        .order_by(
            *([matched.desc()] if q.block_keys else []),
            not_pass,
            Envelope.created_at.desc(),
            Envelope.manifest_digest,
            Envelope.namespace_id,
        )
        .limit(q.limit)
    )
    rows = session.execute(stmt).all()
    refs: dict[tuple[int, str], list[str]] = {}
    if rows:
        wanted = [and_(Ref.namespace_id == r[0], Ref.manifest_digest == r[1]) for r in rows]
        for ns_id, digest, name in session.execute(
            select(Ref.namespace_id, Ref.manifest_digest, Ref.name).where(or_(*wanted)).order_by(Ref.name)
        ).all():
            refs.setdefault((ns_id, digest), []).append(name)
    return [
        Candidate(
            namespace=r.name,
            manifest_digest=r.manifest_digest,
            refs=refs.get((r.namespace_id, r.manifest_digest), []),
            matched_blocks=int(r.matched),
            token_count=r.token_count,
            prompt_tokens=r.prompt_tokens,
            block_size=r.block_size,
            verdict=r.verdict,
            verifier=r.verifier,
            created_at=r.created_at,
        )
        for r in rows
    ]
