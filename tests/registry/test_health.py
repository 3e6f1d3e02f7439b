"""``GET /livez`` and ``GET /readyz`` (``kvreg_registry.api.routes_ops``, ``api.health``), in process:
ready with every check passing and no probe left behind (a folder, and S3); ``503`` naming the
check that failed (storage, migrations, the log key), and ready again once it is fixed; a check
that hangs answers in bounded time and is not started twice.

Stopping PostgreSQL and SeaweedFS under a running server is
``tests/integration/test_ops_readiness.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from kvreg.core.errors import UnavailableError
from kvreg.core.keys import SigningKey
from kvreg.fileio.keyfiles import save_signing_key
from kvreg_registry.api.health import ReadinessProbe
from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings
from kvreg_registry.storage import open_storage
from kvreg_registry.storage.base import PROBE_AREA
from services import s3_client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    with TestClient(app, base_url="http://testserver") as c:
        app.state.readiness = ReadinessProbe(timeout_s=2, min_interval_s=0)
        yield c


def ready(client: TestClient) -> tuple[int, dict[str, object]]:
    r = client.get("/readyz")
    assert r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "no-store"
    return r.status_code, r.json()


def test_livez_answers_while_the_process_serves(client: TestClient) -> None:
    r = client.get("/livez")
    assert (r.status_code, r.json()) == (200, {"status": "live"})
    assert client.head("/livez").status_code == 200


def test_ready_when_every_check_passes_and_the_probe_leaves_nothing(
    client: TestClient, tmp_path: Path
) -> None:
    status, body = ready(client)
    assert status == 200
    assert body == {
        "status": "ready",
        "failed": [],
        "checks": {name: {"ok": True} for name in ("database", "migrations", "storage", "log_key")},
    }
    storage = client.app.state.registry.storage  # type: ignore[attr-defined]
    assert list((storage.root / PROBE_AREA).iterdir()) == []
    assert list(storage.iter_objects()) == []
    # the routes are not part of the published API
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert not {"/livez", "/readyz", "/metrics"} & set(paths)


def test_a_storage_that_refuses_the_probe_is_not_ready(client: TestClient) -> None:
    storage = client.app.state.registry.storage  # type: ignore[attr-defined]
    probe_area = storage.root / PROBE_AREA
    if probe_area.exists():
        probe_area.rmdir()
    probe_area.write_bytes(b"a file where the probe folder should be")
    status, body = ready(client)
    assert status == 503
    assert body["status"] == "not ready" and body["failed"] == ["storage"]
    error = body["checks"]["storage"]["error"]
    assert error.startswith("the object storage failed a write and read of a probe object")
    assert str(storage.root) not in error  # the detail is for the server's log only
    probe_area.unlink()
    assert ready(client)[0] == 200


def test_a_schema_behind_the_code_is_not_ready(client: TestClient) -> None:
    db = client.app.state.registry.db  # type: ignore[attr-defined]
    with db.write() as s:
        head = s.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        s.execute(text("UPDATE alembic_version SET version_num = '0007'"))
    status, body = ready(client)
    assert status == 503 and body["failed"] == ["migrations"]
    assert body["checks"]["migrations"] == {
        "ok": False,
        "error": f"the schema is at revision 0007, this code needs {head}",
    }
    with db.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
    assert ready(client)[0] == 200


def test_an_unreadable_or_different_log_key_is_not_ready(client: TestClient) -> None:
    key_file = client.app.state.registry.settings.log_key_path  # type: ignore[attr-defined]
    original = key_file.read_bytes()
    key_file.unlink()
    status, body = ready(client)
    assert status == 503 and body["failed"] == ["log_key"]
    assert body["checks"]["log_key"]["error"].startswith("the audit log's key file cannot be read")
    save_signing_key(SigningKey.generate(), key_file)
    status, body = ready(client)
    assert status == 503
    assert (
        body["checks"]["log_key"]["error"] == "the audit log's key file holds another key than the one in use"
    )
    key_file.unlink()
    key_file.write_bytes(original)
    key_file.chmod(0o600)
    assert ready(client)[0] == 200


def test_a_check_that_hangs_answers_in_time_and_is_not_started_twice(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.app.state.readiness = ReadinessProbe(timeout_s=0.3, min_interval_s=0)  # type: ignore[attr-defined]
    storage = client.app.state.registry.storage  # type: ignore[attr-defined]
    release = threading.Event()
    calls: list[int] = []

    def stuck() -> None:
        calls.append(1)
        release.wait(30)

    monkeypatch.setattr(storage, "probe", stuck)
    try:
        status, body = ready(client)
        assert status == 503 and body["failed"] == ["storage"]
        assert body["checks"]["storage"]["error"] == "no answer within 0.3 s"
        assert body["checks"]["database"] == {"ok": True}
        status, body = ready(client)
        assert body["checks"]["storage"]["error"] == "an earlier check has not answered yet"
        assert calls == [1]
    finally:
        release.set()
    monkeypatch.undo()
    for _ in range(50):  # the stuck thread returns, and lets the next probe run the check again
        if ready(client)[0] == 200:
            break
        threading.Event().wait(0.05)
    assert ready(client)[0] == 200


def test_probes_closer_than_the_interval_share_one_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    with TestClient(app) as c:
        app.state.readiness = ReadinessProbe(min_interval_s=60)
        probes: list[int] = []
        storage = app.state.registry.storage
        real = storage.probe
        monkeypatch.setattr(storage, "probe", lambda: (probes.append(1), real())[1])
        for _ in range(5):
            assert c.get("/readyz").status_code == 200
        assert probes == [1]


def test_the_s3_probe_writes_reads_and_removes_its_own_key(
    s3_bucket: str, s3_options: dict[str, str]
) -> None:
    storage = open_storage(f"s3://{s3_bucket}/ready/", **s3_options)
    storage.probe()
    storage.probe()
    listed = s3_client(s3_options).list_objects_v2(Bucket=s3_bucket, Prefix="ready/")
    assert listed.get("KeyCount", 0) == 0
    assert list(storage.iter_objects()) == []
    unreachable = open_storage(
        f"s3://{s3_bucket}/ready/", **{**s3_options, "endpoint_url": "http://127.0.0.1:9"}
    )
    with pytest.raises(UnavailableError):
        unreachable.probe()
