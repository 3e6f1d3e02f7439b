"""Garbage collection, search, deletes, and several registry processes on one database and store."""

from __future__ import annotations

import concurrent.futures
import uuid
from typing import Any

import httpx
import pytest

from cli.helpers import kvreg

from .http_helpers import envelope_bytes, error_code, upload_objects
from .registry_server import Registry
from .test_push_pull import _pusher


def test_gc_keeps_uploads_in_flight_and_referenced_objects(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    from kvreg.core.digest import Digest

    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    home = _pusher(depositor, make_home(registry, token))
    kvreg(home, "push", "origin", "src/p07", "--as", f"{ns}/p07")

    loose = b"an object no envelope references " + uuid.uuid4().bytes
    d = Digest.of_bytes(loose)
    with registry.http(token) as c:
        session = c.post(f"/namespaces/{ns}/uploads", json={"digests": [d]}).json()
        assert session["missing"] == [d]
        assert (
            c.put(
                f"/namespaces/{ns}/objects/{d}", content=loose, headers={"X-Kvreg-Upload": session["upload"]}
            ).status_code
            == 201
        )
        # A writer is not a server admin.
        r = c.post("/gc", json={"grace_seconds": 0})
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
    with registry.admin() as admin:
        report = admin.post("/gc", json={"grace_seconds": 0}).json()
        assert admin.head(f"/namespaces/{ns}/objects/{d}").status_code == 200, report
        assert str(d) in registry.stored_digests(), "GC removed an object of an upload in flight"
        with registry.http(token) as c:
            assert c.delete(f"/namespaces/{ns}/uploads/{session['upload']}").status_code == 204
        dry = admin.post("/gc", json={"grace_seconds": 0, "dry_run": True}).json()
        assert dry["dry_run"] is True and dry["links_removed"] >= 1
        assert str(d) in registry.stored_digests(), "a dry run deletes nothing"
        report = admin.post("/gc", json={"grace_seconds": 0}).json()
        assert report["links_removed"] >= 1 and report["objects_removed"] >= 1
        assert admin.head(f"/namespaces/{ns}/objects/{d}").status_code == 404
        assert str(d) not in registry.stored_digests()
        # With a grace period, nothing young goes.
        young = b"young " + uuid.uuid4().bytes
        dy = Digest.of_bytes(young)
        assert admin.put(f"/namespaces/{ns}/objects/{dy}", content=young).status_code == 201
        admin.post("/gc", json={"grace_seconds": 3600})
        assert admin.head(f"/namespaces/{ns}/objects/{dy}").status_code == 200
    # The pushed artifact survived every GC: it still pulls and verifies.
    dst = make_home(registry, token, trust={ns: depositor["public_key"]})
    kvreg(dst, "pull", "origin", f"{ns}/p07")
    kvreg(dst, "verify", f"{ns}/p07")


def test_deleting_an_artifact_needs_admin_and_frees_its_objects(
    registry: Registry, depositor: dict[str, Any]
) -> None:
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    writer = registry.user({ns: "write"})
    m = depositor["manifests"]["other"]
    with registry.http(writer) as c:
        upload_objects(c, ns, depositor["home"], m)
        assert (
            c.put(
                f"/namespaces/{ns}/envelopes/{m.digest}", content=envelope_bytes(depositor["home"], m)
            ).status_code
            == 201
        )
        r = c.delete(f"/namespaces/{ns}/envelopes/{m.digest}")
        assert r.status_code == 403
    with registry.admin() as admin:
        assert admin.delete(f"/namespaces/{ns}/envelopes/{m.digest}").status_code == 204
        assert admin.get(f"/namespaces/{ns}/envelopes/{m.digest}").status_code == 404
        admin.post("/gc", json={"grace_seconds": 0})
        for digest in m.object_digests():
            assert admin.head(f"/namespaces/{ns}/objects/{digest}").status_code == 404


def test_search_by_namespace_model_verifier_and_text(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns = registry.namespace()
    public = registry.namespace(public=True)
    for n in (ns, public):
        registry.register_key(n, depositor["public_key"])
    token = registry.user({ns: "write", public: "write"})
    home = _pusher(depositor, make_home(registry, token))
    kvreg(home, "push", "origin", "src/p07", "--as", f"{ns}/p07")
    kvreg(home, "push", "origin", "src/other", "--as", f"{ns}/other")
    kvreg(home, "push", "origin", "src/p07x", "--as", f"{public}/p07x")
    m = depositor["manifests"]["p07"]
    with registry.http(token) as c:
        found = c.get("/artifacts", params={"namespace": ns}).json()
        assert found["total"] == 2
        assert {a["refs"][0] for a in found["artifacts"]} == {"p07", "other"}
        by_text = c.get("/artifacts", params={"namespace": ns, "q": "P07"}).json()
        assert [a["digest"] for a in by_text["artifacts"]] == [str(m.digest)]
        item = by_text["artifacts"][0]
        assert item["verifier"] == "checker" and item["verdict"] == "pass"
        assert item["token_count"] == m.token_count and item["chunk_count"] == len(m.chunks)
        assert item["signer"].startswith("sha256:") and item["merkle_root"] == str(m.merkle_root)
        by_model = c.get("/artifacts", params={"model": str(m.model.fingerprint)}).json()
        assert {a["namespace"] for a in by_model["artifacts"]} >= {ns, public}
        assert c.get("/artifacts", params={"namespace": ns, "verifier": "nobody"}).json()["total"] == 0
        assert c.get("/artifacts", params={"namespace": ns, "verdict": "pass"}).json()["total"] == 2
        page = c.get("/artifacts", params={"namespace": ns, "limit": 1, "offset": 1}).json()
        assert page["total"] == 2 and len(page["artifacts"]) == 1
        # "%" has no searchable word: no text filter (and never an SQL or FTS syntax error).
        assert c.get("/artifacts", params={"namespace": ns, "q": "%"}).json()["total"] == 2
    with registry.http() as anonymous:
        seen = anonymous.get("/artifacts", params={"model": str(m.model.fingerprint)}).json()
        assert any(a["namespace"] == public for a in seen["artifacts"])
        assert all(a["namespace"] != ns for a in seen["artifacts"])
        assert anonymous.get("/artifacts", params={"namespace": ns}).json()["total"] == 0


@pytest.mark.parametrize("registry", ["postgres-s3"], indirect=True)
def test_several_registry_processes_share_postgres_and_s3(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    token = registry.user({ns: "write"})
    with registry.another_process() as second, registry.another_process(KVREG_S3_REDIRECT="1") as redirecting:
        a = _pusher(depositor, make_home(registry, token))
        b = _pusher(depositor, make_home(second, token))
        jobs = [(a, "src/p07", f"{ns}/one"), (b, "src/p07x", f"{ns}/two"), (a, "src/other", f"{ns}/three")]
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            pushed = list(
                pool.map(lambda j: kvreg(j[0], "--json", "push", "origin", j[1], "--as", j[2]).json, jobs)
            )
        assert all(p["ref_changed"] for p in pushed)

        # A ref CAS race across two processes: one winner.
        first, other = pushed[0]["digest"], pushed[1]["digest"]

        def move(url: str) -> int:
            with httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}) as c:
                return c.put(
                    f"/namespaces/{ns}/refs/one", json={"digest": other}, headers={"If-Match": f'"{first}"'}
                ).status_code

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert sorted(pool.map(move, [registry.url, second.url])) == [200, 409]

        # Pull through the process that redirects object GETs to presigned S3 URLs.
        chunk = depositor["manifests"]["p07x"].chunks[0].digest
        with redirecting.http(token) as c:
            r = c.get(f"/namespaces/{ns}/objects/{chunk}", follow_redirects=False)
            assert r.status_code == 307 and "X-Amz-Signature" in r.headers["location"]
            # Downloads go to the storage: no fetch packs through the registry.
            assert c.get("/").json()["limits"]["max_fetch_objects"] is None
        with registry.http(token) as c:
            assert c.get("/").json()["limits"]["max_fetch_objects"] > 1
        dst = make_home(redirecting, token, trust={ns: depositor["public_key"]})
        report = kvreg(dst, "--json", "pull", "origin", f"{ns}/two").json
        assert report["objects_downloaded"] == report["objects_total"]
        kvreg(dst, "verify", f"{ns}/two")
