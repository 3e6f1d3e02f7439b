"""The real services the tests use: PostgreSQL, an S3 store (SeaweedFS) and three OCI registries.

``scripts/services.sh start`` (``make services``; ``make test`` runs it first)
starts both on loopback and writes their settings to ``.services/env``. The
helpers here read those settings from the environment (``KVREG_TEST_PG_URL``,
``KVREG_TEST_S3_*``, ``KVREG_TEST_OCI_*``), else from ``.services/env``. When neither has them, the
test FAILS with a message that says how to start the services: a suite that
silently skips its database and S3 tests would pass without testing anything.

:func:`fresh_pg_database` and :func:`fresh_bucket` give a test (or a session) a
database or bucket of its own, dropped afterwards, so that runs never see each
other's data.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
ENV_FILE = Path(os.environ.get("KVREG_SERVICES_DIR", REPO / ".services")) / "env"
HOW = "run `make services` (make test does it), or `scripts/services.sh start`"

_S3_KEYS = {
    "endpoint_url": "KVREG_TEST_S3_ENDPOINT",
    "access_key": "KVREG_TEST_S3_ACCESS_KEY",
    "secret_key": "KVREG_TEST_S3_SECRET_KEY",
    "region": "KVREG_TEST_S3_REGION",
}


def _env_file() -> dict[str, str]:
    try:
        text = ENV_FILE.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def _setting(name: str) -> str:
    value = os.environ.get(name) or _env_file().get(name)
    if not value:
        pytest.fail(f"{name} is not set and {ENV_FILE} does not give it: {HOW}", pytrace=False)
    return value


def pg_url() -> str:
    """The SQLAlchemy URL of the test database (``postgresql+psycopg://...``)."""
    return _setting("KVREG_TEST_PG_URL")


def s3_settings() -> dict[str, str]:
    """``endpoint_url``, ``access_key``, ``secret_key``, ``region``: the options of ``open_storage``."""
    return {option: _setting(var) for option, var in _S3_KEYS.items()}


def _psycopg_url(url: str) -> str:
    """A SQLAlchemy URL as psycopg takes it (``postgresql://``)."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.startswith("postgresql"):
        pytest.fail(f"not a PostgreSQL URL: {scheme}://...", pytrace=False)
    return f"postgresql://{rest}"


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


def _pg_connect(url: str) -> Any:
    import psycopg

    try:
        return psycopg.connect(_psycopg_url(url), autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {url.rpartition('@')[2]} does not answer ({exc}): {HOW}", pytrace=False)


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new, empty database; yields its SQLAlchemy URL and drops it afterwards."""
    from psycopg import sql

    admin = pg_url()
    name = f"kvreg_test_{uuid.uuid4().hex[:16]}"
    with _pg_connect(admin) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(admin, name)
    finally:
        _drop_pg_database(admin, name)


def wait_for_a_lock_wait(
    url: str, what: str, *, still_running: Callable[[], bool] = lambda: True, timeout: float = 30.0
) -> None:
    """Return once some transaction on the PostgreSQL database at ``url`` waits on a lock:
    how the race tests know a concurrent request has reached the lock they hold. Fails
    the test after ``timeout`` seconds, or as soon as ``still_running()`` is false."""
    deadline = time.monotonic() + timeout
    with _pg_connect(url) as conn:
        while not conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            if not still_running() or time.monotonic() > deadline:
                pytest.fail(f"{what} never waited on the lock held for it")
            time.sleep(0.05)


def _drop_pg_database(admin: str, name: str) -> None:
    """Drop a scratch database, waiting out an autovacuum worker still inside it.

    ``WITH (FORCE)`` ends the sessions left open by the test; an autovacuum
    worker is ended too when the role is in ``pg_signal_backend`` (the services
    script grants it). On a cluster set up before that grant the drop is
    refused while a worker runs, so it is retried for a few seconds.
    """
    import psycopg
    from psycopg import sql

    statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    for attempt in range(20):
        try:
            with _pg_connect(admin) as conn:
                conn.execute(statement)
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
            if attempt == 19:
                raise
            time.sleep(0.5)


def s3_client(settings: dict[str, str] | None = None) -> Any:
    """A plain boto3 client of the test S3 store, to look behind a storage backend's back."""
    import boto3
    from botocore.config import Config

    s = settings or s3_settings()
    return boto3.client(
        "s3",
        endpoint_url=s["endpoint_url"],
        aws_access_key_id=s["access_key"],
        aws_secret_access_key=s["secret_key"],
        region_name=s["region"],
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def empty_bucket(client: Any, bucket: str) -> None:
    """Abort every multipart upload and delete every key of ``bucket``."""
    for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        for upload in page.get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


@contextlib.contextmanager
def fresh_bucket() -> Iterator[str]:
    """A new, empty bucket in the test S3 store; yields its name, empties and deletes it afterwards."""
    from botocore.exceptions import BotoCoreError, ClientError

    settings = s3_settings()
    client = s3_client(settings)
    name = f"kvreg-test-{uuid.uuid4().hex[:16]}"
    try:
        client.create_bucket(Bucket=name)
    except (BotoCoreError, ClientError) as exc:
        pytest.fail(
            f"S3 at {settings['endpoint_url']} refuses to create a bucket ({exc}): {HOW}", pytrace=False
        )
    try:
        yield name
    finally:
        empty_bucket(client, name)
        client.delete_bucket(Bucket=name)


def oci_registry() -> dict[str, str]:
    """The OCI registry behind htpasswd basic auth: ``url``, ``user``, ``password``, ``root``
    (its storage folder; blobs at ``<root>/docker/registry/v2/blobs/sha256/<2 hex>/<hex>/data``)."""
    return {
        "url": _setting("KVREG_TEST_OCI_URL"),
        "user": _setting("KVREG_TEST_OCI_USER"),
        "password": _setting("KVREG_TEST_OCI_PASSWORD"),
        "root": _setting("KVREG_TEST_OCI_ROOT"),
    }


def oci_open_registry() -> dict[str, str]:
    """The OCI registry without authentication: ``url`` and ``root``."""
    return {"url": _setting("KVREG_TEST_OCI_OPEN_URL"), "root": _setting("KVREG_TEST_OCI_OPEN_ROOT")}


def oci_s3_registry() -> dict[str, str]:
    """The OCI registry without authentication whose storage is the S3 store (``bucket``), blob
    GETs and HEADs redirected to presigned URLs of the store: ``url`` and ``bucket``."""
    return {"url": _setting("KVREG_TEST_OCI_S3_URL"), "bucket": _setting("KVREG_TEST_OCI_S3_BUCKET")}


def oci_blob_key(digest: str) -> str:
    """Where CNCF distribution keeps blob ``digest`` in its storage (a path, or an S3 key)."""
    hexdigest = digest.removeprefix("sha256:")
    return f"docker/registry/v2/blobs/sha256/{hexdigest[:2]}/{hexdigest}/data"


def oci_blob_path(root: str, digest: str) -> Path:
    """Where CNCF distribution's filesystem storage keeps blob ``digest``."""
    return Path(root) / oci_blob_key(digest)
