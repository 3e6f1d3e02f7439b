"""``kvreg-admin`` against a real database: the first admin, namespaces, roles, keys, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvreg.core.keys import SigningKey


def admin(data: Path, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kvreg_registry.admin", "--data", str(data), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == expect, proc.stdout + proc.stderr
    return proc


def test_first_setup_and_every_group(tmp_path: Path) -> None:
    data = tmp_path / "data"
    admin(data, "migrate")
    admin(data, "user", "create", "alice", "--admin")
    token = json.loads(admin(data, "--json", "token", "create", "alice", "--label", "laptop").stdout)
    assert token["token"].startswith("kvreg_") and token["user"] == "alice"
    admin(data, "namespace", "create", "aime25", "--description", "AIME 2025")
    admin(data, "namespace", "create", "open", "--public")
    listed = json.loads(admin(data, "--json", "namespace", "list").stdout)["namespaces"]
    assert [(n["namespace"], n["public"]) for n in listed] == [("aime25", False), ("open", True)]
    admin(data, "user", "create", "bob")
    admin(data, "role", "set", "aime25", "bob", "write")
    users = json.loads(admin(data, "--json", "user", "list").stdout)["users"]
    assert {u["user"]: u["roles"] for u in users}["bob"] == {"aime25": "write"}
    key = SigningKey.generate().public_key
    added = json.loads(
        admin(
            data, "--json", "key", "add", "aime25", key.to_text(), "--label", "CI signer", "--owner", "bob"
        ).stdout
    )
    assert added["label"] == "CI signer" and added["owner"] == "bob" and added["log_index"] > 0
    keys = json.loads(admin(data, "--json", "key", "list", "aime25").stdout)["keys"]
    assert keys == [
        {
            "keyid": key.keyid,
            "public_key": key.to_text(),
            "label": "CI signer",
            "owner": "bob",
            "log_index": added["log_index"],
            "revoked": False,
        }
    ]
    other = SigningKey.generate().public_key
    admin(data, "key", "add", "aime25", other.to_text())  # no label: the owner is kvreg-admin
    keys = json.loads(admin(data, "--json", "key", "list", "aime25").stdout)["keys"]
    assert (keys[1]["label"], keys[1]["owner"]) == ("", "kvreg-admin")
    listing = admin(data, "key", "list", "aime25").stdout
    assert "CI signer" in listing and "bob" in listing
    admin(data, "key", "revoke", "aime25", key.keyid)
    admin(data, "token", "revoke", str(token["id"]))
    report = json.loads(admin(data, "--json", "gc", "--grace-seconds", "0").stdout)
    assert report["objects_removed"] == 0 and report["dry_run"] is False
    # The token text never lands in the database.
    assert token["token"].encode() not in (data / "registry.sqlite3").read_bytes()


@pytest.mark.parametrize(
    "args, code",
    [
        (["namespace", "create", "Bad/Name"], "NAME_INVALID"),
        (["role", "set", "missing", "nobody", "read"], "NAMESPACE_UNKNOWN"),
        (["token", "create", "nobody"], "USER_UNKNOWN"),
        (["key", "add", "missing", "ed25519:AAAA"], "KEY_INVALID"),
    ],
)
def test_errors_are_clear_and_change_nothing(tmp_path: Path, args: list[str], code: str) -> None:
    data = tmp_path / "data"
    proc = admin(data, "--json", *args, expect=2 if code == "NAME_INVALID" else 1)
    assert json.loads(proc.stdout)["error"]["code"] == code
    listed = json.loads(admin(data, "--json", "namespace", "list").stdout)["namespaces"]
    assert listed == []
