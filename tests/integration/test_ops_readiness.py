"""``/readyz`` of a real ``kvreg serve`` while its PostgreSQL and its S3 store go away and come back.

The registry runs on a PostgreSQL cluster and a SeaweedFS server of this test's own
(``private_services``: the shared ones serve other tests at the same time). Stopping PostgreSQL
turns ``/readyz`` into ``503`` naming the database (and the migrations, which it cannot check),
stopping SeaweedFS into ``503`` naming the storage; each time ``/livez`` stays ``200``, and
``/readyz`` is ``200`` again once the service is back. Every wait is bounded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .private_services import private_postgres, private_seaweed
from .registry_server import Registry

WAIT_S = 30.0


def readyz(reg: Registry) -> tuple[int, dict[str, Any]]:
    r = httpx.get(f"{reg.url}/readyz", timeout=20)
    return r.status_code, r.json()


def wait_for(reg: Registry, wanted: Callable[[int, dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """Poll ``/readyz`` until ``wanted(status, body)`` (at most ``WAIT_S`` seconds)."""
    deadline = time.monotonic() + WAIT_S
    status, body = readyz(reg)
    while not wanted(status, body):
        assert time.monotonic() < deadline, f"/readyz never became {what}: {status} {body}\n{reg.log_tail()}"
        time.sleep(0.5)
        status, body = readyz(reg)
    return body


def test_readyz_follows_the_database_and_the_storage(tmp_path: Path) -> None:
    with private_postgres() as pg, private_seaweed(tmp_path / "weed") as weed:
        weed.make_bucket("kvreg-ready")
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("KVREG_") or k.startswith("KVREG_TEST_")
        }
        env.update(
            KVREG_DATA=str(tmp_path / "data"),
            KVREG_DATABASE_URL=pg.url,
            KVREG_STORAGE="s3://kvreg-ready/kvreg/",
            KVREG_S3_ENDPOINT=weed.s3["endpoint_url"],
            KVREG_S3_ACCESS_KEY=weed.s3["access_key"],
            KVREG_S3_SECRET_KEY=weed.s3["secret_key"],
            KVREG_S3_REGION=weed.s3["region"],
        )
        reg = Registry("postgres-s3", tmp_path, env)
        reg.start()
        try:
            status, body = readyz(reg)
            assert (status, body["status"], body["failed"]) == (200, "ready", []), body

            pg.stop()
            body = wait_for(reg, lambda s, b: s == 503, "503 with PostgreSQL stopped")
            assert body["status"] == "not ready"
            assert body["failed"] == ["database", "migrations"], body
            assert body["checks"]["database"]["error"].startswith("the database does not answer")
            assert body["checks"]["storage"] == {"ok": True} and body["checks"]["log_key"] == {"ok": True}
            assert pg.password not in str(body)
            assert httpx.get(f"{reg.url}/livez", timeout=10).status_code == 200
            pg.start()
            wait_for(reg, lambda s, b: s == 200, "200 with PostgreSQL back")

            weed.stop()
            body = wait_for(reg, lambda s, b: s == 503, "503 with SeaweedFS stopped")
            assert body["failed"] == ["storage"], body
            assert body["checks"]["storage"]["error"].startswith("the object storage failed")
            assert httpx.get(f"{reg.url}/livez", timeout=10).status_code == 200
            weed.start()
            wait_for(reg, lambda s, b: s == 200, "200 with SeaweedFS back")
            # the probes left nothing in the bucket
            listed = weed.client().list_objects_v2(Bucket="kvreg-ready", Prefix="kvreg/")
            assert listed.get("KeyCount", 0) == 0, listed
        finally:
            reg.stop()
