"""Every refusal of the registry, against the real server on both backends: each answers
with its stable error code and leaves nothing stored or moved."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.helpers import BLOCK, kvreg, snapshot

from .conftest import read_manifest
from .http_helpers import depositor_key, envelope_bytes, error_code, signed, upload_objects
from .registry_server import MAX_JSON_BYTES, MAX_OBJECT_BYTES, Registry

OTHER = "sha256:" + "0" * 64


@pytest.fixture
def ns_admin(registry: Registry, depositor: dict[str, Any]) -> tuple[str, httpx.Client]:
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    client = registry.admin()
    return ns, client


def test_object_whose_bytes_do_not_match_is_refused(registry: Registry, ns_admin) -> None:
    ns, c = ns_admin
    data = b"the bytes the client claims are something else " + uuid.uuid4().bytes
    from kvreg.core.digest import Digest

    claimed = Digest.of_bytes(b"other bytes " + uuid.uuid4().bytes)
    r = c.put(f"/namespaces/{ns}/objects/{claimed}", content=data)
    assert r.status_code == 422 and error_code(r) == "DIGEST_MISMATCH"
    assert c.head(f"/namespaces/{ns}/objects/{claimed}").status_code == 404
    assert c.post(f"/namespaces/{ns}/objects/missing", json={"digests": [claimed]}).json()["missing"] == [
        claimed
    ]
    assert str(claimed) not in registry.stored_digests()
    assert str(Digest.of_bytes(data)) not in registry.stored_digests()


def test_envelope_signed_by_an_unregistered_key_is_refused(ns_admin, depositor: dict[str, Any]) -> None:
    from kvreg.core.keys import SigningKey

    ns, c = ns_admin
    m = depositor["manifests"]["p07"]
    upload_objects(c, ns, depositor["home"], m)
    digest, envelope = signed(json.loads(m.raw_bytes), SigningKey.generate())
    r = c.put(f"/namespaces/{ns}/envelopes/{digest}", content=envelope)
    assert r.status_code == 422 and error_code(r) == "SIGNATURE_INVALID"
    assert c.get(f"/namespaces/{ns}/envelopes/{digest}").status_code == 404
    assert c.get("/artifacts", params={"namespace": ns}).json()["total"] == 0


def test_envelope_referencing_a_missing_object_is_refused(ns_admin, depositor: dict[str, Any]) -> None:
    ns, c = ns_admin
    m = depositor["manifests"]["p07"]
    absent = str(m.chunks[1].digest)
    upload_objects(c, ns, depositor["home"], m, skip={absent})
    r = c.put(f"/namespaces/{ns}/envelopes/{m.digest}", content=envelope_bytes(depositor["home"], m))
    assert r.status_code == 422 and error_code(r) == "OBJECTS_MISSING"
    assert r.json()["error"]["details"]["missing"] == [absent]
    assert c.get(f"/namespaces/{ns}/envelopes/{m.digest}").status_code == 404
    assert c.head(f"/namespaces/{ns}/objects/{m.digest}").status_code == 404


def test_merkle_root_not_matching_the_chunk_list_is_refused(ns_admin, depositor: dict[str, Any]) -> None:
    ns, c = ns_admin
    m = depositor["manifests"]["p07"]
    upload_objects(c, ns, depositor["home"], m)
    doc = json.loads(m.raw_bytes)
    doc["merkle_root"] = OTHER
    digest, envelope = signed(doc, depositor_key(depositor))
    r = c.put(f"/namespaces/{ns}/envelopes/{digest}", content=envelope)
    assert r.status_code == 422 and error_code(r) == "PROOF_INVALID"
    assert c.get(f"/namespaces/{ns}/envelopes/{digest}").status_code == 404


def test_payload_not_matching_the_url_digest_is_refused(ns_admin, depositor: dict[str, Any]) -> None:
    ns, c = ns_admin
    m = depositor["manifests"]["p07"]
    upload_objects(c, ns, depositor["home"], m)
    r = c.put(f"/namespaces/{ns}/envelopes/{OTHER}", content=envelope_bytes(depositor["home"], m))
    assert r.status_code == 422 and error_code(r) == "DIGEST_MISMATCH"


def test_token_without_write_role_gets_403(registry: Registry, depositor: dict[str, Any]) -> None:
    ns = registry.namespace()
    reader = registry.user({ns: "read"})
    m = depositor["manifests"]["p07"]
    data = b"bytes a reader may not upload " + uuid.uuid4().bytes
    with registry.http(reader) as c:
        from kvreg.core.digest import Digest

        d = Digest.of_bytes(data)
        for r in (
            c.put(f"/namespaces/{ns}/objects/{d}", content=data),
            c.post(f"/namespaces/{ns}/uploads", json={"digests": [d]}),
            c.put(f"/namespaces/{ns}/envelopes/{m.digest}", content=b"{}"),
            c.put(
                f"/namespaces/{ns}/refs/p07", json={"digest": str(m.digest)}, headers={"If-None-Match": "*"}
            ),
        ):
            assert r.status_code == 403 and error_code(r) == "FORBIDDEN", r.text
        assert c.get(f"/namespaces/{ns}/refs").status_code == 200
    assert str(d) not in registry.stored_digests()


def test_private_namespace_needs_a_token(registry: Registry, depositor: dict[str, Any], make_home) -> None:
    private = registry.namespace()
    public = registry.namespace(public=True)
    with registry.http() as anonymous:
        r = anonymous.get(f"/namespaces/{private}/refs")
        assert r.status_code == 401 and error_code(r) == "UNAUTHENTICATED"
        assert r.headers["www-authenticate"].startswith("Bearer")
        missing = anonymous.get(f"/namespaces/nope-{uuid.uuid4().hex[:8]}/refs")
        assert missing.status_code == 401, "a missing namespace must look like a private one"
        assert anonymous.get(f"/namespaces/{public}/refs").status_code == 200
        r = anonymous.post(f"/namespaces/{public}/uploads", json={"digests": []})
        assert r.status_code == 401
        bad = httpx.get(f"{registry.url}/api/v1/whoami", headers={"Authorization": "Bearer kvreg_nonsense"})
        assert bad.status_code == 401
    outsider = registry.user()
    with registry.http(outsider) as c:
        r = c.get(f"/namespaces/{private}/refs")
        assert r.status_code == 404 and error_code(r) == "NAMESPACE_UNKNOWN"
    # The CLI says so clearly, with exit 1 and a hint to log in.
    home = make_home(registry, None)
    run = kvreg(home, "--json", "ls-remote", "origin", private, expect=1)
    assert run.json["error"]["code"] == "UNAUTHENTICATED"


def test_immutable_tag_cannot_be_overwritten(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    from .test_push_pull import _pusher

    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "admin"})
    home = _pusher(depositor, make_home(registry, token))
    tag = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/v1", "--tag").json
    other = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/x").json
    with registry.http(token) as c:
        r = c.put(
            f"/namespaces/{ns}/refs/v1",
            json={"digest": other["digest"]},
            headers={"If-Match": f'"{tag["digest"]}"'},
        )
        assert r.status_code == 409 and error_code(r) == "TAG_IMMUTABLE"
        r = c.put(
            f"/namespaces/{ns}/refs/v1", json={"digest": other["digest"]}, headers={"If-None-Match": "*"}
        )
        assert r.status_code == 409 and error_code(r) == "TAG_IMMUTABLE"
        r = c.delete(f"/namespaces/{ns}/refs/v1", headers={"If-Match": f'"{tag["digest"]}"'})
        assert r.status_code == 409 and error_code(r) == "TAG_IMMUTABLE"
        assert c.get(f"/namespaces/{ns}/refs/v1").json()["digest"] == tag["digest"]
    run = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/v1", expect=1)
    assert run.json["error"]["code"] == "TAG_IMMUTABLE"


def test_ref_change_needs_a_precondition(ns_admin, depositor: dict[str, Any]) -> None:
    ns, c = ns_admin
    m = depositor["manifests"]["p07"]
    upload_objects(c, ns, depositor["home"], m)
    assert (
        c.put(
            f"/namespaces/{ns}/envelopes/{m.digest}", content=envelope_bytes(depositor["home"], m)
        ).status_code
        == 201
    )
    r = c.put(f"/namespaces/{ns}/refs/p07", json={"digest": str(m.digest)})
    assert r.status_code == 428 and error_code(r) == "PRECONDITION_REQUIRED"
    r = c.put(f"/namespaces/{ns}/refs/p07", json={"digest": OTHER}, headers={"If-None-Match": "*"})
    assert r.status_code == 422 and error_code(r) == "MANIFEST_UNKNOWN"
    assert c.get(f"/namespaces/{ns}/refs/p07").status_code == 404
    r = c.put(
        f"/namespaces/{ns}/refs/p07", json={"digest": str(m.digest)}, headers={"If-Match": f'"{OTHER}"'}
    )
    assert r.status_code == 409 and error_code(r) == "REF_CONFLICT"
    assert (
        c.put(
            f"/namespaces/{ns}/refs/p07", json={"digest": str(m.digest)}, headers={"If-None-Match": "*"}
        ).status_code
        == 201
    )
    r = c.delete(f"/namespaces/{ns}/envelopes/{m.digest}")
    assert r.status_code == 409 and error_code(r) == "IN_USE"


def test_oversized_bodies_are_refused(registry: Registry, ns_admin) -> None:
    from kvreg.core.digest import Digest

    ns, c = ns_admin
    big = b"\0" * (MAX_OBJECT_BYTES + 1)
    d = Digest.of_bytes(big)
    r = c.put(f"/namespaces/{ns}/objects/{d}", content=big)
    assert r.status_code == 413 and error_code(r) == "BODY_TOO_LARGE"

    def chunked():  # no Content-Length: the server counts as the bytes arrive
        for _ in range(MAX_OBJECT_BYTES // (1 << 20) + 1):
            yield b"\0" * (1 << 20)

    r = c.put(f"/namespaces/{ns}/objects/{OTHER}", content=chunked())
    assert r.status_code == 413 and error_code(r) == "BODY_TOO_LARGE"
    r = c.post(
        f"/namespaces/{ns}/objects/missing", content=b'{"digests": ["' + b"a" * MAX_JSON_BYTES + b'"]}'
    )
    assert r.status_code == 413
    r = c.post(
        f"/namespaces/{ns}/objects/missing", json={"digests": [f"sha256:{i:064x}" for i in range(5001)]}
    )
    assert r.status_code == 413 and error_code(r) == "BODY_TOO_LARGE"
    assert str(d) not in registry.stored_digests()


def test_malformed_requests_are_400(ns_admin) -> None:
    ns, c = ns_admin
    for body in (b"{not json", b"[1, 2]", b'{"digests": "sha256:x"}', b'{"digests": [], "extra": 1}'):
        r = c.post(
            f"/namespaces/{ns}/objects/missing", content=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400 and error_code(r) == "REQUEST_INVALID", (body, r.text)
    r = c.put(f"/namespaces/{ns}/envelopes/{OTHER}", content=b"\xff\xfe not an envelope")
    assert r.status_code == 422 and error_code(r) == "ENVELOPE_INVALID"
    r = c.put(
        f"/namespaces/{ns}/refs/x",
        content=b"[]",
        headers={"If-None-Match": "*", "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    r = c.get(f"/namespaces/{ns}/refs/x", headers={"Authorization": "Basic abc"})
    assert r.status_code == 401


@pytest.mark.parametrize(
    "path, codes",
    [
        ("/namespaces/{ns}/objects/sha256:..%2F..%2Fetc%2Fpasswd", {"DIGEST_INVALID", "NOT_FOUND"}),
        ("/namespaces/{ns}/objects/sha256:" + "A" * 64, {"DIGEST_INVALID"}),
        ("/namespaces/{ns}/objects/md5:" + "a" * 32, {"DIGEST_INVALID"}),
        ("/namespaces/{ns}/objects/..%2F..%2Fsecret", {"DIGEST_INVALID", "NOT_FOUND"}),
        ("/namespaces/{ns}/refs/..", {"NAME_INVALID", "NOT_FOUND"}),
        ("/namespaces/{ns}/refs/a%2F..%2Fb", {"NAME_INVALID", "NOT_FOUND"}),
        ("/namespaces/{ns}/refs/%2Fetc", {"NAME_INVALID", "NOT_FOUND"}),
        ("/namespaces/{ns}/refs/x%00y", {"NAME_INVALID"}),
        ("/namespaces/Upper/refs", {"NAME_INVALID"}),
        ("/namespaces/..%2F..%2Fetc/refs", {"NAME_INVALID", "NOT_FOUND"}),
        ("/namespaces/{ns}/envelopes/sha256:%2e%2e", {"DIGEST_INVALID"}),
    ],
)
def test_traversal_and_odd_characters_are_refused(
    registry: Registry, ns_admin, path: str, codes: set[str]
) -> None:
    import http.client
    import urllib.parse

    ns, _ = ns_admin
    # http.client sends the path exactly as written (httpx would resolve the dot segments first).
    parsed = urllib.parse.urlsplit(registry.url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.request(
            "GET", "/api/v1" + path.format(ns=ns), headers={"Authorization": f"Bearer {registry.admin_token}"}
        )
        r = conn.getresponse()
        body = json.loads(r.read())
    finally:
        conn.close()
    assert r.status in (400, 404), body
    assert r.getheader("x-kvreg-error-code") == body["error"]["code"]
    assert body["error"]["code"] in codes


def test_range_requests(ns_admin, depositor: dict[str, Any]) -> None:
    ns, c = ns_admin
    m = depositor["manifests"]["p07"]
    upload_objects(c, ns, depositor["home"], m)
    d = m.chunks[0].digest
    from kvreg.store.home import Home

    data = Home(depositor["home"]).objects.read(d)
    url = f"/namespaces/{ns}/objects/{d}"
    full = c.get(url)
    assert full.status_code == 200 and full.content == data and full.headers["etag"] == f'"{d}"'
    r = c.get(url, headers={"Range": "bytes=0-9"})
    assert r.status_code == 206 and r.content == data[:10]
    assert r.headers["content-range"] == f"bytes 0-9/{len(data)}"
    assert c.get(url, headers={"Range": "bytes=-5"}).content == data[-5:]
    assert c.get(url, headers={"Range": "bytes=100-"}).content == data[100:]
    r = c.get(url, headers={"Range": f"bytes={len(data)}-"})
    assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{len(data)}"
    assert c.get(url, headers={"Range": "bytes=0-1,4-5"}).status_code == 400
    head = c.head(url)
    assert head.status_code == 200 and int(head.headers["content-length"]) == len(data)


def test_concurrent_uploads_of_one_object_all_succeed(registry: Registry, ns_admin) -> None:
    import concurrent.futures

    from kvreg.core.digest import Digest

    ns, _ = ns_admin
    data = uuid.uuid4().bytes * 40000
    d = Digest.of_bytes(data)

    def put(_: int) -> int:
        with registry.admin() as c:
            return c.put(f"/namespaces/{ns}/objects/{d}", content=data).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(put, range(8)))
    assert set(statuses) <= {200, 201} and statuses.count(201) == 1, statuses
    assert registry.stored_digests()[str(d)] == len(data)
    with registry.admin() as c:
        assert c.get(f"/namespaces/{ns}/objects/{d}").content == data


def test_pull_of_a_tampered_chunk_fails_and_leaves_no_trace(
    registry: Registry, depositor: dict[str, Any], make_home, llama: Path, tmp_path: Path
) -> None:
    from .test_push_pull import _pusher

    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    # An artifact of its own, so that damaging its chunk in the shared storage hurts no other test.
    home = _pusher(depositor, make_home(registry, token))
    text = tmp_path / "t.txt"
    text.write_text(f"Tamper test {uuid.uuid4().hex}: the answer is 42 because six times seven is 42. " * 3)
    kvreg(home, "deposit", llama, "--text-file", text, "--ref", "src/tamper", "--block-size", BLOCK)
    pushed = kvreg(home, "--json", "push", "origin", "src/tamper", "--as", f"{ns}/tamper").json
    chunk = read_manifest(home, "src/tamper").chunks[1].digest
    _flip_stored_bit(registry, str(chunk))

    dst = make_home(registry, token, trust={ns: depositor["public_key"]})
    before = snapshot(dst)
    run = kvreg(dst, "--json", "pull", "origin", f"{ns}/tamper", expect=3)
    assert run.json["error"]["code"] == "DIGEST_MISMATCH"
    after = snapshot(dst)
    assert {k for k in after if not k.startswith("tmp")} == {k for k in before if not k.startswith("tmp")}
    assert not [k for k in after if k.startswith("tmp/") and k not in before], "staging must be removed"
    assert pushed["digest"]


def _flip_stored_bit(registry: Registry, digest: str) -> None:
    storage = registry.storage()
    data = bytearray(b"".join(storage.read_range(digest)))
    data[len(data) // 2] ^= 1
    if registry.backend == "sqlite-folder":
        path = storage.path_for(digest)
        path.chmod(0o644)
        path.write_bytes(bytes(data))
        path.chmod(0o444)
    else:
        storage.client.put_object(Bucket=storage.bucket, Key=storage.object_key(digest), Body=bytes(data))


def test_cli_says_clearly_what_is_wrong(registry: Registry, depositor: dict[str, Any], make_home) -> None:
    """403 on push with a read-only token, and a pull signed by a key the local store does not trust."""
    from .test_push_pull import _pusher

    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    reader = registry.user({ns: "read"})
    writer = registry.user({ns: "write"})
    home = _pusher(depositor, make_home(registry, reader))
    run = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07", expect=1)
    assert run.json["error"]["code"] == "FORBIDDEN"
    assert "write" in run.err and "hint" in run.err
    with registry.http(writer) as c:
        assert c.get(f"/namespaces/{ns}/refs").json()["refs"] == []

    kvreg(_pusher(depositor, make_home(registry, writer)), "push", "origin", "src/p07", "--as", f"{ns}/p07")
    untrusting = make_home(registry, reader)  # trusts no key for the namespace
    before = snapshot(untrusting)
    run = kvreg(untrusting, "--json", "pull", "origin", f"{ns}/p07", expect=3)
    assert run.json["error"]["code"] == "KEY_UNTRUSTED"
    assert "kvreg trust add" in run.err
    assert {k for k in snapshot(untrusting) if not k.startswith("tmp")} == {
        k for k in before if not k.startswith("tmp")
    }
