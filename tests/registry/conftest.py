"""Fixtures for the registry tests: the real PostgreSQL and S3 store (see tests/services.py).

``scripts/services.sh start`` (``make services``) must have run; without it these
fixtures fail the test with a message that says so, they never skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvreg_registry.app import create_app
from kvreg_registry.services import accounts
from kvreg_registry.settings import Settings
from services import fresh_bucket, fresh_pg_database, s3_settings
from services import pg_url as _pg_url
from web.library import OPERATOR, Library


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The SQLAlchemy URL of the shared test database (a role with CREATEDB)."""
    return _pg_url()


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped after the test."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="session")
def s3_options() -> dict[str, str]:
    """``endpoint_url``, ``access_key``, ``secret_key``, ``region`` of the test S3 store."""
    return s3_settings()


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """A bucket made for this test session, emptied and deleted at its end."""
    with fresh_bucket() as name:
        yield name


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.sqlite3'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
def lib(database_url: str, tmp_path: Path) -> Iterator[Library]:
    """A registry app on ``database_url`` with a server admin, seeded through its API."""
    app = create_app(Settings(data_dir=tmp_path / "data", database_url=database_url))
    with TestClient(app, base_url="http://testserver") as client:
        with app.state.registry.db.write() as s:
            accounts.create_user(s, OPERATOR, "root", admin=True)
            token = accounts.create_token(s, OPERATOR, "root", label="registry tests").token
        yield Library(client=client, admin_token=token)
