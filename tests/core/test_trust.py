"""Trust policy: namespaces and the wildcard, file round trip, strict loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreg.core.errors import ConfigError, InvalidNameError, NotFoundError
from kvreg.core.keys import SigningKey
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import load_trust_policy, save_trust_policy


def test_missing_file_is_empty(tmp_path: Path) -> None:
    policy = load_trust_policy(tmp_path / "trust.json")
    assert policy.is_empty()
    assert policy.keys_for("aime25") == []


def test_allow_keys_for_and_wildcard() -> None:
    a, b, c = (SigningKey.generate().public_key for _ in range(3))
    policy = TrustPolicy()
    policy.allow("aime25", a)
    policy.allow("aime25", a)  # idempotent
    policy.allow("aime25", b)
    policy.allow("*", c)
    policy.allow("*", a)
    assert policy.keys_for("aime25") == [a, b, c]
    assert policy.keys_for("other") == [c, a]
    assert policy.all_keys() == [a, b, c]
    policy.remove("aime25", b.keyid)
    assert policy.keys_for("aime25") == [a, c]
    with pytest.raises(NotFoundError):
        policy.remove("aime25", b.keyid)
    with pytest.raises(InvalidNameError):
        policy.allow("../x", a)
    with pytest.raises(InvalidNameError):
        policy.keys_for("Bad")


def test_save_load_round_trip(tmp_path: Path) -> None:
    a, b = (SigningKey.generate().public_key for _ in range(2))
    policy = TrustPolicy()
    policy.allow("aime25", a)
    policy.allow("*", b)
    path = tmp_path / "trust.json"
    save_trust_policy(policy, path)
    doc = json.loads(path.read_text())
    assert doc == {"version": 1, "namespaces": {"*": [b.to_text()], "aime25": [a.to_text()]}}
    loaded = load_trust_policy(path)
    assert loaded.namespaces() == policy.namespaces()
    assert loaded.keys_for("aime25") == [a, b]
    assert [p.name for p in tmp_path.iterdir()] == ["trust.json"]


@pytest.mark.parametrize(
    "doc",
    [
        b"not json",
        b"[]",
        b'{"version": 2, "namespaces": {}}',
        b'{"version": true, "namespaces": {}}',
        b'{"namespaces": {}}',
        b'{"version": 1}',
        b'{"version": 1, "namespaces": []}',
        b'{"version": 1, "namespaces": {"a": "ed25519:x"}}',
        b'{"version": 1, "namespaces": {"a": ["ed25519:x"]}}',
        b'{"version": 1, "namespaces": {"../a": []}}',
        b'{"version": 1, "namespaces": {}, "extra": 1}',
        b'{"version": 1, "namespaces": {"a": [], "a": []}}',
    ],
)
def test_malformed_policy_is_an_error_not_empty(tmp_path: Path, doc: bytes) -> None:
    path = tmp_path / "trust.json"
    path.write_bytes(doc)
    with pytest.raises(ConfigError):
        load_trust_policy(path)
