"""The registry's OCI pull API (``/v2/``) against the distribution specification's pull rules.

In process (``TestClient`` of the real app), on both backends: SQLite + a folder and
PostgreSQL + S3 (SeaweedFS). Artifacts are published the way ``kvreg push`` does
(``web.library.Library.push``); what ``/v2/`` serves is then checked against the
signed manifest (``kvreg.core.oci.check_artifact``) and the bytes against their
digests. The ``oras`` SDK against a live server is in ``tests/integration/test_oci_oras.py``.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from core.manifest_helpers import Built
from kvreg.core import oci
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg_registry.app import create_app
from kvreg_registry.db.engine import alembic_config, upgrade
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.db.models import Namespace, OciManifest
from kvreg_registry.services import accounts
from kvreg_registry.settings import S3Options, Settings
from remote.helpers import build_artifact
from web.library import OPERATOR, Library, count_queries

V2 = "application/vnd.oci.image.manifest.v1+json"


def make_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest, **kw: Any) -> Settings:
    if backend == "sqlite-folder":
        return Settings(
            data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'registry.sqlite3'}", **kw
        )
    bucket = request.getfixturevalue("s3_bucket")
    s3 = request.getfixturevalue("s3_options")
    return Settings(
        data_dir=tmp_path / "data",
        database_url=request.getfixturevalue("fresh_pg_url"),
        storage_url=f"s3://{bucket}/t-{uuid.uuid4().hex[:12]}/",
        s3=S3Options(
            endpoint_url=s3["endpoint_url"],
            access_key=s3["access_key"],
            secret_key=s3["secret_key"],
            region=s3["region"],
            redirect=kw.pop("redirect", False),
        ),
        **kw,
    )


def open_library(settings: Settings) -> Iterator[Library]:
    app = create_app(settings)
    with TestClient(app, base_url="http://testserver") as client:
        with app.state.registry.db.write() as s:
            accounts.create_user(s, OPERATOR, "root", admin=True)
            token = accounts.create_token(s, OPERATOR, "root", label="oci tests").token
        yield Library(client=client, admin_token=token)


@pytest.fixture(params=["sqlite-folder", "postgres-s3"])
def lib(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Library]:
    yield from open_library(make_settings(request.param, tmp_path, request, auth_failure_limit=6))


def publish(lib: Library, *, public: bool = True, refs: tuple[str, ...] = ("answer",)) -> tuple[str, Built]:
    ns = lib.namespace(public=public)
    built = build_artifact(lib.key, token_count=10, block_size=4, chunk_bytes=3000)
    lib.push(ns, refs[0], built)
    for ref in refs[1:]:
        r = lib.api("PUT", f"/namespaces/{ns}/refs/{ref}", json={"digest": built.digest},
                    headers={"If-None-Match": "*"})  # fmt: skip
        assert r.status_code == 201, r.text
    return ns, built


def get(lib: Library, path: str, *, method: str = "GET", auth: str | None = None, **kw: Any) -> Any:
    headers = dict(kw.pop("headers", {}))
    if auth is not None:
        headers["Authorization"] = auth
    return lib.client.request(method, path, headers=headers, follow_redirects=False, **kw)


def basic(token: str, user: str = "anyone") -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def oci_error(r: Any, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"errors"} and len(body["errors"]) == 1, body
    error: dict[str, Any] = body["errors"][0]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert r.headers["docker-distribution-api-version"] == "registry/2.0"
    return error


# --- version check ---------------------------------------------------------------------------


def test_version_check(lib: Library) -> None:
    # anonymous: 401 with the challenge (how clients learn where to get a token), as Docker Hub does
    challenge = 'Bearer realm="https://testserver/v2/token",service="kvreg"'
    for path in ("/v2/", "/v2"):
        r = get(lib, path)
        oci_error(r, 401, "UNAUTHORIZED")
        assert r.headers["www-authenticate"] == challenge
    r = get(lib, "/v2/", method="HEAD")
    assert r.status_code == 401 and r.content == b""
    assert r.headers["www-authenticate"] == challenge
    oci_error(get(lib, "/v2/", auth="Bearer kvreg-anonymous"), 401, "UNAUTHORIZED")
    # valid credentials: 200, with the API version header; bad ones: 401
    for auth in (f"Bearer {lib.admin_token}", basic(lib.admin_token)):
        r = get(lib, "/v2/", auth=auth)
        assert r.status_code == 200, r.text
        assert r.headers["docker-distribution-api-version"] == "registry/2.0"
    r = get(lib, "/v2/", method="HEAD", auth=basic(lib.admin_token))
    assert r.status_code == 200 and r.content == b""
    r = get(lib, "/v2/", auth="Bearer kvreg_not-a-token")
    oci_error(r, 401, "UNAUTHORIZED")
    assert r.headers["www-authenticate"] == challenge


# --- manifests ----------------------------------------------------------------------------------


def test_manifest_by_tag_and_by_digest_is_the_signed_artifact(lib: Library) -> None:
    ns, built = publish(lib)
    r = get(lib, f"/v2/{ns}/manifests/answer", headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    data = r.content
    digest = Digest.of_bytes(data)
    assert r.headers["content-type"] == V2
    assert r.headers["docker-content-digest"] == digest
    assert int(r.headers["content-length"]) == len(data)
    # the registry's manifest is core.oci's, built without the immutable mark
    assert data == oci.artifact_manifest(built.manifest, {})
    parsed = oci.parse_artifact_manifest(data)
    oci.check_artifact(parsed, built.manifest)
    assert parsed.kvreg_manifest == built.digest and not parsed.immutable
    # the same bytes every time, by tag and by digest; HEAD has the headers and no body
    assert get(lib, f"/v2/{ns}/manifests/answer").content == data
    by_digest = get(lib, f"/v2/{ns}/manifests/{digest}")
    assert by_digest.status_code == 200 and by_digest.content == data
    assert by_digest.headers["docker-content-digest"] == digest
    head = get(lib, f"/v2/{ns}/manifests/answer", method="HEAD")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(data))
    assert head.headers["docker-content-digest"] == digest
    assert head.headers["content-type"] == V2


def test_blobs_hash_to_their_digests_with_ranges(lib: Library) -> None:
    ns, built = publish(lib)
    artifact = oci.parse_artifact_manifest(get(lib, f"/v2/{ns}/manifests/answer").content)
    for layer in artifact.layers:
        r = get(lib, f"/v2/{ns}/blobs/{layer.digest}")
        assert r.status_code == 200, r.text
        assert r.content == built.objects[layer.digest]
        assert Digest.of_bytes(r.content) == layer.digest == r.headers["docker-content-digest"]
        assert len(r.content) == layer.size
    # the config blob is the signed manifest: the envelope's payload, byte for byte
    config = get(lib, f"/v2/{ns}/blobs/{artifact.config.digest}")
    assert config.status_code == 200
    payload = Envelope.from_json_bytes(built.envelope_bytes).payload
    assert config.content == payload == built.manifest.raw_bytes
    chunk = artifact.layers[0]
    size = chunk.size
    head = get(lib, f"/v2/{ns}/blobs/{chunk.digest}", method="HEAD")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(size)
    assert head.headers["docker-content-digest"] == chunk.digest
    part = get(lib, f"/v2/{ns}/blobs/{chunk.digest}", headers={"Range": "bytes=10-99"})
    assert part.status_code == 206
    assert part.content == built.objects[chunk.digest][10:100]
    assert part.headers["content-range"] == f"bytes 10-99/{size}"
    tail = get(lib, f"/v2/{ns}/blobs/{chunk.digest}", headers={"Range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == built.objects[chunk.digest][-5:]
    r = get(lib, f"/v2/{ns}/blobs/{chunk.digest}", headers={"Range": f"bytes={size}-"})
    oci_error(r, 416, "RANGE_INVALID")
    assert r.headers["content-range"] == f"bytes */{size}"
    # the empty config blob
    empty = get(lib, f"/v2/{ns}/blobs/{oci.EMPTY_CONFIG.digest}")
    assert empty.status_code == 200 and empty.content == b"{}"
    assert empty.headers["docker-content-digest"] == oci.EMPTY_CONFIG.digest
    unknown = Digest.of_bytes(b"nothing like it")
    oci_error(get(lib, f"/v2/{ns}/blobs/{unknown}"), 404, "BLOB_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/blobs/sha256:xyz"), 400, "DIGEST_INVALID")
    oci_error(get(lib, f"/v2/{ns}/blobs/md5:abc"), 400, "DIGEST_INVALID")


def test_signature_is_a_referrer_of_the_artifact(lib: Library) -> None:
    ns, built = publish(lib)
    artifact = get(lib, f"/v2/{ns}/manifests/answer")
    subject = Digest(artifact.headers["docker-content-digest"])
    r = get(lib, f"/v2/{ns}/referrers/{subject}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == oci.OCI_INDEX
    assert "oci-filters-applied" not in r.headers
    entries = oci.parse_index(r.content)
    assert len(entries) == 1 and entries[0].artifact_type == oci.SIGNATURE_TYPE
    assert entries[0].annotations == {oci.ANNOTATION_MANIFEST: built.digest}
    sig = get(lib, f"/v2/{ns}/manifests/{entries[0].digest}")
    assert sig.status_code == 200 and Digest.of_bytes(sig.content) == entries[0].digest
    assert len(sig.content) == entries[0].size
    parsed = oci.parse_signature_manifest(sig.content)
    assert parsed.subject.digest == subject and parsed.subject.size == len(artifact.content)
    envelope = get(lib, f"/v2/{ns}/blobs/{parsed.envelope.digest}")
    assert envelope.status_code == 200 and envelope.content == built.envelope_bytes
    assert len(envelope.content) == parsed.envelope.size
    part = get(lib, f"/v2/{ns}/blobs/{parsed.envelope.digest}", headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == built.envelope_bytes[:10]
    oci_error(
        get(lib, f"/v2/{ns}/blobs/{parsed.envelope.digest}", headers={"Range": "bytes=999999-"}),
        416,
        "RANGE_INVALID",
    )
    # manifests are blobs too (distribution serves them both ways)
    assert get(lib, f"/v2/{ns}/blobs/{subject}").content == artifact.content
    # the artifactType filter
    kept = get(lib, f"/v2/{ns}/referrers/{subject}", params={"artifactType": oci.SIGNATURE_TYPE})
    assert kept.headers["oci-filters-applied"] == "artifactType"
    assert len(oci.parse_index(kept.content)) == 1
    other = get(lib, f"/v2/{ns}/referrers/{subject}", params={"artifactType": "application/x-other"})
    assert other.headers["oci-filters-applied"] == "artifactType" and oci.parse_index(other.content) == []
    # no referrers: an empty index, never a 404; a malformed digest is 400
    none = get(lib, f"/v2/{ns}/referrers/{Digest.of_bytes(b'x')}")
    assert none.status_code == 200 and oci.parse_index(none.content) == []
    assert oci.parse_index(get(lib, f"/v2/{ns}/referrers/{entries[0].digest}").content) == []
    oci_error(get(lib, f"/v2/{ns}/referrers/latest"), 400, "DIGEST_INVALID")


def test_tags_list_paginates_in_lexical_order(lib: Library) -> None:
    ns, _built = publish(lib, refs=("b", "a", "C", "c"))
    r = get(lib, f"/v2/{ns}/tags/list")
    assert r.status_code == 200 and r.json() == {"name": ns, "tags": ["C", "a", "b", "c"]}
    assert "link" not in r.headers
    first = get(lib, f"/v2/{ns}/tags/list", params={"n": 2})
    assert first.json()["tags"] == ["C", "a"]
    assert first.headers["link"] == f'</v2/{ns}/tags/list?n=2&last=a>; rel="next"'
    nxt = get(lib, first.headers["link"].split(">")[0][1:])
    assert nxt.json()["tags"] == ["b", "c"]
    assert "link" not in nxt.headers
    assert get(lib, f"/v2/{ns}/tags/list", params={"n": 0}).json()["tags"] == []
    assert get(lib, f"/v2/{ns}/tags/list", params={"last": "b"}).json()["tags"] == ["c"]
    assert get(lib, f"/v2/{ns}/tags/list", params={"n": 5, "last": "c"}).json()["tags"] == []
    oci_error(get(lib, f"/v2/{ns}/tags/list", params={"n": "-1"}), 400, "UNSUPPORTED")


def test_errors_are_oci_errors(lib: Library) -> None:
    ns, built = publish(lib)
    admin = f"Bearer {lib.admin_token}"
    oci_error(get(lib, "/v2/no-such-ns/manifests/answer", auth=admin), 404, "NAME_UNKNOWN")
    oci_error(get(lib, "/v2/Not_Valid!/manifests/answer"), 400, "NAME_INVALID")
    oci_error(get(lib, f"/v2/{ns}/manifests/nope"), 404, "MANIFEST_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/manifests/sha256-{'0' * 64}"), 404, "MANIFEST_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/manifests/{Digest.of_bytes(b'none')}"), 404, "MANIFEST_UNKNOWN")
    # the kvreg manifest's digest is the config blob, not an OCI manifest
    oci_error(get(lib, f"/v2/{ns}/manifests/{built.digest}"), 404, "MANIFEST_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/manifests/sha256:12"), 400, "DIGEST_INVALID")
    oci_error(get(lib, f"/v2/{ns}/a/b/tags/list"), 404, "NAME_UNKNOWN")
    # the push side is not served: kvreg push is
    for method, path in (
        ("POST", f"/v2/{ns}/blobs/uploads/"),
        ("PUT", f"/v2/{ns}/manifests/answer"),
        ("DELETE", f"/v2/{ns}/manifests/answer"),
        ("PATCH", f"/v2/{ns}/blobs/uploads/x"),
        ("DELETE", f"/v2/{ns}/blobs/{built.digest}"),
    ):
        error = oci_error(get(lib, path, method=method, auth=admin), 405, "UNSUPPORTED")
        assert "kvreg push" in error["message"]
    # the kvreg API keeps its own error format
    r = lib.client.get(f"/api/v1/namespaces/{ns}/refs/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "REF_UNKNOWN"


def test_private_namespace_needs_a_token_through_the_token_flow(lib: Library) -> None:
    ns, built = publish(lib, public=False)
    reader = lib.user({ns: "read"})
    stranger = lib.user()
    path = f"/v2/{ns}/manifests/answer"
    r = get(lib, path)
    oci_error(r, 401, "UNAUTHORIZED")
    assert r.headers["www-authenticate"] == (
        f'Bearer realm="https://testserver/v2/token",service="kvreg",scope="repository:{ns}:pull"'
    )
    # a namespace that does not exist answers the same to anonymous callers
    missing = get(lib, "/v2/no-such-ns/tags/list")
    oci_error(missing, 401, "UNAUTHORIZED")
    for blob in (built.digest, oci.EMPTY_CONFIG.digest):
        oci_error(get(lib, f"/v2/{ns}/blobs/{blob}"), 401, "UNAUTHORIZED")
    oci_error(get(lib, f"/v2/{ns}/referrers/{built.digest}"), 401, "UNAUTHORIZED")
    # the token flow: anonymous gets a token that reads nothing private
    scope = {"service": "kvreg", "scope": f"repository:{ns}:pull"}
    t = get(lib, "/v2/token", params=scope)
    assert t.status_code == 200, t.text
    anonymous = t.json()["token"]
    assert t.json()["access_token"] == anonymous and t.json()["expires_in"] == 300
    oci_error(get(lib, path, auth=f"Bearer {anonymous}"), 401, "UNAUTHORIZED")
    # with Basic auth (any user name, the kvreg token as password): a scoped token, not the API token
    t = get(lib, "/v2/token", params=scope, auth=basic(reader))
    assert t.status_code == 200 and t.json()["token"] == t.json()["access_token"] != reader
    ok = get(lib, path, auth=f"Bearer {t.json()['token']}")
    assert ok.status_code == 200 and oci.parse_artifact_manifest(ok.content).kvreg_manifest == built.digest
    # the API token itself is still accepted, as Basic or Bearer
    assert get(lib, path, auth=basic(reader, "someone")).status_code == 200
    assert get(lib, path, auth=f"Bearer {reader}").status_code == 200
    assert get(lib, f"/v2/{ns}/blobs/{built.digest}", auth=basic(reader)).content == built.manifest.raw_bytes
    # a valid token without a role sees no namespace; bad credentials are 401 everywhere
    oci_error(get(lib, path, auth=f"Bearer {stranger}"), 404, "NAME_UNKNOWN")
    t = get(lib, "/v2/token", params=scope, auth=basic(stranger))
    oci_error(get(lib, path, auth=f"Bearer {t.json()['token']}"), 404, "NAME_UNKNOWN")
    oci_error(get(lib, "/v2/token", auth=basic("kvreg_wrong")), 401, "UNAUTHORIZED")
    oci_error(get(lib, path, auth=basic("kvreg_wrong")), 401, "UNAUTHORIZED")
    oci_error(get(lib, path, auth="Basic !!!"), 401, "UNAUTHORIZED")
    oci_error(get(lib, path, auth="Digest x"), 401, "UNAUTHORIZED")
    # past the failure limit (6 in this fixture): 429 TOOMANYREQUESTS with Retry-After
    for _ in range(3):
        get(lib, path, auth=basic("kvreg_wrong"))
    r = get(lib, path, auth=basic("kvreg_wrong"))
    oci_error(r, 429, "TOOMANYREQUESTS")
    assert int(r.headers["retry-after"]) >= 1


def _forget_oci_rows(lib: Library, ns: str | None = None) -> None:
    """As on a database migrated from before 0007: the rows gone, their namespaces flagged (0008)."""
    with lib.app_state.db.write() as s:
        s.execute(delete(OciManifest))
        flagged = update(Namespace).values(oci_backfill_pending=True)
        s.execute(flagged if ns is None else flagged.where(Namespace.name == ns))


def _flags(lib: Library) -> dict[str, bool]:
    with lib.app_state.db.read() as s:
        return {
            name: bool(flag)
            for name, flag in s.execute(select(Namespace.name, Namespace.oci_backfill_pending))
        }


def test_envelopes_stored_before_the_migration_are_filled_in_lazily(lib: Library) -> None:
    ns, _built = publish(lib)
    data = get(lib, f"/v2/{ns}/manifests/answer").content
    sig_digest = oci.parse_index(get(lib, f"/v2/{ns}/referrers/{Digest.of_bytes(data)}").content)[0].digest
    _forget_oci_rows(lib, ns)
    # by digest first: the miss fills the namespace's rows, with the same bytes, and clears the flag
    again = get(lib, f"/v2/{ns}/manifests/{sig_digest}")
    assert again.status_code == 200
    assert get(lib, f"/v2/{ns}/manifests/{Digest.of_bytes(data)}").content == data
    assert _flags(lib)[ns] is False
    _forget_oci_rows(lib, ns)
    assert get(lib, f"/v2/{ns}/manifests/answer").content == data


def _misses(lib: Library, ns: str) -> list[str]:
    """The statements of a manifest, a blob and a referrers lookup that find nothing."""
    unknown = Digest.of_bytes(b"nothing like it")
    with count_queries(lib) as statements:
        oci_error(get(lib, f"/v2/{ns}/manifests/{unknown}"), 404, "MANIFEST_UNKNOWN")
        oci_error(get(lib, f"/v2/{ns}/blobs/{unknown}"), 404, "BLOB_UNKNOWN")
        assert oci.parse_index(get(lib, f"/v2/{ns}/referrers/{unknown}").content) == []
    return statements


def test_a_miss_scans_nothing_and_migrated_envelopes_are_backfilled_once(
    lib: Library, caplog: pytest.LogCaptureFixture
) -> None:
    ns, _built = publish(lib)
    other, _ = publish(lib)
    data = {n: get(lib, f"/v2/{n}/manifests/answer").content for n in (ns, other)}
    assert not any(_flags(lib).values())
    # a miss in a namespace whose envelopes all have their rows reads no envelope
    assert not [q for q in _misses(lib, ns) if "envelopes" in q]
    # a database from before 0007: back to 0006 (no oci_manifests), then up again
    url = lib.app_state.settings.effective_database_url
    lib.app_state.db.engine.dispose()
    command.downgrade(alembic_config(url), "0006")
    upgrade(url)
    empty = lib.namespace()  # no envelope: never flagged
    assert _flags(lib) == {ns: True, other: True, empty: False}
    # the first miss in ns writes its rows (the same bytes) and clears its flag, and only its own
    statements = _misses(lib, ns)
    assert any("INSERT INTO oci_manifests" in q for q in statements)
    assert _flags(lib) == {ns: False, other: True, empty: False}
    assert get(lib, f"/v2/{ns}/manifests/answer").content == data[ns]
    # from then on a miss costs no scan and writes nothing
    assert not [
        q for q in _misses(lib, ns) if "envelopes" in q or q.lstrip().startswith(("INSERT", "UPDATE"))
    ]
    # an envelope whose manifests cannot be built is logged once, skipped, and not tried again
    with lib.app_state.db.write() as s:
        s.execute(update(EnvelopeRow).where(EnvelopeRow.namespace_id == select(Namespace.id).where(
            Namespace.name == other).scalar_subquery()).values(envelope=b"{not an envelope"))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="kvreg_registry.services.oci"):
        _misses(lib, other)
    assert [r.message for r in caplog.records if "cannot be served over OCI" in r.message]
    assert _flags(lib)[other] is False
    oci_error(get(lib, f"/v2/{other}/manifests/answer"), 404, "MANIFEST_UNKNOWN")
    assert not [q for q in _misses(lib, other) if "envelopes" in q]


def test_a_deleted_envelope_is_gone_from_v2(lib: Library) -> None:
    ns, built = publish(lib)
    data = get(lib, f"/v2/{ns}/manifests/answer").content
    r = lib.api("DELETE", f"/namespaces/{ns}/refs/answer", headers={"If-Match": f'"{built.digest}"'})
    assert r.status_code == 204, r.text
    assert lib.api("DELETE", f"/namespaces/{ns}/envelopes/{built.digest}").status_code == 204
    oci_error(get(lib, f"/v2/{ns}/manifests/{Digest.of_bytes(data)}"), 404, "MANIFEST_UNKNOWN")
    assert get(lib, f"/v2/{ns}/tags/list").json()["tags"] == []


def test_s3_blobs_redirect_to_a_presigned_url(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    for library in open_library(make_settings("postgres-s3", tmp_path, request, redirect=True)):
        ns, built = publish(library)
        layer = oci.parse_artifact_manifest(get(library, f"/v2/{ns}/manifests/answer").content).layers[0]
        r = get(library, f"/v2/{ns}/blobs/{layer.digest}")
        assert r.status_code == 307 and r.headers["docker-content-digest"] == layer.digest
        presigned = httpx.get(r.headers["location"], timeout=30)
        assert presigned.status_code == 200 and presigned.content == built.objects[layer.digest]


def test_fsck_checks_the_stored_oci_manifests(lib: Library) -> None:
    from kvreg_registry.services.fsck import check_registry

    ns, _built = publish(lib)
    st = lib.app_state

    def kinds() -> set[str]:
        return {p.kind for p in check_registry(st.db, st.storage, st.log, rehash=False).problems}

    assert kinds() == set()
    with st.db.write() as s:
        row = s.scalars(select(OciManifest)).one()
        good = (bytes(row.artifact), row.envelope_digest)
        row.artifact = good[0].replace(b'"layers"', b'"layers" ', 1)
    assert kinds() == {"oci_manifest_digest"}
    with st.db.write() as s:
        row = s.scalars(select(OciManifest)).one()
        row.artifact, row.envelope_digest = good[0], str(Digest.of_bytes(b"another envelope"))
    assert kinds() == {"oci_manifest_mismatch"}
    with st.db.write() as s:
        s.scalars(select(OciManifest)).one().envelope_digest = good[1]
    assert kinds() == set()
    assert get(lib, f"/v2/{ns}/manifests/answer").content == good[0]


# --- the per-ref repository <ns>/<name> ---------------------------------------------------------


def test_each_ref_is_also_a_repository_with_one_tag(lib: Library) -> None:
    ns, built = publish(lib)
    data = get(lib, f"/v2/{ns}/manifests/answer").content
    digest = Digest.of_bytes(data)
    r = get(lib, f"/v2/{ns}/answer/manifests/latest")
    assert r.status_code == 200, r.text
    assert r.content == data and r.headers["docker-content-digest"] == digest
    assert get(lib, f"/v2/{ns}/answer/manifests/{digest}").content == data
    head = get(lib, f"/v2/{ns}/answer/manifests/latest", method="HEAD")
    assert head.status_code == 200 and head.content == b""
    r = get(lib, f"/v2/{ns}/answer/tags/list")
    assert r.status_code == 200 and r.json() == {"name": f"{ns}/answer", "tags": ["latest"]}
    layer = oci.parse_artifact_manifest(data).layers[0]
    r = get(lib, f"/v2/{ns}/answer/blobs/{layer.digest}")
    assert r.status_code == 200 and r.content == built.objects[layer.digest]
    index = oci.parse_index(get(lib, f"/v2/{ns}/answer/referrers/{digest}").content)
    assert [x.artifact_type for x in index] == [oci.SIGNATURE_TYPE]
    oci_error(get(lib, f"/v2/{ns}/answer/manifests/answer"), 404, "MANIFEST_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/missing/tags/list"), 404, "NAME_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/missing/manifests/latest"), 404, "MANIFEST_UNKNOWN")
    oci_error(get(lib, f"/v2/{ns}/answer/manifests/latest", method="PUT"), 405, "UNSUPPORTED")
