"""Fixtures of the web UI tests: a real registry app in this process (``library.Library``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvreg_registry.app import create_app
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings

from .library import OPERATOR, Library


def open_library(data_dir: Path, **settings: object) -> Iterator[Library]:
    app = create_app(Settings(data_dir=data_dir, **settings))  # type: ignore[arg-type]
    with TestClient(app, base_url="http://testserver") as client:
        state = app.state.registry
        with state.db.write() as s:
            accounts.create_user(s, OPERATOR, "root", admin=True)
            token = accounts.create_token(s, OPERATOR, "root", label="web tests").token
        yield Library(client=client, admin_token=token)


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Library]:
    """An empty registry (SQLite + folder) with a server admin ``root``; publish into it."""
    yield from open_library(tmp_path / "registry")
