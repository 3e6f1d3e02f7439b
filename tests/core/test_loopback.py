"""``kvreg.core.loopback``: which hosts count as loopback for plain HTTP (by spelling, no DNS)."""

from __future__ import annotations

import pytest

from kvreg.core.loopback import is_loopback


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost.localdomain", "registry.localhost", "127.0.0.1", "127.9.8.7", "::1", "[::1]"],
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["example.com", "localhost.example.com", "10.0.0.1", "0.0.0.0", "[::]", "128.0.0.1", ""],
)
def test_other_hosts(host: str) -> None:
    assert not is_loopback(host)
