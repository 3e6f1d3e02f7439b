"""``kvreg-admin`` against a real database: the first admin, namespaces, roles, keys, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# --- offboarding: users disabled and enabled, tokens listed and revoked -------------------------


def admin_here(capsys: pytest.CaptureFixture[str], data: Path, *args: str, expect: int = 0) -> Any:
    """``kvreg-admin --data DATA --json ARGS`` in this process: its JSON answer."""
    import typer

    from kvreg import console
    from kvreg_registry.admin import app

    capsys.readouterr()
    code = console.run(
        typer.main.get_command(app), ["--data", str(data), "--json", *args], prog_name="kvreg-admin"
    )
    out = capsys.readouterr()
    assert code == expect, out.out + out.err
    return json.loads(out.out) if out.out.strip() else None


def test_offboarding_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"

    def run(*args: str, expect: int = 0) -> Any:
        return admin_here(capsys, data, *args, expect=expect)

    run("user", "create", "root", "--admin")
    run("user", "create", "bob")
    laptop = run("token", "create", "bob", "--label", "laptop")
    ci = run("token", "create", "bob", "--label", "ci", "--expires-in-days", "30")
    run("token", "create", "root")

    # Disabling: every token refused, audited once; a second time changes nothing.
    done = run("user", "disable", "bob")
    assert {k: done[k] for k in ("user", "disabled", "changed", "active_tokens")} == {
        "user": "bob", "disabled": True, "changed": True, "active_tokens": 2,
    }  # fmt: skip
    again = run("user", "disable", "bob")
    assert (again["changed"], again["disabled_at"]) == (False, done["disabled_at"])
    users = {u["user"]: u for u in run("user", "list")["users"]}
    assert users["bob"]["disabled_at"] == done["disabled_at"] and users["root"]["disabled_at"] is None

    # Listing: id, user, label, dates, state; never the token or its hash.
    tokens = run("token", "list", "--user", "bob")["tokens"]
    assert [(t["id"], t["label"], t["state"]) for t in tokens] == [
        (laptop["id"], "laptop", "user disabled"), (ci["id"], "ci", "user disabled"),
    ]  # fmt: skip
    assert set(tokens[0]) == {
        "id", "user", "label", "created_at", "last_used_at", "expires_at", "revoked_at", "state",
    }  # fmt: skip
    assert tokens[1]["expires_at"] is not None and tokens[0]["expires_at"] is None
    assert {t["user"] for t in run("token", "list")["tokens"]} == {"bob", "root"}
    hashes = json.dumps(run("token", "list", "--all"))
    assert laptop["token"] not in hashes and hashes.count('"id"') == 3

    # Revoking by the id the list shows; a second revoke says it changed nothing.
    assert run("token", "revoke", str(laptop["id"]))["changed"] is True
    assert run("token", "revoke", str(laptop["id"]))["changed"] is False
    assert [t["id"] for t in run("token", "list", "--user", "bob")["tokens"]] == [ci["id"]]
    every = run("token", "list", "--user", "bob", "--all")["tokens"]
    assert [(t["id"], t["state"]) for t in every] == [(laptop["id"], "revoked"), (ci["id"], "user disabled")]
    assert every[0]["revoked_at"] is not None

    # Clear refusals: no such user, the last server admin, a token id that does not exist.
    assert run("user", "disable", "nobody", expect=1)["error"]["code"] == "USER_UNKNOWN"
    assert run("user", "enable", "nobody", expect=1)["error"]["code"] == "USER_UNKNOWN"
    assert run("token", "list", "--user", "nobody", expect=1)["error"]["code"] == "USER_UNKNOWN"
    refused = run("user", "disable", "root", expect=1)["error"]
    assert refused["code"] == "FORBIDDEN" and "last server admin" in refused["message"]
    assert run("token", "revoke", "999", expect=1)["error"]["code"] == "TOKEN_UNKNOWN"

    # Enabling: the tokens neither revoked nor expired come back; a second time changes nothing.
    enabled = run("user", "enable", "bob")
    assert (enabled["changed"], enabled["disabled"], enabled["active_tokens"]) == (True, False, 1)
    assert run("user", "enable", "bob")["changed"] is False
    assert run("token", "list", "--user", "bob")["tokens"][0]["state"] == "active"

    # Each change is in the audit log once, with the actor kvreg-admin.
    import sqlite3

    with sqlite3.connect(data / "registry.sqlite3") as db:
        rows = [json.loads(e) for (e,) in db.execute("select entry from audit_entries order by seq")]
    kinds = [(e["type"], e["actor"], e.get("new")) for e in rows if e["type"].startswith("user.")]
    assert kinds[2:] == [
        ("user.disabled", "kvreg-admin", {"user": "bob"}), ("user.enabled", "kvreg-admin", {"user": "bob"}),
    ]  # fmt: skip
    assert [e["old"] for e in rows if e["type"] == "token.revoked"] == [{"token_id": laptop["id"]}]


def test_token_expiry_is_at_most_ten_years(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    admin_here(capsys, data, "user", "create", "bob")
    admin_here(capsys, data, "token", "create", "bob", "--expires-in-days", "3651", expect=2)
    admin_here(capsys, data, "token", "create", "bob", "--expires-in-days", "10000000", expect=2)
    made = admin_here(capsys, data, "token", "create", "bob", "--expires-in-days", "3650")
    assert made["expires_at"] is not None
    assert [t["id"] for t in admin_here(capsys, data, "token", "list")["tokens"]] == [made["id"]]
