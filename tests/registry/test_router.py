"""The registry's router (``POST /api/v1/route``, ``kvreg_registry.services.router``) on SQLite
and PostgreSQL.

Every test runs on both backends, on a database made by the alembic migrations: a real
registry app (``create_app``) publishes real signed artifacts through its API, as
``kvreg push`` does, and the route is asked through the API or the service itself.
Artifacts are built from token lists with real block keys (``kvreg.core.blockkey``),
so "shares the first k blocks with the prompt" is what the keys say. What is checked:
longest-prefix counting (key i only counts at index i), the order (matched blocks,
verdict ``pass``, newest), the fields and refs of each candidate, the listing for a
prompt shorter than one block, other engines left out, private namespaces not leaked
(anonymous, stranger, reader, admin), the namespaces filter, refusals of bad input
with their codes, no audit entry, a bounded number of statements, blocks gone with
their envelope, and the migration's backfill of envelopes stored before it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from alembic import command
from sqlalchemy import event, func, select, text, update

from core.manifest_helpers import signed_artifact
from kvreg.core.blockkey import block_keys, pack_tokens
from kvreg.core.digest import Digest
from kvreg_registry.auth import Principal
from kvreg_registry.db.engine import Database, alembic_config, upgrade
from kvreg_registry.db.models import Envelope, EnvelopeBlock, LogHead
from kvreg_registry.services import router
from web.library import CONFIG_FP, MODEL_FP, TOKENIZER_FP, Library, kv_chunks

ADMIN = Principal(is_admin=True, name="test")
OTHER_MODEL_FP = Digest.of_bytes(b"route-other-model")
BLOCK = 4
FPS = (MODEL_FP, TOKENIZER_FP, CONFIG_FP)


def tokens_of(label: str, count: int) -> list[int]:
    """``count`` token ids that depend on ``label`` (distinct labels: different first tokens)."""
    out: list[int] = []
    for i in range(count):
        digest = hashlib.sha256(f"{label}/{i}".encode()).digest()
        out.append(int.from_bytes(digest[:3], "little") + 1)
    return out


def publish(
    lib: Library,
    namespace: str,
    ref: str | None,
    tokens: list[int],
    *,
    block_size: int = BLOCK,
    verdict: str | None = "pass",
    verifier: str = "exact-match",
    prompt_tokens: int | None = None,
    model_fp: Digest = MODEL_FP,
) -> Digest:
    """Publish an artifact of ``tokens`` as ``kvreg push`` does (objects, signed envelope, ref
    unless ``ref`` is None); returns its manifest digest."""
    built = signed_artifact(
        lib.key,
        tokens,
        kv_chunks(tokens, block_size),
        text=f"solution of {namespace}/{ref} {tokens[:3]}".encode(),
        logits=hashlib.sha256(pack_tokens(tokens)).digest() * 4,
        prompt=None if prompt_tokens is None else (b"the prompt", prompt_tokens),
        block_size=block_size,
        model_fp=model_fp,
        tokenizer_fp=TOKENIZER_FP,
        config_fp=CONFIG_FP,
        verdict=verdict,
        verifier=verifier,
        annotations={"title": f"{namespace}/{ref}"},
        created="2026-11-30T12:00:00Z",
    )
    lib.push(namespace, ref, built)
    return built.digest


def keys_of(tokens: list[int], *, model_fp: Digest = MODEL_FP, block_size: int = BLOCK) -> list[str]:
    """The block keys of a prompt's *full* blocks, as a router sends them."""
    full = len(tokens) // block_size * block_size
    return [str(k) for k in block_keys(model_fp, TOKENIZER_FP, CONFIG_FP, tokens[:full], block_size)]


def body(keys: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "model_fingerprint": str(MODEL_FP),
        "tokenizer_fingerprint": str(TOKENIZER_FP),
        "config_fingerprint": str(CONFIG_FP),
        "block_size": BLOCK,
        "block_keys": keys,
        **extra,
    }


def ask(lib: Library, keys: list[str], token: str | None = None, **extra: Any) -> list[dict[str, Any]]:
    """The candidates ``POST /route`` answers (``token`` "": anonymous)."""
    headers = {} if token == "" else {"Authorization": f"Bearer {token or lib.admin_token}"}
    r = lib.client.post("/api/v1/route", json=body(keys, **extra), headers=headers)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert set(doc) == {"candidates", "limit"}
    return list(doc["candidates"])


def matched(candidates: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(c["manifest_digest"], c["matched_blocks"]) for c in candidates]


def set_created(lib: Library, digest: Digest, when: dt.datetime) -> None:
    with lib.app_state.db.write() as s:
        s.execute(update(Envelope).where(Envelope.manifest_digest == digest).values(created_at=when))


def refused(lib: Library, payload: Any, status: int, code: str, **kw: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {lib.admin_token}", **kw.pop("headers", {})}
    r = lib.client.post("/api/v1/route", headers=headers, json=payload, **kw)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    assert r.headers["X-Kvreg-Error-Code"] == code
    return dict(error)


# --- longest prefix and order ------------------------------------------------------------------------


def test_longest_block_prefix_first(lib: Library) -> None:
    ns = lib.namespace()
    prompt = tokens_of("prompt", 6 * BLOCK)  # six full blocks
    whole = publish(lib, ns, "whole", prompt + tokens_of("answer", 5))  # all six, and more
    four = publish(lib, ns, "four", prompt[: 4 * BLOCK] + tokens_of("other", 7))
    two = publish(lib, ns, "two", prompt[: 2 * BLOCK])  # exactly two blocks
    # Two full blocks and a partial third: the partial block's key is not the prompt's third.
    partial = publish(lib, ns, "partial", prompt[: 2 * BLOCK + 2])
    # Differs in the last token of block 0: no block in common, though 3 of 4 tokens agree.
    publish(lib, ns, "near", [*prompt[:3], prompt[3] + 1, *prompt[4:]])
    publish(lib, ns, "unrelated", tokens_of("unrelated", 3 * BLOCK))
    # The same tokens under another model: other keys, and another engine anyway.
    publish(lib, ns, "other-model", prompt, model_fp=OTHER_MODEL_FP)
    set_created(lib, two, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    set_created(lib, partial, dt.datetime(2026, 2, 1, tzinfo=dt.UTC))  # newer: first among equals
    keys = keys_of(prompt)
    assert matched(ask(lib, keys)) == [(whole, 6), (four, 4), (partial, 2), (two, 2)]
    # A prompt that is the first three blocks of "whole": it and "four" hold all three.
    assert {d: n for d, n in matched(ask(lib, keys[:3]))} == {whole: 3, four: 3, partial: 2, two: 2}
    # A key counts only at its own index: the prompt's key 1 sent alone (at position 0) matches none.
    assert ask(lib, keys[1:2]) == []
    assert matched(ask(lib, keys[:1])) != []
    # The service gives the same answer as the endpoint.
    query = router.parse_query(
        model_fingerprint=MODEL_FP,
        tokenizer_fingerprint=TOKENIZER_FP,
        config_fingerprint=CONFIG_FP,
        block_size=BLOCK,
        block_keys=keys,
    )
    with lib.app_state.db.read() as s:
        found = router.route(s, ADMIN, query)
    assert [(c.manifest_digest, c.matched_blocks) for c in found] == matched(ask(lib, keys))
    # Another model's keys find only the other model's artifact.
    other_keys = keys_of(prompt, model_fp=OTHER_MODEL_FP)
    r = lib.client.post(
        "/api/v1/route",
        json=body(other_keys, model_fingerprint=str(OTHER_MODEL_FP)),
        headers={"Authorization": f"Bearer {lib.admin_token}"},
    )
    assert [c["matched_blocks"] for c in r.json()["candidates"]] == [6]
    # The right keys under the wrong fingerprints or block size: nothing.
    assert ask(lib, keys, model_fingerprint=str(OTHER_MODEL_FP)) == []
    assert ask(lib, keys, block_size=BLOCK * 2) == []


def test_ties_put_pass_first_then_newest_and_limit_bounds(lib: Library) -> None:
    ns = lib.namespace()
    prompt = tokens_of("tie", 2 * BLOCK)
    failed = publish(lib, ns, "failed", [*prompt, 1], verdict="fail")
    unverified = publish(lib, ns, "unverified", [*prompt, 2], verdict=None)
    old_pass = publish(lib, ns, "old-pass", [*prompt, 3])
    new_pass = publish(lib, ns, "new-pass", [*prompt, 4])
    longer = publish(lib, ns, "longer", prompt + tokens_of("more", BLOCK), verdict="fail")
    base = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    for i, d in enumerate([old_pass, new_pass, failed, unverified]):
        set_created(lib, d, base + dt.timedelta(days=i))
    keys = keys_of(prompt + tokens_of("more", BLOCK))
    # "longer" holds three blocks (a failed verdict does not demote it below fewer blocks);
    # then the two-block ones: pass first, newest first; then the rest, newest first.
    assert matched(ask(lib, keys)) == [
        (longer, 3),
        (new_pass, 2),
        (old_pass, 2),
        (unverified, 2),
        (failed, 2),
    ]
    assert matched(ask(lib, keys, limit=2)) == [(longer, 3), (new_pass, 2)]


def test_candidate_fields_and_refs(lib: Library) -> None:
    ns = lib.namespace()
    prompt = tokens_of("fields", 3 * BLOCK)
    d = publish(lib, ns, "main", [*prompt, 9, 9], prompt_tokens=3 * BLOCK, verifier="sympy")
    # Two more refs of the namespace point at it; one of another namespace does not count.
    for name in ("alias", "v1"):
        r = lib.api(
            "PUT", f"/namespaces/{ns}/refs/{name}", json={"digest": d}, headers={"If-None-Match": "*"}
        )
        assert r.status_code == 201, r.text
    bare = publish(lib, ns, None, prompt, verdict=None)  # no ref, no prompt recorded
    set_created(lib, d, dt.datetime(2026, 4, 5, 6, 7, 8, tzinfo=dt.UTC))
    set_created(lib, bare, dt.datetime(2026, 4, 1, tzinfo=dt.UTC))
    first, second = ask(lib, keys_of(prompt))
    assert first == {
        "namespace": ns,
        "manifest_digest": d,
        "refs": ["alias", "main", "v1"],
        "matched_blocks": 3,
        "token_count": 3 * BLOCK + 2,
        "prompt_tokens": 3 * BLOCK,
        "block_size": BLOCK,
        "verdict": "pass",
        "verifier": "sympy",
        "created_at": "2026-04-05T06:07:08Z",
    }
    assert second["manifest_digest"] == bare
    assert second["refs"] == [] and second["prompt_tokens"] is None
    assert second["verdict"] is None and second["verifier"] is None


def test_no_keys_lists_the_engines_artifacts(lib: Library) -> None:
    """A prompt shorter than one block has no key: every artifact of the engine, pass first,
    newest first, at most ``limit``; other engines and block sizes are left out."""
    ns = lib.namespace()
    made = []
    for i in range(5):
        made.append(publish(lib, ns, f"a{i}", tokens_of(f"list{i}", 6), verdict="pass" if i % 2 else "fail"))
        set_created(lib, made[-1], dt.datetime(2026, 5, 1, tzinfo=dt.UTC) + dt.timedelta(hours=i))
    publish(lib, ns, "other-model", tokens_of("list-other", 6), model_fp=OTHER_MODEL_FP)
    publish(lib, ns, "other-block", tokens_of("list-block", 6), block_size=2)
    listed = ask(lib, [])
    assert [c["manifest_digest"] for c in listed] == [made[3], made[1], made[4], made[2], made[0]]
    assert all(c["matched_blocks"] == 0 for c in listed)
    assert [c["manifest_digest"] for c in ask(lib, [], limit=3)] == [made[3], made[1], made[4]]
    # The default limit is 20, and the answer says which limit applied.
    for i in range(5, 22):
        publish(lib, ns, f"a{i}", tokens_of(f"list{i}", 3))
    r = lib.client.post(
        "/api/v1/route", json=body([]), headers={"Authorization": f"Bearer {lib.admin_token}"}
    )
    assert r.json()["limit"] == router.DEFAULT_LIMIT == 20
    assert len(r.json()["candidates"]) == 20
    assert len(ask(lib, [], limit=100)) == 22


# --- visibility ----------------------------------------------------------------------------------------


def test_private_namespaces_are_not_leaked(lib: Library) -> None:
    public, private = lib.namespace(public=True), lib.namespace(public=False)
    prompt = tokens_of("secret", 3 * BLOCK)
    a = publish(lib, public, "open", prompt[:BLOCK])
    b = publish(lib, private, "hidden", prompt)  # the better match, but private
    reader = lib.user({private: "read"})
    stranger = lib.user({public: "write"})
    keys = keys_of(prompt)
    assert matched(ask(lib, keys)) == [(b, 3), (a, 1)]  # server admin
    assert matched(ask(lib, keys, reader)) == [(b, 3), (a, 1)]
    assert matched(ask(lib, keys, stranger)) == [(a, 1)]
    assert matched(ask(lib, keys, "")) == [(a, 1)]  # anonymous
    assert matched(ask(lib, [], "")) == [(a, 0)]
    # Naming the private namespace does not help, and says nothing about it.
    assert ask(lib, keys, "", namespaces=[private]) == []
    assert ask(lib, keys, stranger, namespaces=[private, public]) == [ask(lib, keys, "")[0]]
    assert ask(lib, keys, "", namespaces=["no-such-namespace"]) == []
    # The filter restricts what the caller may read.
    assert matched(ask(lib, keys, reader, namespaces=[private])) == [(b, 3)]
    assert matched(ask(lib, keys, namespaces=[public])) == [(a, 1)]
    assert ask(lib, keys, namespaces=[]) == []
    # Each candidate lists the refs of its own namespace.
    r = lib.client.post("/api/v1/route", json=body(keys), headers={"Authorization": f"Bearer {reader}"})
    assert {c["namespace"]: c["refs"] for c in r.json()["candidates"]} == {
        public: ["open"],
        private: ["hidden"],
    }


# --- refusals ------------------------------------------------------------------------------------------


def test_bad_input_is_refused_with_a_clear_error(lib: Library) -> None:
    keys = keys_of(tokens_of("bad", 3 * BLOCK))
    error = refused(lib, body([keys[0], "sha256:XYZ", keys[2]]), 400, "DIGEST_INVALID")
    assert "block_keys[1]" in error["message"]
    error = refused(lib, body(keys, model_fingerprint="md5:abc"), 400, "DIGEST_INVALID")
    assert "model_fingerprint" in error["message"]
    refused(lib, body(keys, config_fingerprint="sha256:" + "A" * 64), 400, "DIGEST_INVALID")
    error = refused(lib, body([keys[0], keys[1], keys[0]]), 400, "REQUEST_INVALID")
    assert "block_keys[2] repeats" in error["message"]
    many = [str(Digest.of_bytes(str(i).encode())) for i in range(router.MAX_KEYS + 1)]
    error = refused(lib, body(many), 400, "REQUEST_INVALID")
    assert f"more than the limit of {router.MAX_KEYS}" in error["message"]
    assert (
        lib.client.post(
            "/api/v1/route",
            json=body(many[: router.MAX_KEYS]),
            headers={"Authorization": f"Bearer {lib.admin_token}"},
        ).json()["candidates"]
        == []
    )  # exactly the limit is fine
    for bad in ({"limit": 0}, {"limit": 101}, {"block_size": 0}, {"block_size": -4}, {"block_size": 1 << 21}):
        refused(lib, body(keys, **bad), 400, "REQUEST_INVALID")
    refused(lib, body(keys, namespaces=["../etc"]), 400, "NAME_INVALID")
    refused(lib, body(keys, namespaces=[f"ns{i}" for i in range(101)]), 400, "REQUEST_INVALID")
    refused(lib, body(keys, tokens=[1, 2, 3]), 400, "REQUEST_INVALID")  # unknown field: no tokens taken
    refused(lib, {k: v for k, v in body(keys).items() if k != "block_size"}, 400, "REQUEST_INVALID")
    refused(lib, body(keys, block_keys="sha256:" + "0" * 64), 400, "REQUEST_INVALID")
    refused(
        lib, None, 400, "REQUEST_INVALID", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    # A body over the route's limit is refused before it is read (the middleware).
    huge = b'{"block_keys": ["' + b"a" * (600 * 1024) + b'"]}'
    r = lib.client.post(
        "/api/v1/route",
        content=huge,
        headers={"Content-Type": "application/json", "Authorization": "Bearer x"},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "BODY_TOO_LARGE"


def test_a_route_writes_no_audit_entry_and_runs_two_statements(lib: Library) -> None:
    ns = lib.namespace()
    prompt = tokens_of("bounded", 4 * BLOCK)
    for i in range(3):
        publish(lib, ns, f"s{i}", prompt[: (i + 1) * BLOCK])
    db = lib.app_state.db
    query = router.parse_query(
        model_fingerprint=MODEL_FP,
        tokenizer_fingerprint=TOKENIZER_FP,
        config_fingerprint=CONFIG_FP,
        block_size=BLOCK,
        block_keys=keys_of(prompt),
    )

    def statements(principal: Principal, q: router.RouterQuery) -> int:
        seen: list[str] = []

        def record(*args: Any) -> None:
            seen.append(args[2])

        event.listen(db.engine, "before_cursor_execute", record)
        try:
            with db.read() as s:
                router.route(s, principal, q)
        finally:
            event.remove(db.engine, "before_cursor_execute", record)
        return len([x for x in seen if not x.strip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK"))])

    small = statements(ADMIN, query), statements(Principal(), query)
    for i in range(3, 15):  # five times as many artifacts: the count must not move
        publish(lib, ns, f"s{i}", prompt[:BLOCK] + tokens_of(f"tail{i}", i % 7 + 1))
    assert (statements(ADMIN, query), statements(Principal(), query)) == small == (2, 2)
    with db.read() as s:
        size = s.scalar(select(LogHead.size))
    for token in (None, ""):
        ask(lib, keys_of(prompt), token)
        ask(lib, [], token)
    refused(lib, body(["nope"]), 400, "DIGEST_INVALID")
    with db.read() as s:
        assert s.scalar(select(LogHead.size)) == size


# --- blocks follow their envelope ------------------------------------------------------------------------


def test_blocks_are_written_with_the_envelope_and_deleted_with_it(lib: Library) -> None:
    ns = lib.namespace()
    prompt = tokens_of("delete", 3 * BLOCK)
    keep = publish(lib, ns, "keep", prompt[: 2 * BLOCK])
    gone = publish(lib, ns, "gone", [*prompt, 5])
    db = lib.app_state.db

    def blocks(digest: Digest) -> list[tuple[int, str]]:
        with db.read() as s:
            rows = s.execute(
                select(EnvelopeBlock.block_index, EnvelopeBlock.block_key)
                .where(EnvelopeBlock.manifest_digest == digest)
                .order_by(EnvelopeBlock.block_index)
            ).all()
        return [(int(i), str(k)) for i, k in rows]

    expected = [(i, str(k)) for i, k in enumerate(block_keys(*FPS, [*prompt, 5], BLOCK))]
    assert blocks(gone) == expected and len(expected) == 4  # the partial last block too
    assert matched(ask(lib, keys_of(prompt))) == [(gone, 3), (keep, 2)]
    # Storing the same envelope again changes nothing.
    with db.read() as s:
        envelope = s.scalar(select(Envelope.envelope).where(Envelope.manifest_digest == gone))
    r = lib.api("PUT", f"/namespaces/{ns}/envelopes/{gone}", content=bytes(envelope))
    assert r.status_code == 200, r.text
    assert blocks(gone) == expected
    r = lib.api("DELETE", f"/namespaces/{ns}/refs/gone", headers={"If-Match": f'"{gone}"'})
    assert r.status_code == 204, r.text
    r = lib.api("DELETE", f"/namespaces/{ns}/envelopes/{gone}")
    assert r.status_code == 204, r.text
    assert blocks(gone) == []
    assert matched(ask(lib, keys_of(prompt))) == [(keep, 2)]
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(EnvelopeBlock)) == 2


# --- the migration ------------------------------------------------------------------------------------


def test_the_migration_backfills_envelopes_stored_before_it(lib: Library, database_url: str) -> None:
    ns = lib.namespace()
    prompt = tokens_of("backfill", 3 * BLOCK)
    a = publish(lib, ns, "a", [*prompt, 1], prompt_tokens=3 * BLOCK)
    b = publish(lib, ns, "b", prompt[:BLOCK], verdict=None)
    before = ask(lib, keys_of(prompt))
    assert matched(before) == [(a, 3), (b, 1)]
    db = lib.app_state.db
    db.engine.dispose()  # no pooled connection holds the tables while they change
    sqlite = database_url.startswith("sqlite")
    command.downgrade(alembic_config(database_url), "0004")
    raw = Database(database_url)
    try:
        with raw.write() as s:  # a row whose envelope does not parse: left without blocks
            template = dict(
                s.execute(text("SELECT * FROM envelopes WHERE manifest_digest = :d"), {"d": b})
                .mappings()
                .one()
            )
            template.pop("search_vector", None)
            odd = str(Digest.of_bytes(b"an odd row"))
            s.execute(
                text("INSERT INTO objects (digest, size, created_at) VALUES (:d, 1, :t)"),
                {"d": odd, "t": template["created_at"]},
            )
            s.execute(
                text("INSERT INTO namespace_objects (namespace_id, digest, created_at) VALUES (:n, :d, :t)"),
                {"n": template["namespace_id"], "d": odd, "t": template["created_at"]},
            )
            columns = [c for c in template if c != "rowid"]
            marks = ", ".join(":" + c for c in columns)
            s.execute(
                text(f"INSERT INTO envelopes ({', '.join(columns)}) VALUES ({marks})"),
                {**template, "manifest_digest": odd, "envelope": b"{}"},
            )
        if sqlite:
            with raw.read() as s:
                triggers = s.scalar(text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"))
            assert triggers == 3  # the full-text triggers of 0004 survive the downgrade
    finally:
        raw.dispose()
    upgrade(database_url)
    after = ask(lib, keys_of(prompt))
    assert after == before
    assert after[0]["prompt_tokens"] == 3 * BLOCK and after[1]["prompt_tokens"] is None
    with db.read() as s:
        assert s.scalar(select(func.count()).where(EnvelopeBlock.manifest_digest == odd)) == 0
        assert s.scalar(select(func.count()).select_from(EnvelopeBlock)) == 4 + 1
    assert odd in [c["manifest_digest"] for c in ask(lib, [])]  # listed by fingerprint all the same
    # Search's full-text index still follows new envelopes.
    c = publish(lib, ns, "c", prompt[: 2 * BLOCK])
    r = lib.api("GET", "/artifacts", params={"q": "solution", "namespace": ns})
    assert c in [x["digest"] for x in r.json()["artifacts"]]
