"""``GET /metrics`` of the registry app (``kvreg_registry.api.metrics``), in process: a push and a
pull counted by route template (never a raw path), bytes in and out, objects stored and refused,
ref conflicts, failed authentications and the limiter's refusals, the audit log and the database
pool; the metrics token; and every scrape passes ``promtool check metrics``.

The several-process side (``kvreg serve --workers N``) and a real Prometheus scraping it are in
``tests/integration/test_ops_metrics.py``."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvreg.core.digest import Digest
from kvreg_registry.api.ratelimit import AuthFailureLimiter
from kvreg_registry.api.routes_packs import OBJECTS_HEADER
from kvreg_registry.app import create_app
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings
from prometheus_text import label_values, promtool_check, samples, tool, value
from web.library import OPERATOR, Library

REPO = Path(__file__).resolve().parents[2]
NS_ROUTE = "/api/v1/namespaces/{ns}"
BAD = "kvreg_" + "M" * 43


def scrape(lib: Library, **headers: str) -> str:
    r = lib.client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    promtool_check(r.text)
    return r.text


def make_library(tmp_path: Path, **settings: object) -> Iterator[Library]:
    app = create_app(Settings(data_dir=tmp_path / "data", **settings))  # type: ignore[arg-type]
    with TestClient(app, base_url="http://testserver") as client:
        with app.state.registry.db.write() as s:
            accounts.create_user(s, OPERATOR, "root", admin=True)
            token = accounts.create_token(s, OPERATOR, "root", label="metrics tests").token
        yield Library(client=client, admin_token=token)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Library]:
    """A registry on SQLite with small limits and a failed-authentication limit of 2."""
    yield from make_library(tmp_path, max_object_bytes=4096, auth_failure_limit=2)


def test_a_push_and_a_pull_are_counted_by_route_template(lib: Library) -> None:
    ns = lib.namespace("metrics-team")
    published = lib.publish(ns, "answer-one", "the answer to the question is forty two")
    digests = list(published.manifest.object_digests())
    sizes = [lib.app_state.storage.size(d) for d in digests]
    # the pull: the ref, the envelope, then every object
    assert lib.api("GET", f"/namespaces/{ns}/refs/answer-one").status_code == 200
    assert lib.api("GET", f"/namespaces/{ns}/envelopes/{published.digest}").status_code == 200
    served = 0
    for digest in digests:
        r = lib.api("GET", f"/namespaces/{ns}/objects/{digest}")
        assert r.status_code == 200
        served += len(r.content)
    assert served == sum(sizes)

    text = scrape(lib)
    assert value(text, "kvreg_pushes_total") == 1
    assert value(text, "kvreg_pulls_total", api="kvreg") == 1
    assert value(text, "kvreg_pulls_total", api="oci") == 0
    # the push's one pack held every object of the artifact and its manifest, all new to the storage
    manifest_size = len(published.manifest.raw_bytes)
    assert value(text, "kvreg_objects_stored_total", storage="new") == len(digests) + 1
    assert value(text, "kvreg_objects_stored_bytes_total") == sum(sizes) + manifest_size
    pack_route = f"{NS_ROUTE}/uploads/{{upload_id}}/objects"
    object_route = f"{NS_ROUTE}/objects/{{digest}}"
    assert value(text, "kvreg_http_received_bytes_total", route=pack_route) == sum(sizes) + manifest_size
    assert value(text, "kvreg_http_served_bytes_total", route=object_route) == served
    assert value(text, "kvreg_http_requests_total", method="POST", route=pack_route, status="200") == 1
    ok = {"method": "GET", "route": object_route}
    assert value(text, "kvreg_http_requests_total", status="200", **ok) == len(digests)
    assert value(text, "kvreg_http_request_duration_seconds_count", **ok) == len(digests)
    # templates only: no namespace, ref or digest in any label
    routes = label_values(text, "kvreg_http_requests_total", "route")
    assert f"{NS_ROUTE}/envelopes/{{digest}}" in routes
    assert f"{NS_ROUTE}/refs/{{name}}" in routes
    assert not any(ns in r or "sha256:" in r or "answer-one" in r for r in routes), routes
    assert ns not in text and str(published.digest) not in text


def test_refused_uploads_count_by_reason(small: Library) -> None:
    ns = small.namespace()
    data = b"some bytes"
    wrong = Digest.of_bytes(b"other bytes")
    r = small.api("PUT", f"/namespaces/{ns}/objects/{wrong}", content=data)
    assert r.status_code == 422 and r.headers["x-kvreg-error-code"] == "DIGEST_MISMATCH"
    # refused by the body limit before any route runs: still counted, under the route's template
    big = b"x" * 8192
    r = small.api("PUT", f"/namespaces/{ns}/objects/{Digest.of_bytes(big)}", content=big)
    assert r.status_code == 413
    # a pack with one object that is not what it claims
    upload = small.api("POST", f"/namespaces/{ns}/uploads", json={"digests": [str(wrong)]}).json()["upload"]
    r = small.api(
        "POST",
        f"/namespaces/{ns}/uploads/{upload}/objects",
        content=data,
        headers={OBJECTS_HEADER: f"{wrong}={len(data)}", "Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 422
    good = Digest.of_bytes(data)
    assert small.api("PUT", f"/namespaces/{ns}/objects/{good}", content=data).status_code == 201
    assert small.api("PUT", f"/namespaces/{ns}/objects/{good}", content=data).status_code == 200

    text = scrape(small)
    assert value(text, "kvreg_objects_refused_total", reason="digest_mismatch") == 2
    assert value(text, "kvreg_objects_refused_total", reason="too_large") == 1
    assert value(text, "kvreg_objects_stored_total", storage="new") == 1
    assert value(text, "kvreg_objects_stored_total", storage="existing") == 1
    assert value(text, "kvreg_objects_stored_bytes_total") == len(data)
    route = f"{NS_ROUTE}/objects/{{digest}}"
    assert value(text, "kvreg_http_requests_total", method="PUT", route=route, status="413") == 1
    assert value(text, "kvreg_http_requests_total", method="PUT", route=route, status="422") == 1


def test_ref_conflicts_auth_failures_and_rate_limiting_are_counted(small: Library) -> None:
    ns = small.namespace()
    first = small.publish(ns, "team-ref", "first words here")
    second = small.publish(ns, "team-other", "second words there")
    # a compare-and-swap from a stale digest, and a create of a ref that exists
    stale = {"If-Match": f'"{second.digest}"'}
    r = small.api("PUT", f"/namespaces/{ns}/refs/team-ref", json={"digest": second.digest}, headers=stale)
    assert r.status_code == 409 and r.headers["x-kvreg-error-code"] == "REF_CONFLICT"
    r = small.api(
        "PUT",
        f"/namespaces/{ns}/refs/team-ref",
        json={"digest": first.digest},
        headers={"If-None-Match": "*"},
    )
    assert r.status_code == 409
    # two failed authentications reach the limit of 2; the third attempt is refused before any lookup
    for _ in range(2):
        assert (
            small.client.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {BAD}"}).status_code
            == 401
        )
    assert (
        small.client.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {BAD}"}).status_code == 429
    )

    text = scrape(small)
    assert value(text, "kvreg_ref_conflicts_total") == 2
    assert value(text, "kvreg_auth_failures_total") == 2
    assert value(text, "kvreg_rate_limited_requests_total") == 1
    assert value(text, "kvreg_pushes_total") == 2


def test_the_audit_log_and_the_database_pool_are_reported(small: Library) -> None:
    def log_size() -> int:
        with small.app_state.db.read() as s:
            return int(small.app_state.log.size(s))

    text = scrape(small)
    assert value(text, "kvreg_audit_log_entries") == log_size()  # the admin and its token
    assert ("kvreg_audit_log_checkpoint_age_seconds", frozenset()) not in samples(text)  # no checkpoint yet
    before = log_size()
    ns = small.namespace()
    small.publish(ns, "log-one", "words for the log")
    size = log_size()
    text = scrape(small)
    assert value(text, "kvreg_audit_log_entries") == size > before
    assert value(text, "kvreg_audit_log_checkpoint_entries") == 0  # nobody asked for one yet
    assert small.client.get("/api/v1/log/checkpoint").status_code == 200
    text = scrape(small)
    assert value(text, "kvreg_audit_log_checkpoint_entries") == size
    assert 0 <= value(text, "kvreg_audit_log_checkpoint_age_seconds") < 60
    # every connection went back to its pool; SQLAlchemy's default pool: 5 and 10 of overflow
    assert value(text, "kvreg_db_pool_connections_in_use") == 0
    assert value(text, "kvreg_db_pool_connections_max") == 15
    assert value(text, "kvreg_http_requests_in_progress") == 1  # the scrape itself
    assert value(text, "kvreg_build_info", version=__import__("kvreg").__version__) == 1


def test_a_path_no_route_serves_is_unmatched_and_its_path_is_not_a_label(small: Library) -> None:
    secret = hashlib.sha256(b"path").hexdigest()
    assert small.client.get(f"/no/such/{secret}").status_code == 404
    assert small.client.get("/static/no-such-file.css").status_code == 404
    text = scrape(small)
    assert value(text, "kvreg_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert (
        value(text, "kvreg_http_requests_total", method="GET", route="/static/{path:path}", status="404") == 1
    )
    assert secret not in text


def test_the_metrics_token_guards_the_scrape(tmp_path: Path) -> None:
    for lib in make_library(tmp_path, metrics_token="metrics-s3cret", auth_failure_limit=4):
        r = lib.client.get("/metrics")
        assert r.status_code == 401
        assert r.headers["x-kvreg-error-code"] == "UNAUTHENTICATED"
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["code"] == "UNAUTHENTICATED"  # JSON, not the web UI's page
        for wrong in ("Bearer wrong", "Basic metrics-s3cret", "Bearer metrics-s3cre"):
            assert lib.client.get("/metrics", headers={"Authorization": wrong}).status_code == 401
        # guesses count against the failed-authentication limiter, as other tokens do
        r = lib.client.get("/metrics", headers={"Authorization": "Bearer metrics-s3cret"})
        assert r.status_code == 429
        app = lib.client.app
        app.state.auth_failure_limiter = AuthFailureLimiter(limit=4, window_seconds=60, max_keys=10)  # type: ignore[attr-defined]
        text = scrape(lib, Authorization="Bearer metrics-s3cret")
        assert value(text, "kvreg_http_requests_total", method="GET", route="/metrics", status="401") == 4
        assert value(text, "kvreg_http_requests_total", method="GET", route="/metrics", status="429") == 1
        assert value(text, "kvreg_auth_failures_total") == 4
        assert value(text, "kvreg_rate_limited_requests_total") == 1


def test_the_documented_metrics_and_alerts_are_the_registrys(small: Library, tmp_path: Path) -> None:
    """docs/administration.md lists every metric a scrape has and no other, and its suggested
    alerts pass ``promtool check rules``."""
    section = (
        (REPO / "docs" / "administration.md").read_text(encoding="utf-8").split("## 12. What to watch")[1]
    )
    documented = set(re.findall(r"`(kvreg_[a-z_]+)`", section.split("### Suggested alerts")[0]))
    small.publish(small.namespace(), "doc-one", "words to make a log")
    assert small.client.get("/api/v1/log/checkpoint").status_code == 200
    exposed = {
        re.sub(r"_(bucket|count|sum|created)$", "", name)
        for name, _ in samples(scrape(small))
        if not name.endswith("_created")
    }
    assert documented == exposed
    rules = re.search(r"```yaml\n(.*?)```", section.split("### Suggested alerts")[1], re.S)
    assert rules is not None
    (tmp_path / "rules.yml").write_text(rules.group(1))
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(tmp_path / "rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
