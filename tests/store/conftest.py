"""Fixtures for the store tests."""

from __future__ import annotations

import pytest

from kvreg.store.home import Home


@pytest.fixture
def home(tmp_path) -> Home:
    """A store root that does not exist yet (the stores create it lazily)."""
    return Home(tmp_path / "kvreg")
