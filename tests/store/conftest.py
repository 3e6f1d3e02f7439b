"""Fixtures for the store tests: a fresh store root and a toy manifest format."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest

from kvreg.core.digest import Digest
from kvreg.store.home import Home


@pytest.fixture
def home(tmp_path) -> Home:
    return Home(tmp_path / "kvreg")


def json_children(data: bytes) -> list[Digest]:
    """Toy manifests for gc/fsck tests: a JSON list of digest strings."""
    return [Digest(d) for d in json.loads(data)]


def toy_manifest(children: Iterable[str]) -> bytes:
    return json.dumps(sorted(children)).encode()
