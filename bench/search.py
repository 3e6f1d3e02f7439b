"""Search latency with 10,000 artifacts, through the registry's own search code.

One run, one process:

1. **A real database**: a fresh SQLite file under ``--out`` (the embedded default), or,
   with ``--database-url postgresql+psycopg://...``, a scratch database created on that
   server for the run and dropped afterwards (``--keep`` keeps it). The schema is made by
   ``kvreg_registry.db.upgrade`` (the alembic migrations, so the full-text index of
   migration 0004: FTS5 on SQLite, a GIN expression index on PostgreSQL).
2. **Artifacts**: ``--artifacts`` envelope rows (10,000 by default) in two namespaces
   (90 % public, 10 % private with one reader), inserted in bulk straight into the tables
   (with the ``objects`` rows their foreign keys need), one creation time per minute, each
   with a 10 KB envelope (a real one carries its manifest's chunk list in base64). Each
   row's ``search_text`` is made by ``searchable_text`` (services.search_text) from a title, a question and
   a solution text of ``--words`` words (default 600, about 4 KB) drawn from a Zipf
   vocabulary of 50,000 words, plus marker words in a known number of rows: ``rareword``
   (3 rows), ``mediumword`` (1 %), ``commonword`` (50 %). Then VACUUM ANALYZE (PostgreSQL:
   the state autovacuum leaves) or ANALYZE (SQLite).
3. **Queries**, each as the web page and ``GET /api/v1/artifacts`` run it: one
   ``Database.read()`` transaction calling ``search.search`` (count, page of 20, the page's
   refs) or ``search.facets``, as an admin, a signed-in reader or an anonymous visitor.
   ``--rounds`` rounds (default 15), the queries interleaved within each round so that the
   host's load drifting hits them alike; medians and the slowest round are reported. For
   comparison, the search it replaces: ``search_text LIKE '%word%'`` (count and page).
4. **Checks** (a failure exits 1): every total equals the number of rows built with that
   word (or filter); the query plan of the rare-word search uses the full-text index
   (PostgreSQL: ``ix_envelopes_fulltext`` in EXPLAIN; SQLite: the ``envelopes_fts`` virtual
   table index in EXPLAIN QUERY PLAN).

Usage::

    .venv/bin/python bench/search.py [--artifacts 10000] [--rounds 15] [--words 600]
        [--database-url URL] [--out bench/out] [--keep] [--quick]

``--quick`` (1,000 artifacts, 3 rounds) is a smoke run; its timings mean nothing. The
last line of stdout is the whole report as JSON (database passwords masked).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import hashlib
import itertools
import json
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import event, func, insert, select

from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import (
    Envelope,
    Namespace,
    NamespaceObject,
    Role,
    StoredObject,
    User,
)
from kvreg_registry.services import search
from kvreg_registry.services.search_text import searchable_text

ADMIN = Principal(is_admin=True, name="bench")
ANONYMOUS = Principal()
VOCABULARY = 50_000
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def masked(arg: str) -> str:
    """A command-line argument with a URL's credentials hidden."""
    if "://" in arg and "@" in arg:
        return arg.split("://")[0] + "://***@" + arg.rpartition("@")[2]
    return arg


def digest_of(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """A fresh database for the run: yields (SQLAlchemy URL, kind)."""
    url = args.database_url
    if url is None:
        folder = args.out / ("search-quick" if args.quick else "search")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "registry.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        yield f"sqlite:///{path}", "sqlite"
        return
    if not url.startswith("postgresql"):
        raise SystemExit("--database-url must be a postgresql+psycopg:// URL (SQLite is the default)")
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    server = make_url(url)
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"kvreg_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    log(f"scratch database {name} on {server.host}:{server.port}")
    try:
        yield server.set(database=name).render_as_string(hide_password=False), "postgresql"
    finally:
        if args.keep:
            log(f"kept database {name}")
        else:
            with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# --- the library ---------------------------------------------------------------------------------


class Library:
    """What was built: for each row, its namespace, verdict and words (to check the totals)."""

    def __init__(self) -> None:
        self.namespace: list[str] = []
        self.verdict: list[str] = []
        self.words: list[set[str]] = []
        self.search_bytes = 0
        self.ids: dict[str, int] = {}

    def count(self, *, words: tuple[str, ...] = (), visible: set[str] | None = None, **eq: Any) -> int:
        n = 0
        for i in range(len(self.words)):
            if visible is not None and self.namespace[i] not in visible:
                continue
            if eq.get("verdict") and self.verdict[i] != eq["verdict"]:
                continue
            if eq.get("since_index") is not None and i < eq["since_index"]:
                continue
            if all(any(w.startswith(p) for w in self.words[i]) for p in words):
                n += 1
        return n


def build(db: Database, n: int, words_per_text: int, seed: int = 7) -> tuple[Library, dict[str, float]]:
    rng = random.Random(seed)
    vocabulary = [
        f"{''.join(rng.choices('bcdfghjklmnprstvz', k=2))}{'aeiou'[i % 5]}{i}" for i in range(VOCABULARY)
    ]
    weights = list(itertools.accumulate(1 / (r + 1) for r in range(VOCABULARY)))
    rare = set(rng.sample(range(n), 3))
    medium = set(rng.sample(range(n), max(1, n // 100)))
    common = set(rng.sample(range(n), n // 2))
    lib = Library()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with db.write() as s:
        public = Namespace(name="bench-public", public=True, description="", created_at=START)
        private = Namespace(name="bench-private", public=False, description="", created_at=START)
        reader = User(name="reader", is_admin=False, created_at=START)
        s.add_all([public, private, reader])
        s.flush()
        s.add(Role(user_id=reader.id, namespace_id=private.id, role="read"))
        ids = {"bench-public": public.id, "bench-private": private.id, "reader": reader.id}
    # A real envelope carries its manifest (the chunk list: 32 chunks of 64 tokens here) in
    # base64: about 10 KB that every row holds, as the registry's rows do.
    envelope = b'{"payloadType":"application/vnd.kvreg.manifest+json","payload":"%s"}' % base64.b64encode(
        rng.randbytes(7500)
    )
    rows: list[dict[str, Any]] = []
    for i in range(n):
        ns = "bench-private" if i % 10 == 9 else "bench-public"
        verdict = "pass" if i % 3 else "fail"
        body = rng.choices(vocabulary, cum_weights=weights, k=words_per_text)
        markers = [
            w
            for w, chosen in (("rareword", rare), ("mediumword", medium), ("commonword", common))
            if i in chosen
        ]
        title = f"Problem {i}: " + " ".join(body[:6])
        question = "Find " + " ".join(body[6:20]) + "?"
        solution = " ".join(body[20:]) + " " + " ".join(markers)
        search_text = searchable_text([title, question, "exact-match", "bench-model", solution])
        lib.namespace.append(ns)
        lib.verdict.append(verdict)
        lib.words.append(set(search_text.split()))
        lib.search_bytes += len(search_text.encode())
        digest = digest_of(f"artifact {i}")
        rows.append(
            {
                "namespace_id": ids[ns],
                "manifest_digest": digest,
                "envelope": envelope,
                "signer_keyid": digest_of("signer"),
                "model_fingerprint": digest_of("model"),
                "model_name": "bench-model" if i % 2 else "other-model",
                "tokenizer_fingerprint": digest_of("tokenizer"),
                "config_fingerprint": digest_of("config"),
                "token_count": 2048,
                "chunk_count": 32,
                "block_size": 64,
                "size": 1 << 20,
                "merkle_root": digest_of(f"root {i}"),
                "verifier": "exact-match",
                "verdict": verdict,
                "title": title,
                "question": question,
                "search_text": search_text,
                "created_by": "bench",
                "created_at": START + dt.timedelta(minutes=i),
                "log_seq": None,
            }
        )
    timings["generate_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        part = rows[start : start + 1000]
        with db.write() as s:
            s.execute(
                insert(StoredObject),
                [{"digest": r["manifest_digest"], "size": 1, "created_at": START} for r in part],
            )
            s.execute(
                insert(NamespaceObject),
                [
                    {"namespace_id": r["namespace_id"], "digest": r["manifest_digest"], "created_at": START}
                    for r in part
                ],
            )
            s.execute(insert(Envelope), part)
    timings["insert_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # As autovacuum leaves a table (PostgreSQL: statistics, and the visibility map that
    # index-only scans need); SQLite: statistics.
    if db.dialect == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
    else:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            conn.commit()
    timings["vacuum_analyze_s"] = time.perf_counter() - t0
    lib.ids = ids
    return lib, timings


# --- the queries -----------------------------------------------------------------------------------


def like_search(db: Database, word: str) -> int:
    """The search this replaces: a substring scan of every row (count, then a page)."""
    with db.read() as s:
        pattern = f"%{word}%"
        total = s.scalar(select(func.count()).select_from(Envelope).where(Envelope.search_text.like(pattern)))
        s.execute(
            select(Envelope)
            .where(Envelope.search_text.like(pattern))
            .order_by(Envelope.created_at.desc(), Envelope.manifest_digest)
            .limit(20)
        ).all()
    return int(total or 0)


def queries(db: Database, lib: Library, n: int) -> list[tuple[str, Callable[[], int], int]]:
    """(name, run → total, expected total)."""
    reader = Principal(user_id=lib.ids["reader"], name="reader")
    public_only = {"bench-public"}

    def run(principal: Principal, **q: Any) -> Callable[[], int]:
        def go() -> int:
            with db.read() as s:
                return search.search(s, principal, search.Query(limit=20, **q))[1]

        return go

    def facets() -> int:
        with db.read() as s:
            f = search.facets(s, ANONYMOUS)
        return len(f.namespaces) + len(f.models) + len(f.verifiers) + len(f.verdicts)

    since_index = n * 9 // 10
    since = START + dt.timedelta(minutes=since_index)
    return [
        ("newest 20, no filter (admin)", run(ADMIN), n),
        ("page at offset n/2, no filter (admin)", run(ADMIN, offset=n // 2), n),
        ("rare word, 3 rows (admin)", run(ADMIN, text="rareword"), 3),
        ("word in 1 % of rows (admin)", run(ADMIN, text="mediumword"), lib.count(words=("mediumword",))),
        ("word in 50 % of rows (admin)", run(ADMIN, text="commonword"), lib.count(words=("commonword",))),
        (
            "two words AND (admin)",
            run(ADMIN, text="commonword mediumword"),
            lib.count(words=("commonword", "mediumword")),
        ),
        ("prefix 'rare' (admin)", run(ADMIN, text="rare"), lib.count(words=("rare",))),
        (
            "word in 50 %, anonymous (public only)",
            run(ANONYMOUS, text="commonword"),
            lib.count(words=("commonword",), visible=public_only),
        ),
        (
            "word in 50 %, signed-in reader",
            run(reader, text="commonword"),
            lib.count(words=("commonword",)),
        ),
        (
            "word + verdict + since (admin)",
            run(ADMIN, text="commonword", verdict="pass", since=since),
            lib.count(words=("commonword",), verdict="pass", since_index=since_index),
        ),
        ("facets (anonymous)", facets, 1 + 2 + 1 + 2),  # 1 namespace, 2 models, 1 verifier, 2 verdicts
        ("old LIKE '%rareword%' scan (admin)", lambda: like_search(db, "rareword"), 3),
    ]


def plan_uses_index(db: Database) -> tuple[bool, str]:
    sent: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        with db.read() as s:
            search.search(s, ADMIN, search.Query(text="rareword", limit=20))
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    plans = []
    explain = "EXPLAIN QUERY PLAN " if db.dialect == "sqlite" else "EXPLAIN "
    with db.engine.connect() as conn:  # replayed as sent: SET/RESET too
        for statement, parameters in sent:
            if statement.startswith(("SET ", "RESET ")):
                conn.exec_driver_sql(statement, parameters)
            elif "envelopes_fts" in statement or "to_tsquery" in statement:
                rows = conn.exec_driver_sql(explain + statement, parameters).all()
                plans.append("\n".join(str(r[-1]) for r in rows))
        conn.rollback()
    marker = "VIRTUAL TABLE INDEX" if db.dialect == "sqlite" else search.PG_INDEX
    return len(plans) == 2 and all(marker in p for p in plans), "\n\n".join(plans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--words", type=int, default=600, help="words per artifact's text")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.artifacts, args.rounds = 1000, 3
    n = args.artifacts
    failures: list[str] = []
    load_start = os.getloadavg()[0]
    with database(args) as (url, kind):
        upgrade(url)
        db = Database(url)
        try:
            log(f"building {n} artifacts on {kind}")
            lib, timings = build(db, n, args.words)
            log(f"built in {timings['generate_s']:.1f} s + inserted in {timings['insert_s']:.1f} s")
            plan_ok, plan = plan_uses_index(db)
            if not plan_ok:
                failures.append(f"the rare-word search does not use the full-text index:\n{plan}")
            qs = queries(db, lib, n)
            for name, go, expected in qs:  # warm up, and check the totals
                got = go()
                if got != expected:
                    failures.append(f"{name}: total {got}, expected {expected}")
            samples: dict[str, list[float]] = {name: [] for name, _, _ in qs}
            for _ in range(args.rounds):
                for name, go, _expected in qs:
                    t0 = time.perf_counter()
                    go()
                    samples[name].append((time.perf_counter() - t0) * 1000)
        finally:
            db.dispose()
    report: dict[str, Any] = {
        "backend": kind,
        "artifacts": n,
        "words_per_text": args.words,
        "mean_search_text_bytes": round(lib.search_bytes / n),
        "rounds": args.rounds,
        "build": {k: round(v, 2) for k, v in timings.items()},
        "queries_ms": {
            name: {
                "median": round(statistics.median(v), 2),
                "max": round(max(v), 2),
                "total": dict((q[0], q[2]) for q in qs)[name],
            }
            for name, v in samples.items()
        },
        "plan_uses_index": plan_ok,
        "plan": plan,
        "failures": failures,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": [load_start, os.getloadavg()[0]],
        },
        "command": " ".join(masked(a) for a in sys.argv),
    }
    if kind == "sqlite":
        import sqlite3

        report["machine"]["sqlite"] = sqlite3.sqlite_version
    print(f"\nSearch with {n} artifacts on {kind} ({args.rounds} rounds; ms)")
    print(f"{'query':45} {'total':>7} {'median':>9} {'max':>9}")
    for name, v in report["queries_ms"].items():
        print(f"{name:45} {v['total']:>7} {v['median']:>9.2f} {v['max']:>9.2f}")
    print(f"\nfull-text index in the rare-word plan: {'yes' if plan_ok else 'NO'}")
    for f in failures:
        print(f"FAILED: {f}")
    print(json.dumps(report))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
