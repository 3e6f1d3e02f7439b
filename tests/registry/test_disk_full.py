"""A registry whose storage is full answers ``507 DISK_FULL`` and stores nothing, and the client
reads that answer as a ``DiskFullError``; other OS errors stay ``500 INTERNAL``."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvreg.core.errors import DiskFullError, from_os_error
from kvreg.remote.errors import error_from_response
from kvreg_registry.app import create_app
from kvreg_registry.auth import Principal
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings
from kvreg_registry.storage.base import PendingObject

OPERATOR = Principal(is_admin=True, name="operator")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    application = create_app(Settings(data_dir=tmp_path / "reg"))
    with TestClient(application, base_url="http://testserver", raise_server_exceptions=False) as client:
        with application.state.registry.db.write() as s:
            accounts.create_user(s, OPERATOR, "alice", admin=True)
            token = accounts.create_token(s, OPERATOR, "alice", label="t").token
        headers = {"Authorization": f"Bearer {token}"}
        assert client.post("/api/v1/namespaces", json={"name": "ns"}, headers=headers).status_code == 201
        yield client, headers


def _put(client: TestClient, headers: dict[str, str], blob: bytes) -> tuple[str, object]:
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    return digest, client.put(f"/api/v1/namespaces/ns/objects/{digest}", content=blob, headers=headers)


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EDQUOT])
def test_an_upload_into_a_full_storage_is_507_and_stores_nothing(
    registry: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    client, headers = registry

    def full(self: PendingObject, *args: object, **kwargs: object) -> None:
        raise OSError(number, "No space left on device", "/srv/registry/objects/tmp-1")

    for name in ("write", "receive"):
        if hasattr(PendingObject, name):
            monkeypatch.setattr(PendingObject, name, full)
    digest, answer = _put(client, headers, b"a blob that finds no room" * 100)
    assert answer.status_code == 507, answer.text  # type: ignore[attr-defined]
    body = answer.json()["error"]  # type: ignore[attr-defined]
    assert body["code"] == "DISK_FULL" and "nothing of this request was stored" in body["message"]
    assert "/srv/registry" not in answer.text  # type: ignore[attr-defined]  # no server path leaks
    error = error_from_response(answer)  # type: ignore[arg-type]
    assert isinstance(error, DiskFullError) and error.exit_code == 1
    monkeypatch.undo()
    assert client.head(f"/api/v1/namespaces/ns/objects/{digest}", headers=headers).status_code == 404
    _, again = _put(client, headers, b"a blob that finds no room" * 100)
    assert again.status_code in (200, 201)  # type: ignore[attr-defined]  # room again: stored


def test_other_os_errors_stay_internal(
    registry: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, headers = registry

    def broken(self: PendingObject, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    for name in ("write", "receive"):
        if hasattr(PendingObject, name):
            monkeypatch.setattr(PendingObject, name, broken)
    _, answer = _put(client, headers, b"x" * 1000)
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "INTERNAL"  # type: ignore[attr-defined]


def test_only_the_environments_refusals_are_typed() -> None:
    assert isinstance(from_os_error(OSError(errno.ENOSPC, "No space left on device")), DiskFullError)
    refused = from_os_error(PermissionError(errno.EACCES, "Permission denied", "/x/y"))
    assert refused is not None and refused.code == "FILE_ACCESS" and "/x/y" in refused.message
    assert from_os_error(OSError(errno.EIO, "Input/output error")) is None
    assert from_os_error(FileNotFoundError(errno.ENOENT, "No such file")) is None
