"""``RegistryClient.route`` against a real registry (``kvreg serve`` on loopback, SQLite + folder).

Artifacts are published with the client itself (objects, signed envelope, ref), built
by ``tests/remote/helpers.build_artifact``: artifacts of the same seed share a token
prefix, so their block keys agree on the shared full blocks. The client sends only
keys; the answer comes back as typed ``RouteCandidate`` values, longest prefix first,
private namespaces hidden from an anonymous client. The client refuses bad requests
before sending them, and the server's refusals arrive as typed errors. The SQL itself
is tested on both backends in ``tests/registry/test_router.py``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from integration.registry_server import Registry, running_registry
from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.errors import InvalidDigestError, RequestInvalidError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.remote.api.search import MAX_ROUTE_KEYS, RouteCandidate
from kvreg.remote.http import RegistryClient

from .helpers import CONFIG_FP, MODEL_FP, TOKENIZER_FP, Built, build_artifact

BLOCK = 4


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry("sqlite-folder", tmp_path_factory.mktemp("route-registry")) as reg:
        yield reg


def push(client: RegistryClient, namespace: str, ref: str, built: Built) -> None:
    for digest, data in built.objects.items():
        client.put_object(namespace, digest, io.BytesIO(data), len(data))
    raw = built.manifest.raw_bytes
    client.put_object(namespace, built.digest, io.BytesIO(raw), len(raw))
    client.put_envelope(namespace, built.digest, built.envelope_bytes)
    client.put_ref(namespace, ref, built.digest, None)


def prompt_keys(seed: int, tokens: int) -> list[Digest]:
    """The keys of the full blocks of the first ``tokens`` tokens of ``build_artifact(seed=seed)``."""
    ids = [(seed * 7919 + i) % 5000 + 1 for i in range(tokens)]
    return block_keys(MODEL_FP, TOKENIZER_FP, CONFIG_FP, ids[: tokens // BLOCK * BLOCK], BLOCK)


def route(client: RegistryClient, keys: list[Digest], **kw: object) -> list[RouteCandidate]:
    return client.route(
        model_fingerprint=MODEL_FP,
        tokenizer_fingerprint=TOKENIZER_FP,
        config_fingerprint=CONFIG_FP,
        block_size=BLOCK,
        block_keys=keys,
        **kw,  # type: ignore[arg-type]
    )


def test_route_through_the_client(registry: Registry) -> None:
    key = SigningKey.generate()
    public, private = registry.namespace(public=True), registry.namespace(public=False)
    for ns in (public, private):
        registry.register_key(ns, key.public_key.to_text())
    long = build_artifact(key, token_count=20, block_size=BLOCK, chunk_bytes=64, seed=3)
    short = build_artifact(key, token_count=10, block_size=BLOCK, chunk_bytes=64, seed=3)
    other = build_artifact(key, token_count=12, block_size=BLOCK, chunk_bytes=64, seed=4)
    hidden = build_artifact(key, token_count=16, block_size=BLOCK, chunk_bytes=64, seed=3)
    with RegistryClient(registry.url, registry.admin_token, retries=0) as admin:
        push(admin, public, "long", long)
        push(admin, public, "short", short)
        push(admin, public, "other", other)
        push(admin, private, "hidden", hidden)
        keys = prompt_keys(3, 16)  # four full blocks of seed 3's tokens
        got = route(admin, keys)
        # Four blocks each: the newer first; then two blocks (and a partial third).
        assert [(c.namespace, c.manifest_digest, c.matched_blocks) for c in got] == [
            (private, hidden.digest, 4),
            (public, long.digest, 4),
            (public, short.digest, 2),
        ]
        first = next(c for c in got if c.manifest_digest == long.digest)
        assert isinstance(first.manifest_digest, Digest)
        assert first.refs == ["long"] and first.token_count == 20 and first.block_size == BLOCK
        assert first.verdict == "pass" and first.verifier == "exact-match" and first.prompt_tokens is None
        assert first.created_at is not None and first.created_at.endswith("Z")
        # Only some namespaces; a limit.
        assert [c.manifest_digest for c in route(admin, keys, namespaces=[private])] == [hidden.digest]
        assert len(route(admin, keys, limit=1)) == 1
        # No keys: every artifact of the engine and block size.
        listed = route(admin, [], namespaces=[public])
        assert {c.manifest_digest for c in listed} == {long.digest, short.digest, other.digest}
        assert all(c.matched_blocks == 0 for c in listed)
        # Refused here, before any request.
        with pytest.raises(UsageError, match="more than the registry's limit"):
            route(admin, [Digest.of_bytes(str(i).encode()) for i in range(MAX_ROUTE_KEYS + 1)])
        with pytest.raises(UsageError, match="limit must be"):
            route(admin, keys, limit=101)
        with pytest.raises(InvalidDigestError):
            route(admin, ["sha256:nope"])  # type: ignore[list-item]
        # Refused by the registry, as a typed error: a repeated key.
        with pytest.raises(RequestInvalidError, match="repeats"):
            route(admin, [keys[0], keys[0]])
    with RegistryClient(registry.url, retries=0) as anonymous:
        got = route(anonymous, keys)
        assert [(c.namespace, c.manifest_digest, c.matched_blocks) for c in got] == [
            (public, long.digest, 4),
            (public, short.digest, 2),
        ]
        assert route(anonymous, keys, namespaces=[private]) == []


def test_a_malformed_answer_is_refused() -> None:
    """The reply is checked strictly: a candidate that claims more blocks than were sent, or
    another block size, is a ``RemoteError`` (a scripted server, not the registry)."""
    from kvreg.core.errors import RemoteError

    from .helpers import serve

    keys = prompt_keys(5, 8)
    good = {
        "namespace": "ns",
        "manifest_digest": str(Digest.of_bytes(b"m")),
        "refs": ["r"],
        "matched_blocks": 2,
        "token_count": 9,
        "prompt_tokens": None,
        "block_size": BLOCK,
        "verdict": "pass",
        "verifier": "v",
        "created_at": "2026-11-29T12:00:00Z",
    }
    bad = [
        {**good, "matched_blocks": 3},
        {**good, "block_size": 8},
        {**good, "manifest_digest": "sha256:x"},
        {**good, "refs": ["../x"]},
        {**good, "token_count": -1},
        {**good, "verdict": 1},
    ]
    with serve() as server, RegistryClient(server.url, retries=0) as client:
        server.route("/api/v1/route", {"candidates": [good], "limit": 20}, method="POST")
        assert route(client, keys)[0] == RouteCandidate(
            "ns", Digest.of_bytes(b"m"), ["r"], 2, 9, None, BLOCK, "pass", "v", "2026-11-29T12:00:00Z"
        )
        sent = server.requests("POST", "/api/v1/route")[-1]
        assert b'"block_keys"' in sent.body and b"tokens" not in sent.body
        for candidate in bad:
            server.route("/api/v1/route", {"candidates": [candidate], "limit": 20}, method="POST")
            with pytest.raises(RemoteError):
                route(client, keys)
        server.route("/api/v1/route", {"candidates": [good, good], "limit": 20}, method="POST")
        with pytest.raises(RemoteError):
            route(client, keys, limit=1)
