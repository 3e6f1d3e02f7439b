"""Fixtures for the registry tests: the real PostgreSQL and S3 store (see tests/services.py).

``scripts/services.sh start`` (``make services``) must have run; without it these
fixtures fail the test with a message that says so, they never skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services import fresh_bucket, fresh_pg_database, s3_settings
from services import pg_url as _pg_url


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
