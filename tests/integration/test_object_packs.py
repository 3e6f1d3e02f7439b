"""Object packs (``POST .../uploads/{id}/objects``) against the real server, on both backends:
objects stored and held with the same audit entries as single PUTs, dedupe, every refusal
(with nothing changed), a lie in the middle refusing all, a client gone mid-body, and push
sending packs (or single PUTs to a registry without them)."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvreg.core.digest import Digest
from kvreg.core.merkle import root_from_leaf_hashes
from kvreg.core.names import RefName
from kvreg.remote.http import connect
from kvreg.remote.pushing import push
from kvreg.store.home import Home

from .http_helpers import error_code
from .registry_server import MAX_OBJECT_BYTES, Registry
from .test_push_pull import _pusher, _writer

HEADER = "X-Kvreg-Objects"


def _blobs(n: int, size: int = 3000) -> list[bytes]:
    return [os.urandom(size) + uuid.uuid4().bytes for _ in range(n)]


def _header(items: list[tuple[Digest | str, int]]) -> str:
    return ",".join(f"{d}={size}" for d, size in items)


def _open(c: httpx.Client, ns: str, digests: list[Digest]) -> str:
    r = c.post(f"/namespaces/{ns}/uploads", json={"digests": digests})
    assert r.status_code == 201, r.text
    return str(r.json()["upload"])


def _pack(c: httpx.Client, ns: str, upload: str, blobs: list[bytes], **headers: str) -> httpx.Response:
    items = [(Digest.of_bytes(b), len(b)) for b in blobs]
    return c.post(
        f"/namespaces/{ns}/uploads/{upload}/objects",
        content=b"".join(blobs),
        headers={HEADER: _header(items), "Content-Type": "application/octet-stream", **headers},
    )


def _log_size(c: httpx.Client) -> int:
    return int(c.get("/log/entries", params={"start": 0, "end": 0}).json()["size"])


def _entries(c: httpx.Client, start: int, end: int) -> list[dict[str, Any]]:
    got = c.get("/log/entries", params={"start": start, "end": end}).json()["entries"]
    return [json.loads(base64.b64decode(e["entry"])) for e in got]


def _state(registry: Registry, c: httpx.Client, ns: str, digests: list[Digest]) -> tuple[Any, ...]:
    """What a refusal must not change: the stored objects, the namespace's holds, the log, temp files."""
    missing = c.post(f"/namespaces/{ns}/objects/missing", json={"digests": digests}).json()["missing"]
    tmp = Path(registry.storage_url) / "tmp"
    temp = sorted(p.name for p in tmp.glob("*")) if registry.backend == "sqlite-folder" else []
    return registry.stored_digests(), missing, _log_size(c), temp


@pytest.mark.parametrize("size", [3000, 2 << 20], ids=["small", "from-the-socket"])
def test_a_pack_stores_and_logs_as_single_puts_do(registry: Registry, size: int) -> None:
    ns = registry.namespace()
    blobs = [*_blobs(3, size), b""]
    single = _blobs(1)[0]
    digests = [Digest.of_bytes(b) for b in blobs]
    with registry.admin() as c:
        upload = _open(c, ns, [*digests, Digest.of_bytes(single)])
        before = _log_size(c)
        r = _pack(c, ns, upload, blobs)
        assert r.status_code == 200, r.text
        answer = r.json()["objects"]
        assert [o["digest"] for o in answer] == digests
        assert [o["size"] for o in answer] == [len(b) for b in blobs]
        assert all(o["stored"] in (True, False) for o in answer)
        assert [o["stored"] for o in answer[:3]] == [True, True, True]
        assert [o["log_index"] for o in answer] == list(range(before, before + 4))
        packed = _entries(c, before, before + 4)
        for o in answer:
            got = c.get(f"/namespaces/{ns}/objects/{o['digest']}")
            assert got.status_code == 200 and Digest.of_bytes(got.content) == o["digest"]
        # A single PUT of another object logs the same entry.
        put = c.put(f"/namespaces/{ns}/objects/{Digest.of_bytes(single)}", content=single)
        assert put.status_code == 201, put.text
        (one,) = _entries(c, before + 4, before + 5)
    for entry, d, b in zip(packed, digests, blobs, strict=True):
        assert entry["type"] == one["type"] == "object.held"
        assert entry["actor"] == one["actor"] and entry["namespace"] == one["namespace"] == ns
        assert entry["subjects"] == [d] and entry["details"] == {"size": len(b)}
        assert set(entry) == set(one)
    stored = registry.stored_digests()
    assert all(stored[d] == len(b) for d, b in zip(digests, blobs, strict=True))
    # The log's stored tree (the nodes the batched append wrote) is the tree of its leaves.
    with registry.admin() as c:
        size = _log_size(c)
        leaves: list[bytes] = []
        while len(leaves) < size:
            page = c.get("/log/entries", params={"start": len(leaves), "end": size}).json()["entries"]
            leaves += [base64.b64decode(e["leaf_hash"]) for e in page]
        proof = c.get("/log/proof/consistency", params={"first": 0, "second": size})
        assert proof.status_code == 200, proof.text
        assert base64.b64decode(proof.json()["root"]) == root_from_leaf_hashes(leaves)


def test_a_pack_of_held_objects_stores_nothing_new(registry: Registry) -> None:
    ns = registry.namespace()
    blobs = _blobs(2)
    digests = [Digest.of_bytes(b) for b in blobs]
    with registry.admin() as c:
        assert _pack(c, ns, _open(c, ns, digests), blobs).status_code == 200
        upload = _open(c, ns, digests)
        before = _log_size(c)
        again = _pack(c, ns, upload, blobs)
        assert again.status_code == 200, again.text
        assert [(o["stored"], o["log_index"]) for o in again.json()["objects"]] == [(False, None)] * 2
        assert _log_size(c) == before
        # Held by another namespace: stored once, a new hold and its entry here.
        other = registry.namespace()
        upload = _open(c, other, digests)
        before = _log_size(c)
        third = _pack(c, other, upload, blobs).json()["objects"]
        assert [o["stored"] for o in third] == [False, False]
        assert [o["log_index"] for o in third] == [before, before + 1]


def test_a_digest_the_session_does_not_list_is_added_as_a_put_adds_it(registry: Registry) -> None:
    ns = registry.namespace()
    blobs = _blobs(2)
    digests = [Digest.of_bytes(b) for b in blobs]
    with registry.admin() as c:
        upload = _open(c, ns, digests[:1])
        r = _pack(c, ns, upload, blobs)
        assert r.status_code == 200, r.text
        assert [o["digest"] for o in r.json()["objects"]] == digests
        assert c.post(f"/namespaces/{ns}/objects/missing", json={"digests": digests}).json()["missing"] == []


def _refusals(
    c: httpx.Client, ns: str, upload: str, blobs: list[bytes]
) -> list[tuple[str, dict[str, str], bytes, int, str]]:
    """(what, headers, body, status, code) of requests the registry must refuse."""
    items = [(Digest.of_bytes(b), len(b)) for b in blobs]
    body = b"".join(blobs)
    good = _header(items)
    big = Digest.of_bytes(b"big")
    return [
        ("no header", {}, body, 400, "REQUEST_INVALID"),
        ("malformed header", {HEADER: good.replace("=", ":", 1)}, body, 400, "REQUEST_INVALID"),
        ("a digest twice", {HEADER: _header([items[0], *items])}, blobs[0] + body, 400, "REQUEST_INVALID"),
        ("length != sizes", {HEADER: _header([(items[0][0], items[0][1] + 1), *items[1:]])}, body, 400, ""),
        ("too many objects", {HEADER: ",".join([good] * 90)}, body, 413, "BODY_TOO_LARGE"),
        ("one too large", {HEADER: _header([(big, MAX_OBJECT_BYTES + 1)])}, body, 413, "BODY_TOO_LARGE"),
    ]


@pytest.mark.parametrize("size", [3000, 2 << 20], ids=["small", "from-the-socket"])
def test_every_refusal_changes_nothing(registry: Registry, size: int) -> None:
    ns = registry.namespace()
    blobs = _blobs(3, size)
    digests = [Digest.of_bytes(b) for b in blobs]
    with registry.admin() as c:
        upload = _open(c, ns, digests)
        other = registry.namespace()
        foreign = _open(c, other, digests)
        closed = _open(c, ns, digests)
        assert c.delete(f"/namespaces/{ns}/uploads/{closed}").status_code == 204
        before = _state(registry, c, ns, digests)
        for what, headers, body, status, code in _refusals(c, ns, upload, blobs):
            r = c.post(f"/namespaces/{ns}/uploads/{upload}/objects", content=body, headers=headers)
            assert r.status_code == status, (what, r.text)
            assert error_code(r) == (code or "REQUEST_INVALID"), what
        # The session: unknown, closed, another namespace's.
        for session in (str(uuid.uuid4()), closed, foreign):
            r = _pack(c, ns, session, blobs)
            assert r.status_code == 404 and error_code(r) == "UPLOAD_UNKNOWN", r.text
        assert _pack(c, ns, "not-a-uuid", blobs).status_code == 400
        # A lie in the middle refuses the whole pack.
        lie = [blobs[0], bytes([blobs[1][0] ^ 1]) + blobs[1][1:], blobs[2]]
        r = c.post(
            f"/namespaces/{ns}/uploads/{upload}/objects",
            content=b"".join(lie),
            headers={HEADER: _header([(d, len(b)) for d, b in zip(digests, blobs, strict=True)])},
        )
        assert r.status_code == 422 and error_code(r) == "DIGEST_MISMATCH", r.text
        assert r.json()["error"]["details"]["expected"] == digests[1]
        assert _state(registry, c, ns, digests) == before
        # The connection and the session still serve a good pack.
        assert _pack(c, ns, upload, blobs).status_code == 200


def test_the_pack_limits_are_published(registry: Registry) -> None:
    with registry.http() as c:
        limits = c.get("/").json()["limits"]
    assert limits["max_pack_objects"] == 256 and limits["max_pack_bytes"] == 256 << 20


def test_roles_and_private_namespaces_as_for_a_put(registry: Registry) -> None:
    ns = registry.namespace()
    blobs = _blobs(2)
    digests = [Digest.of_bytes(b) for b in blobs]
    reader_token, outsider_token = registry.user({ns: "read"}), registry.user()
    with registry.admin() as c:
        upload = _open(c, ns, digests)
        before = _state(registry, c, ns, digests)
    with registry.http(reader_token) as reader:
        r = _pack(reader, ns, upload, blobs)
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN", r.text
    with registry.http(outsider_token) as outsider:
        r = _pack(outsider, ns, upload, blobs)
        assert r.status_code == 404 and error_code(r) == "NAMESPACE_UNKNOWN", r.text
    with registry.http() as anonymous:
        assert _pack(anonymous, ns, upload, blobs).status_code == 401
    with registry.admin() as c:
        assert _state(registry, c, ns, digests) == before


@pytest.mark.parametrize("cut", ["inside the first object", "inside the last object"])
def test_a_client_gone_mid_pack_stores_nothing(registry: Registry, cut: str) -> None:
    ns = registry.namespace()
    blobs = _blobs(3, size=2 << 20)  # large enough for the server to read it from the socket
    digests = [Digest.of_bytes(b) for b in blobs]
    body = b"".join(blobs)
    sent = len(blobs[0]) // 2 if cut == "inside the first object" else len(body) - 1000
    with registry.admin() as c:
        upload = _open(c, ns, digests)
        before = _state(registry, c, ns, digests)
        host, port = registry.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as s:
            head = (
                f"POST /api/v1/namespaces/{ns}/uploads/{upload}/objects HTTP/1.1\r\n"
                f"Host: {host}\r\nAuthorization: Bearer {registry.admin_token}\r\n"
                f"{HEADER}: {_header([(d, len(b)) for d, b in zip(digests, blobs, strict=True)])}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            s.sendall(head.encode() + body[:sent])
            time.sleep(0.5)
        deadline = time.monotonic() + 20
        while _state(registry, c, ns, digests) != before and time.monotonic() < deadline:
            time.sleep(0.2)  # the server notices the closed connection and cleans up
        assert _state(registry, c, ns, digests) == before
        assert _pack(c, ns, upload, blobs).status_code == 200  # and serves on


def _counting(client: Any) -> dict[str, list[int]]:
    calls: dict[str, list[int]] = {"packs": [], "puts": []}
    put_objects, put_object = client.put_objects, client.put_object

    def packs(ns: str, upload: str, items: Any, **kw: Any) -> Any:
        calls["packs"].append(len(items))
        return put_objects(ns, upload, items, **kw)

    def puts(*a: Any, **kw: Any) -> Any:
        calls["puts"].append(1)
        return put_object(*a, **kw)

    client.put_objects, client.put_object = packs, puts
    return calls


@pytest.mark.parametrize("packs", [True, False])
def test_push_sends_packs_or_falls_back_to_puts(
    registry: Registry, depositor: dict[str, Any], make_home, packs: bool
) -> None:
    ns, token = _writer(registry, depositor)
    home = Home(_pusher(depositor, make_home(registry, token)))
    with connect(home, "origin") as client:
        if not packs:  # an older registry: no pack limits published
            del client.info()["limits"]["max_pack_objects"]
        calls = _counting(client)
        report = push(home, client, RefName.parse("src/p07"), remote_ref=RefName.parse(f"{ns}/p07"))
    sizes = {d: home.objects.size(d) for d in depositor["manifests"]["p07"].object_digests()}
    assert report.objects_sent == report.objects_missing == len(sizes) > 1
    assert report.bytes_sent == sum(sizes.values())
    if packs:
        # A small artifact: one pack for each of push's 4 jobs (kvreg.remote.packing), no PUT.
        assert calls["puts"] == [] and sum(calls["packs"]) == len(sizes)
        assert 1 < len(calls["packs"]) <= 4
    else:
        assert calls == {"packs": [], "puts": [1] * len(sizes)}
    with registry.http(token) as c:
        missing = c.post(f"/namespaces/{ns}/objects/missing", json={"digests": list(sizes)}).json()
        assert missing["missing"] == []
