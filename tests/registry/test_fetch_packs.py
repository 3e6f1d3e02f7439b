"""Fetch packs (``POST /namespaces/{ns}/objects/fetch``) in process, on SQLite and PostgreSQL: the
objects' bytes in the order asked with their sizes listed, every object checked before a byte goes
out, the same refusals as a single GET for every kind of caller, and the count limit
(``max_fetch_objects``). That a registry redirecting downloads to S3 does not offer them is in
``tests/integration/test_gc_search_scale.py``."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kvreg.core.digest import Digest
from kvreg_registry.app import create_app
from kvreg_registry.auth import Principal
from kvreg_registry.settings import Settings

OPERATOR = Principal(is_admin=True, name="operator")
BLOBS = [b"", b"x", b"second object\n" * 700, bytes(range(256)) * 40]
DIGESTS = [str(Digest.from_hex(hashlib.sha256(b).hexdigest())) for b in BLOBS]
PUBLIC = b"held by the public namespace\n" * 30
NEVER = str(Digest.from_hex(hashlib.sha256(b"stored nowhere").hexdigest()))


@dataclass
class Reg:
    client: TestClient
    tokens: dict[str, str | None]

    def fetch(self, caller: str, namespace: str, digests: list[Any]) -> Any:
        token = self.tokens[caller]
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return self.client.post(
            f"/api/v1/namespaces/{namespace}/objects/fetch", json={"digests": digests}, headers=headers
        )

    def get(self, caller: str, namespace: str, digest: str) -> Any:
        token = self.tokens[caller]
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return self.client.get(f"/api/v1/namespaces/{namespace}/objects/{digest}", headers=headers)


def _registry(tmp_path: Path, database_url: str, **settings: Any) -> Iterator[Reg]:
    from kvreg_registry.services import accounts

    app = create_app(Settings(data_dir=tmp_path / "reg", database_url=database_url, **settings))
    with TestClient(app, base_url="http://testserver") as client:
        st = app.state.registry
        tokens: dict[str, str | None] = {"anonymous": None}
        with st.db.write() as s:
            for user in ("writer", "reader", "stranger"):
                accounts.create_user(s, OPERATOR, user)
                tokens[user] = accounts.create_token(s, OPERATOR, user, label=user).token
            tokens["unknown"] = "kvreg_" + "U" * 43
            accounts.create_namespace(s, OPERATOR, "team")
            accounts.create_namespace(s, OPERATOR, "pub", public=True)
            accounts.create_namespace(s, OPERATOR, "empty")
            for ns in ("team", "pub"):
                accounts.set_role(s, OPERATOR, ns, "writer", "write")
            accounts.set_role(s, OPERATOR, "team", "reader", "read")
        for ns, blobs in (("team", BLOBS), ("pub", [PUBLIC])):
            for blob in blobs:
                digest = Digest.from_hex(hashlib.sha256(blob).hexdigest())
                r = client.put(
                    f"/api/v1/namespaces/{ns}/objects/{digest}",
                    content=blob,
                    headers={"Authorization": f"Bearer {tokens['writer']}"},
                )
                assert r.status_code in (200, 201), r.text
        yield Reg(client, tokens)


@pytest.fixture
def reg(tmp_path: Path, database_url: str) -> Iterator[Reg]:
    yield from _registry(tmp_path, database_url)


def _listing(digests: list[str], blobs: list[bytes]) -> str:
    return ",".join(f"{d}={len(b)}" for d, b in zip(digests, blobs, strict=True))


def test_the_objects_come_in_the_order_asked_with_their_sizes(reg: Reg) -> None:
    for order in ([0, 1, 2, 3], [3, 0, 2, 1], [2]):
        digests, blobs = [DIGESTS[i] for i in order], [BLOBS[i] for i in order]
        r = reg.fetch("reader", "team", digests)
        assert r.status_code == 200, r.text
        assert r.content == b"".join(blobs)
        assert r.headers["x-kvreg-objects"] == _listing(digests, blobs)
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["cache-control"] == "private, no-store"
    r = reg.fetch("anonymous", "pub", [str(Digest.of_bytes(PUBLIC))])
    assert (r.status_code, r.content) == (200, PUBLIC)


def test_a_digest_asked_twice_comes_once(reg: Reg) -> None:
    r = reg.fetch("reader", "team", [DIGESTS[2], DIGESTS[2], DIGESTS[3]])
    assert r.status_code == 200
    assert r.headers["x-kvreg-objects"] == _listing([DIGESTS[2], DIGESTS[3]], [BLOBS[2], BLOBS[3]])
    assert r.content == BLOBS[2] + BLOBS[3]


def test_one_object_the_namespace_lacks_refuses_the_pack_before_any_byte(reg: Reg) -> None:
    public = str(Digest.of_bytes(PUBLIC))  # stored, but held by another namespace
    for missing in (NEVER, public):
        r = reg.fetch("reader", "team", [DIGESTS[2], missing, DIGESTS[3]])
        assert r.status_code == 404
        assert r.headers["x-kvreg-error-code"] == "OBJECT_UNKNOWN"
        assert missing in r.json()["error"]["message"]
        assert "x-kvreg-objects" not in r.headers


def test_malformed_and_oversized_requests_are_refused(tmp_path: Path, database_url: str) -> None:
    for reg in _registry(tmp_path, database_url, max_pack_objects=2):
        for body, code in (
            ({"digests": ["sha256:ABC"]}, "DIGEST_INVALID"),
            ({"digests": "sha256:..."}, "REQUEST_INVALID"),
            ({"digest": []}, "REQUEST_INVALID"),
            ([], "REQUEST_INVALID"),
        ):
            r = reg.client.post(
                "/api/v1/namespaces/team/objects/fetch",
                json=body,
                headers={"Authorization": f"Bearer {reg.tokens['reader']}"},
            )
            assert r.status_code in (400, 422), (body, r.text)
            assert r.headers["x-kvreg-error-code"] == code, body
        r = reg.fetch("reader", "team", DIGESTS[:3])
        assert (r.status_code, r.headers["x-kvreg-error-code"]) == (413, "BODY_TOO_LARGE")
        assert reg.fetch("reader", "team", DIGESTS[2:]).status_code == 200
        info = reg.client.get("/api/v1/").json()
        assert info["limits"]["max_fetch_objects"] == 2


def test_every_caller_is_answered_as_by_a_single_get(reg: Reg) -> None:
    """For a pack of one object, status and error code equal a GET's, for each kind of caller,
    namespace and digest; a pack of several answers as its first refused object would."""
    public = str(Digest.of_bytes(PUBLIC))
    cases = itertools.product(
        reg.tokens, ("team", "pub", "empty", "nowhere"), (DIGESTS[2], public, NEVER, "sha256:ABC", "x")
    )
    granted = set()
    for caller, namespace, digest in cases:
        single = reg.get(caller, namespace, digest)
        packed = reg.fetch(caller, namespace, [digest])
        assert (packed.status_code, packed.headers.get("x-kvreg-error-code")) == (
            single.status_code,
            single.headers.get("x-kvreg-error-code"),
        ), (caller, namespace, digest)
        if single.status_code == 200:
            assert packed.content == single.content
            granted.add((caller, namespace))
    assert granted == {("writer", "team"), ("reader", "team")} | {
        (c, "pub") for c in ("anonymous", "writer", "reader", "stranger")
    }


def test_the_object_methods_on_a_query_path_are_405(reg: Reg) -> None:
    """``.../objects/fetch`` and ``.../objects/missing`` are queries, not objects named so."""
    for query in ("fetch", "missing"):
        for method in ("GET", "HEAD", "PUT", "DELETE"):
            r = reg.client.request(
                method,
                f"/api/v1/namespaces/team/objects/{query}",
                headers={"Authorization": f"Bearer {reg.tokens['writer']}"},
            )
            assert (r.status_code, r.headers.get("allow")) == (405, "POST"), (query, method)
