"""Signing keys' label, owner and registering audit entry (migration 0006): stored, listed, backfilled.

Runs on SQLite and PostgreSQL (``database_url``): a key registered through the API keeps the
label and owner given (the owner defaults to the caller) and points at its ``key.registered``
entry; keys registered before the migration get owner and entry from the audit log."""

from __future__ import annotations

import base64
import json

from alembic import command
from sqlalchemy import text

from kvreg.core.keys import SigningKey
from kvreg_registry.db.engine import Database, alembic_config, upgrade
from web.library import Library


def test_label_owner_and_entry_are_stored_and_listed(lib: Library) -> None:
    ns = lib.namespace()
    key = SigningKey.generate().public_key
    r = lib.api("POST", f"/namespaces/{ns}/keys", json={"public_key": key.to_text(), "label": "  CI signer "})
    assert r.status_code == 201, r.text
    added = r.json()
    assert (added["label"], added["owner"]) == ("CI signer", "root")
    seq = added["log_index"]
    r = lib.api("GET", "/log/entries", params={"start": seq, "end": seq + 1})
    assert r.status_code == 200, r.text
    body = json.loads(base64.b64decode(r.json()["entries"][0]["entry"]))
    assert body["type"] == "key.registered" and key.keyid in body["subjects"]
    assert body["details"] == {"label": "CI signer", "owner": "root"}
    listed = {k["keyid"]: k for k in lib.api("GET", f"/namespaces/{ns}/keys").json()["keys"]}
    assert listed[key.keyid]["log_index"] == added["log_index"]


def test_the_migration_backfills_owner_and_entry_of_older_keys(lib: Library, database_url: str) -> None:
    ns = lib.namespace()  # its key is registered by root through the API
    keys = lib.api("GET", f"/namespaces/{ns}/keys").json()["keys"]
    assert len(keys) == 1
    before = keys[0]
    db = lib.app_state.db
    db.engine.dispose()
    command.downgrade(alembic_config(database_url), "0005")
    raw = Database(database_url)
    try:
        with raw.read() as s:
            columns = s.execute(text("SELECT * FROM signing_keys")).keys()
            assert "label" not in columns and "owner" not in columns
    finally:
        raw.dispose()
    upgrade(database_url)
    after = lib.api("GET", f"/namespaces/{ns}/keys").json()["keys"]
    assert after == [{**before, "label": ""}]
    assert before["owner"] == "root" and before["log_index"] is not None
