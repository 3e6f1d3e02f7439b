"""Full-text search of artifacts on SQLite and PostgreSQL (``kvreg_registry.services.search``).

Every test runs on both backends, on a database made by the alembic migrations: a
real registry app (``create_app``) publishes real signed artifacts through its API
(``tests/web/library.py``), and search is asked through ``GET /api/v1/artifacts``
or the service itself. What is checked: words of the solution text, prompt, title,
question and other annotations are found (AND of words, prefixes, any case); the
filters combine with the text; pagination and totals; private namespaces stay
hidden; no input, however odd, makes an SQL or FTS error; ``kvreg-admin search
reindex`` fills the text of rows stored before; the migration indexes existing
rows; and with 10,000 artifacts a rare word finds exactly its rows through the
full-text index (the query plan says so). No timing thresholds: the figures are in
docs/benchmarks.md ("Search", ``bench/search.py``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import column, delete, event, insert, select, table, update

from core.manifest_helpers import signed_artifact
from kvreg.core.digest import Digest
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import Envelope, NamespaceObject, StoredObject, UTCDateTime
from kvreg_registry.services import search, search_index, search_text
from web.library import CONFIG_FP, MODEL_FP, TOKENIZER_FP, Library, kv_chunks

ADMIN = Principal(is_admin=True, name="test")
ANONYMOUS = Principal()
OTHER_MODEL_FP = Digest.of_bytes(b"search-other-model")


def publish(
    lib: Library,
    namespace: str,
    ref: str,
    solution: str,
    *,
    title: str = "",
    question: str = "",
    annotations: dict[str, Any] | None = None,
    prompt: str | None = None,
    verifier: str = "exact-match",
    verdict: str | None = "pass",
    model_name: str = "tiny-llama",
    model_fp: Digest = MODEL_FP,
) -> Digest:
    """Publish an artifact whose text object is ``solution`` (and prompt object ``prompt``),
    as ``kvreg push`` does: objects, signed envelope, ref. Returns the manifest digest."""
    seed = hashlib.sha256(f"{namespace}/{ref}/{solution[:1000]}".encode()).digest()
    tokens = [int.from_bytes(seed[i : i + 3], "little") + 1 for i in range(0, 18, 3)]
    built = signed_artifact(
        lib.key,
        tokens,
        kv_chunks(tokens, 4),
        text=solution.encode("utf-8"),
        logits=seed * 4,
        prompt=None if prompt is None else (prompt.encode("utf-8"), 1),
        model_fp=model_fp,
        model_name=model_name,
        tokenizer_fp=TOKENIZER_FP,
        config_fp=CONFIG_FP,
        verdict=verdict,
        verifier=verifier,
        annotations={"title": title, "question": question, **(annotations or {})},
        created="2026-11-30T12:00:00Z",
    )
    lib.push(namespace, ref, built)
    return built.digest


def found(lib: Library, token: str | None = None, **params: Any) -> list[str]:
    """The digests ``GET /artifacts`` answers (newest first); asserts the total matches."""
    headers = {} if token == "" else {"Authorization": f"Bearer {token or lib.admin_token}"}
    r = lib.client.get("/api/v1/artifacts", params={"limit": 200, **params}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == len(body["artifacts"])
    return [a["digest"] for a in body["artifacts"]]


def set_created(lib: Library, digest: Digest, when: dt.datetime) -> None:
    with lib.app_state.db.write() as s:
        s.execute(update(Envelope).where(Envelope.manifest_digest == digest).values(created_at=when))


# --- what is searched --------------------------------------------------------------------------------


def test_words_of_the_solution_prompt_title_question_and_annotations_are_found(lib: Library) -> None:
    ns = lib.namespace()
    a = publish(
        lib,
        ns,
        "p1",
        "We compute the Discriminant: Δ = b²-4ac, so x = 42 (the answer is Zebracorn-level).",
        title="Quadratic roots",
        question="How many real roots does x^2+1 have?",
        annotations={"answer": "Fortytwo", "tags": ["algebra", "Olympiad"], "source": "Hilbertbook 2026"},
        prompt="Solve carefully, Pelican style.",
    )
    b = publish(lib, ns, "p2", "An unrelated proof about primes.", title="Prime gaps")
    # A word only in the solution text; case does not matter; the prompt; each annotation.
    for q in [
        "zebracorn",
        "ZEBRACORN",
        "Discriminant",
        "pelican",
        "quadratic",
        "real roots",
        "fortytwo",
        "olympiad",
        "hilbertbook",
    ]:
        assert found(lib, q=q) == [a], q
    assert found(lib, q="primes") == [b]
    # Punctuation separates words: "b²-4ac" → "b2", "4ac"; "x^2+1" → "x", "2", "1".
    assert found(lib, q="4ac") == [a]
    # Prefixes: every word of the query is a prefix of some word of the artifact.
    assert found(lib, q="zebra") == [a]
    assert found(lib, q="prim") == [b]
    assert set(found(lib, q="p")) == {a, b}  # "pelican", "proof"
    # AND: every word must match, in any field.
    assert found(lib, q="quadratic zebracorn") == [a]
    assert found(lib, q="quadratic primes") == []
    assert found(lib, q="zebracornx") == []
    # Without searchable words there is no text filter.
    assert set(found(lib, q=" -*: \"' ")) == {a, b}


def test_unicode_words_and_long_words(lib: Library) -> None:
    ns = lib.namespace()
    a = publish(lib, ns, "u", "Größe of the naïve Straße: 日本語テキスト and हिन्दी शब्द, ① and ǅemal")
    for q in ["größe", "GRÖSSE", "naïve", "straße", "strasse", "日本語", "हिन्दी", "1", "ǆemal"]:
        assert found(lib, q=q) == [a], q
    assert found(lib, q="naive") == []  # accents are kept
    long_word = "x" * 500
    b = publish(lib, ns, "long", f"a {long_word} z")
    assert found(lib, q=long_word) == [b]
    assert found(lib, q="x" * 20) == [b]


def test_a_mebibyte_of_distinct_words_is_stored_and_searchable(lib: Library) -> None:
    """The text read is capped (1 MiB) and the indexed words too (PostgreSQL refuses a tsvector
    whose words exceed 1 MiB): a worst-case text still stores, and its first words are found."""
    ns = lib.namespace()
    words = [f"w{i:06d}" for i in range(160_000)]  # 1.1 MB of distinct words
    digest = publish(lib, ns, "big", "firstword " + " ".join(words))
    assert found(lib, q="firstword") == [digest]
    assert found(lib, q="w000001") == [digest]
    with lib.app_state.db.read() as s:
        stored = s.scalar(select(Envelope.search_text).where(Envelope.manifest_digest == digest))
    assert len(stored.encode()) <= search_text.MAX_SEARCH_BYTES
    assert found(lib, q=words[-1]) == []  # past the caps


# --- filters, order, pagination ------------------------------------------------------------------------


def test_filters_combine_with_the_text(lib: Library) -> None:
    ns, other = lib.namespace(), lib.namespace()
    a = publish(lib, ns, "a", "golden ratio appears", verifier="sympy", verdict="pass")
    b = publish(lib, ns, "b", "golden ratio again", verifier="sympy", verdict="fail", model_name="big-model")
    c = publish(lib, other, "c", "golden ratio elsewhere", verifier="exact-match", model_fp=OTHER_MODEL_FP)
    d = publish(lib, ns, "d", "silver ratio", verifier="sympy", verdict="pass")
    set_created(lib, a, dt.datetime(2026, 1, 10, 12, tzinfo=dt.UTC))
    set_created(lib, b, dt.datetime(2026, 2, 10, 12, tzinfo=dt.UTC))
    set_created(lib, c, dt.datetime(2026, 3, 10, 12, tzinfo=dt.UTC))
    set_created(lib, d, dt.datetime(2026, 4, 10, 12, tzinfo=dt.UTC))
    assert found(lib, q="golden") == [c, b, a]  # newest first
    assert found(lib, q="ratio") == [d, c, b, a]
    assert found(lib, q="golden", namespace=ns) == [b, a]
    assert found(lib, q="golden", namespace=other) == [c]
    assert found(lib, q="golden", model=str(OTHER_MODEL_FP)) == [c]
    assert found(lib, q="golden", model="big-model") == [b]  # by name
    assert found(lib, q="golden", model="tiny-llama") == [c, a]
    assert found(lib, q="golden", verifier="sympy") == [b, a]
    assert found(lib, q="golden", verifier="sympy", verdict="pass") == [a]
    assert found(lib, q="ratio", verdict="pass") == [d, c, a]
    assert found(lib, q="golden", since="2026-02-10") == [c, b]
    assert found(lib, q="golden", until="2026-02-10") == [b, a]  # a date includes that day
    assert found(lib, q="golden", until="2026-02-10T12:00:00Z") == [a]  # a time is exclusive
    assert found(lib, q="golden", since="2026-02-01", until="2026-02-28") == [b]
    assert found(lib, q="ratio", since="2026-02-10T13:00:00+01:00", verdict="pass") == [d, c]
    assert found(lib, since="2026-03-01T00:00:00") == [d, c]  # no offset: UTC
    assert found(lib, q="ratio", namespace=ns, verifier="sympy", verdict="pass", since="2026-03-01") == [d]
    for bad in ["yesterday", "2026-13-01", "2026-02-30", "9999-12-31T25:00"]:
        r = lib.client.get("/api/v1/artifacts", params={"since": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["code"] == "REQUEST_INVALID"


def test_pagination_and_total_are_in_sql(lib: Library) -> None:
    ns = lib.namespace()
    digests = [publish(lib, ns, f"r{i}", f"pagination sample number{i}") for i in range(7)]
    publish(lib, ns, "other", "not matching")
    for i, d in enumerate(digests):
        set_created(lib, d, dt.datetime(2026, 5, 1, tzinfo=dt.UTC) + dt.timedelta(hours=i))
    newest_first = digests[::-1]
    pages = []
    for offset in (0, 3, 6, 9):
        r = lib.api("GET", "/artifacts", params={"q": "pagination", "limit": 3, "offset": offset})
        body = r.json()
        assert body["total"] == 7 and body["limit"] == 3 and body["offset"] == offset
        pages.append([x["digest"] for x in body["artifacts"]])
    assert pages == [newest_first[0:3], newest_first[3:6], newest_first[6:7], []]
    with lib.app_state.db.read() as s:
        rows, total = search.search(s, ADMIN, search.Query(text="pagination", limit=2, offset=1))
    assert total == 7 and [e.manifest_digest for e, _, _ in rows] == newest_first[1:3]
    assert [refs for _, _, refs in rows] == [["r5"], ["r4"]]


def test_search_runs_a_bounded_number_of_statements(lib: Library) -> None:
    ns = lib.namespace()

    def statements() -> int:
        seen: list[str] = []

        def record(*args: Any) -> None:
            seen.append(args[2])

        engine = lib.app_state.db.engine
        event.listen(engine, "before_cursor_execute", record)
        try:
            with lib.app_state.db.read() as s:
                search.search(s, ADMIN, search.Query(text="bounded", namespace=ns, limit=200))
                search.facets(s, ADMIN)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        return len([x for x in seen if not x.strip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK"))])

    for i in range(3):
        publish(lib, ns, f"s{i}", f"bounded {i}")
    small = statements()
    for i in range(3, 15):  # five times as many artifacts: the count must not move
        publish(lib, ns, f"s{i}", f"bounded {i}")
    # count, page, refs (and SET/RESET around them on PostgreSQL); 4 facets
    assert statements() == small == (3 if lib.app_state.db.dialect == "sqlite" else 5) + 4


# --- visibility ----------------------------------------------------------------------------------------


def test_private_namespaces_are_hidden_from_search_and_facets(lib: Library) -> None:
    public, private = lib.namespace(public=True), lib.namespace(public=False)
    a = publish(lib, public, "a", "secretive walrus", verifier="open-check")
    b = publish(lib, private, "b", "secretive walrus", verifier="hidden-check", model_name="hidden-model")
    reader = lib.user({private: "read"})
    stranger = lib.user({public: "write"})
    assert set(found(lib, q="walrus")) == {a, b}  # admin
    assert set(found(lib, reader, q="walrus")) == {a, b}
    assert found(lib, stranger, q="walrus") == [a]
    assert found(lib, "", q="walrus") == [a]  # anonymous
    assert found(lib, "", q="walrus", namespace=private) == []
    assert found(lib, stranger, verifier="hidden-check") == []
    with lib.app_state.db.read() as s:
        anonymous = search.facets(s, ANONYMOUS)
        everything = search.facets(s, ADMIN)
    assert anonymous.namespaces == [public]
    assert anonymous.verifiers == ["open-check"] and anonymous.models == ["tiny-llama"]
    assert anonymous.verdicts == ["pass"]
    assert everything.namespaces == sorted([public, private])
    assert everything.verifiers == ["hidden-check", "open-check"]
    assert everything.models == ["hidden-model", "tiny-llama"]


# --- any input --------------------------------------------------------------------------------------------

NASTY = [
    '"',
    "'",
    "''",
    '"unterminated',
    "a'b",
    "a\"b'c",
    "*",
    "**",
    "-",
    "--",
    "a -b",
    "-a",
    ":",
    "title:foo",
    "search_text:x",
    "a:*",
    "a & b",
    "a | b",
    "!a",
    "a <-> b",
    "(a",
    "a)",
    "()",
    "NOT",
    "AND",
    "OR",
    "a OR b",
    "NEAR(a b)",
    "a NEAR b",
    "^a",
    "+a",
    "a*",
    "{a b}",
    "[a]",
    "\\",
    "a\\'b",
    "%",
    "_",
    "%_%",
    "'; DROP TABLE envelopes; --",
    "1=1",
    "\x00",
    "a\x00b",
    "\u200b",
    "\ufeff",
    "🦊 🦊🦊",
    "x\u0301",
    "\u0301",
    "ﬁ ß İ ǅ",
    "١٢٣",
    "word " * 100,
    "a" * 400,
    "\t\n\r",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
]


def test_nasty_inputs_never_error(lib: Library) -> None:
    ns = lib.namespace()
    a = publish(lib, ns, "n", "a b word and 123 and nothing else")
    for q in NASTY:
        r = lib.api("GET", "/artifacts", params={"q": q[:500]})
        assert r.status_code == 200, (q, r.text)
        r = lib.api("GET", "/artifacts", params={"q": q[:500], "verifier": q[:200], "verdict": q[:64]})
        assert r.status_code == 200, (q, r.text)
        assert r.json()["total"] == 0
        with lib.app_state.db.read() as s:
            search.search(s, ANONYMOUS, search.Query(text=q, model=q, verifier=q, verdict=q, namespace=q))
    assert found(lib, q="a -b") == [a]  # "-" is no operator: the words "a" and "b"
    assert found(lib, q="word*") == [a]
    assert found(lib, q="NOT") == [a]  # the word "nothing" starts with "not"


def test_any_text_searches_without_error_and_finds_its_own_words(lib: Library) -> None:
    """Property: whatever the text of an artifact and whatever the query, search answers; and
    each word of an artifact's text finds it (the two backends' tokenizers agree with ours)."""
    ns = lib.namespace()
    digest = publish(lib, ns, "h", "placeholder")
    db = lib.app_state.db

    @settings(max_examples=80, deadline=None, database=None)
    @given(content=st.text(max_size=60), query=st.text(max_size=30))
    def check(content: str, query: str) -> None:
        with db.write() as s:
            s.execute(
                update(Envelope)
                .where(Envelope.manifest_digest == digest)
                .values(search_text=search_text.searchable_text([content]))
            )
        with db.read() as s:
            search.search(s, ANONYMOUS, search.Query(text=query))
            for word in search_text.words(content)[:5]:
                total = search.search(s, ADMIN, search.Query(text=word, namespace=ns))[1]
                assert total == 1, (content, word)
            if search.query_words(content):
                assert search.search(s, ADMIN, search.Query(text=content, namespace=ns))[1] == 1

    check()


# --- reindexing and the migration ---------------------------------------------------------------------------


def test_reindex_fills_the_solution_text_of_rows_stored_before(lib: Library, tmp_path: Path) -> None:
    ns = lib.namespace()
    a = publish(
        lib, ns, "old", "The hidden lemma of Kummerfeld.", title="Old Artifact", prompt="Prompted by Ulam"
    )
    b = publish(lib, ns, "new", "Another text.", title="New one")
    db = lib.app_state.db
    with db.write() as s:  # as the search text was before: annotations only, lowercased
        s.execute(update(Envelope).where(Envelope.manifest_digest == a).values(search_text="old artifact"))
        s.execute(update(Envelope).where(Envelope.manifest_digest == b).values(search_text="new one"))
    assert found(lib, q="kummerfeld") == []
    assert found(lib, q="old") == [a]
    report = search_index.reindex(db, lib.app_state.storage, batch=1)
    assert report.envelopes == 2 and report.changed == 2 and report.missing_text == 0
    assert report.index_rebuilt == (db.dialect == "sqlite")
    assert found(lib, q="kummerfeld lemma") == [a]
    assert found(lib, q="ulam") == [a]
    assert found(lib, q="another") == [b]
    assert search_index.reindex(db, lib.app_state.storage).changed == 0  # idempotent
    # The command line does the same, on the same settings as the server.
    with db.write() as s:
        s.execute(update(Envelope).where(Envelope.manifest_digest == a).values(search_text=""))
    assert found(lib, q="kummerfeld") == []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvreg_registry.admin",
            "--data",
            str(tmp_path / "data"),
            "--database-url",
            db.url,
            "--json",
            "search",
            "reindex",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["changed"] == 1
    assert found(lib, q="kummerfeld") == [a]


def _insert_rows(
    s: Any, ns_id: int, template: dict[str, Any], texts: list[str], start: dt.datetime
) -> list[str]:
    """Envelope rows copied from ``template`` with their own digests, search texts and times
    (straight into the tables, with the objects rows their foreign keys need)."""
    digests = [str(Digest.of_bytes(f"row {ns_id} {i}".encode())) for i in range(len(texts))]
    s.execute(insert(StoredObject), [{"digest": d, "size": 1, "created_at": start} for d in digests])
    s.execute(
        insert(NamespaceObject), [{"namespace_id": ns_id, "digest": d, "created_at": start} for d in digests]
    )
    s.execute(
        insert(Envelope),
        [
            {
                **template,
                "namespace_id": ns_id,
                "manifest_digest": d,
                "search_text": t,
                "created_at": start + dt.timedelta(minutes=i),
            }
            for i, (d, t) in enumerate(zip(digests, texts, strict=True))
        ],
    )
    return digests


def _template(s: Any, digest: Digest) -> dict[str, Any]:
    row = s.scalars(select(Envelope).where(Envelope.manifest_digest == digest)).one()
    return {c.name: getattr(row, c.key) for c in Envelope.__table__.columns}


def test_the_migration_indexes_rows_that_exist_before_it(database_url: str) -> None:
    upgrade(database_url, "0003")
    db = Database(database_url)
    try:
        now = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
        with db.write() as s:
            # the namespaces table as it was at 0003 (the model has columns of later revisions)
            namespaces = table("namespaces", column("id"), column("name"), column("public"),
                               column("description"), column("created_at", UTCDateTime()))  # fmt: skip
            s.execute(insert(namespaces).values(name="before", public=True, description="", created_at=now))
            ns_id = s.scalar(select(namespaces.c.id).where(namespaces.c.name == "before"))
            template = {
                "envelope": b"{}",
                "signer_keyid": str(Digest.of_bytes(b"k")),
                "model_fingerprint": str(MODEL_FP),
                "model_name": "m",
                "tokenizer_fingerprint": str(TOKENIZER_FP),
                "config_fingerprint": str(CONFIG_FP),
                "token_count": 1,
                "chunk_count": 1,
                "block_size": 1,
                "size": 1,
                "merkle_root": str(Digest.of_bytes(b"r")),
                "verifier": None,
                "verdict": None,
                "title": "",
                "question": "",
                "created_by": None,
                "log_seq": None,
            }
            digests = _insert_rows(s, ns_id, template, ["ancient scroll", "modern paper"], now)
        upgrade(database_url)
        with db.read() as s:
            rows, total = search.search(s, ANONYMOUS, search.Query(text="scro"))
        assert total == 1 and rows[0][0].manifest_digest == digests[0]
        with db.write() as s:  # and the index follows deletes and updates
            s.execute(
                update(Envelope).where(Envelope.manifest_digest == digests[1]).values(search_text="scroll")
            )
        with db.read() as s:
            assert search.search(s, ANONYMOUS, search.Query(text="scroll"))[1] == 2
            assert search.search(s, ANONYMOUS, search.Query(text="paper"))[1] == 0
        with db.write() as s:
            s.execute(delete(Envelope).where(Envelope.manifest_digest == digests[0]))
        with db.read() as s:
            rows, total = search.search(s, ANONYMOUS, search.Query(text="scroll"))
        assert total == 1 and rows[0][0].manifest_digest == digests[1]
    finally:
        db.dispose()


# --- 10,000 artifacts ---------------------------------------------------------------------------


def _plans(db: Database, q: search.Query) -> list[str]:
    """The query plans of the statements ``search`` runs for ``q``: the statements it sent are
    replayed in one transaction, settings as they are (on PostgreSQL ``search`` turns
    sequential scans off around a text search: see ``search._index_scans``) and the two
    full-text statements (count and page) under EXPLAIN."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        with db.read() as s:
            search.search(s, ADMIN, q)
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    plans = []
    explain = "EXPLAIN QUERY PLAN " if db.dialect == "sqlite" else "EXPLAIN "
    with db.engine.connect() as conn:
        for statement, parameters in sent:
            if statement.startswith(("SET ", "RESET ")):
                conn.exec_driver_sql(statement, parameters)
            elif "envelopes_fts" in statement or "to_tsquery" in statement:
                rows = conn.exec_driver_sql(explain + statement, parameters).all()
                plans.append("\n".join(str(r[-1]) for r in rows))
        conn.rollback()
    assert len(plans) == 2, sent  # the count and the page
    return plans


def test_ten_thousand_artifacts_a_rare_word_is_found_through_the_index(lib: Library) -> None:
    ns = lib.namespace()
    seed = publish(lib, ns, "seed", "seed text")
    db = lib.app_state.db
    n = 10_000
    rare = {1234, 5678, 9001}
    texts = [
        f"common word{i % 100} group{i % 7} item{i}" + (" quokkarare" if i in rare else "") for i in range(n)
    ]
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    with db.write() as s:
        template = _template(s, seed)
        digests = _insert_rows(s, template["namespace_id"], template, texts, start)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    assert found(lib, q="quokkarare") == [digests[i] for i in sorted(rare, reverse=True)]
    assert found(lib, q="quokka group2") == [digests[1234]]  # 1234 % 7 == 2, 5678 % 7 == 1, 9001 % 7 == 6
    with db.read() as s:
        _, total = search.search(s, ADMIN, search.Query(text="item12"))
        assert total == 1 + 10 + 100  # item12, item120-129, item1200-1299
        rows, total = search.search(s, ADMIN, search.Query(text="word7 group3", limit=5, offset=10))
        expected = [
            d
            for d, t in zip(digests, texts, strict=True)
            if all(any(w.startswith(p) for w in t.split()) for p in ("word7", "group3"))
        ][::-1]
        assert total == len(expected) and [e.manifest_digest for e, _, _ in rows] == expected[10:15]
        since = start + dt.timedelta(minutes=9000)
        _, total = search.search(s, ADMIN, search.Query(text="common", since=since))
        assert total == n - 9000
    count_plan, page_plan = _plans(db, search.Query(text="quokkarare", limit=20))
    if db.dialect == "postgresql":
        # The GIN index on the stored vector (search runs these with enable_seqscan off).
        assert search.PG_INDEX in count_plan, count_plan
        assert search.PG_INDEX in page_plan, page_plan
    else:
        for plan in (count_plan, page_plan):
            assert "VIRTUAL TABLE INDEX" in plan and search.FTS_TABLE in plan, plan
            # The envelopes table itself is never scanned: the count fetches the matches by
            # rowid, the page walks the created_at index and then fetches its rows by rowid.
            assert not any(line.strip() == "SCAN envelopes" for line in plan.splitlines()), plan
            assert "SEARCH envelopes USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan
        assert "SCAN envelopes USING INDEX ix_envelopes_created_at" in page_plan, page_plan
