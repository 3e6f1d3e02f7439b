"""The client holds a real registry to its audit log, on SQLite+folder and PostgreSQL+S3.

Push and pull prove their own entries; ``kvreg audit verify`` checks a whole log and
``kvreg audit export`` writes one that verifies offline after the server is gone.
Then the registry misbehaves, as an operator with database access (or someone
answering in its place) could make it: a checkpoint signed by another key, a
truncated log, a reordered log, an entry edited in the database, a reset to an
older state. Each is caught by the next client command and by ``kvreg audit
verify`` (exit 3), and the client stores nothing, not even the new checkpoint.

Tampering tests use a registry of their own (``own_registry``): the shared ones must
keep a sound log for the other tests.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import kvreg
from kvreg.core import logtree
from kvreg.core.merkle import leaf_hash

from .registry_server import BACKENDS, Registry, running_registry
from .test_push_pull import _pusher, _writer


@pytest.fixture(params=BACKENDS)
def own_registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    with running_registry(request.param, tmp_path / "registry") as reg:
        yield reg


# --- helpers ---------------------------------------------------------------------------------------


def _state(home: Path, remote: str = "origin") -> bytes | None:
    path = home / "remotes" / f"{remote}.json"
    return path.read_bytes() if path.exists() else None


def _stored_size(home: Path, remote: str = "origin") -> int:
    doc = json.loads(_state(home, remote) or b"{}")
    return int(doc["checkpoint"].split("\n")[1])


def _point(home: Path, url: str, remote: str = "origin") -> None:
    """Point the remote at another address by editing config.json, as when DNS moves: the pin stays."""
    path = home / "config.json"
    doc = json.loads(path.read_text())
    doc["remotes"][remote]["url"] = url
    path.write_text(json.dumps(doc))


def _engine(reg: Registry) -> Any:
    from sqlalchemy import create_engine

    url = reg.env.get("KVREG_DATABASE_URL") or f"sqlite:///{reg.root / 'data' / 'registry.sqlite3'}"
    return create_engine(url)


def _log_rows(reg: Registry) -> list[tuple[int, bytes, bytes]]:
    from sqlalchemy import text

    engine = _engine(reg)
    try:
        with engine.connect() as c:
            rows = c.execute(text("SELECT seq, entry, leaf_hash FROM audit_entries ORDER BY seq")).all()
    finally:
        engine.dispose()
    return [(int(s), bytes(e), bytes(h)) for s, e, h in rows]


def _rewrite_log(
    reg: Registry,
    change: Callable[[list[tuple[bytes, bytes]]], list[tuple[bytes, bytes]]],
    *,
    forget_checkpoints: bool = True,
) -> None:
    """Rewrite the log behind the server's back: entries and leaves as ``change`` returns them,
    the tree rebuilt consistently over the new leaves, the size set, and (by default) the
    server's signed checkpoints deleted so that it signs the new history."""
    from sqlalchemy import text

    rows = _log_rows(reg)
    new = change([(e, h) for _, e, h in rows])
    nodes = logtree.from_leaves([h for _, h in new])
    engine = _engine(reg)
    try:
        with engine.begin() as c:
            c.execute(text("DELETE FROM audit_entries WHERE seq >= :n"), {"n": len(new)})
            for seq, (entry, leaf) in enumerate(new):
                doc = json.loads(entry)
                c.execute(
                    text(
                        "UPDATE audit_entries SET entry = :e, leaf_hash = :h, type = :t, actor = :a, "
                        "namespace = :ns WHERE seq = :s"
                    ),
                    {
                        "e": entry,
                        "h": leaf,
                        "t": doc["type"],
                        "a": doc["actor"],
                        "ns": doc["namespace"],
                        "s": seq,
                    },
                )
            c.execute(text("DELETE FROM log_nodes"))
            c.execute(
                text("INSERT INTO log_nodes (level, idx, hash) VALUES (:l, :i, :h)"),
                [{"l": lv, "i": ix, "h": h} for (lv, ix), h in nodes.items()],
            )
            c.execute(text("UPDATE log_head SET size = :n WHERE id = 1"), {"n": len(new)})
            if forget_checkpoints:
                c.execute(text("DELETE FROM log_checkpoints"))
    finally:
        engine.dispose()


def _edit_entry(reg: Registry, seq: int, data: bytes) -> None:
    """Change one entry's bytes, leaving its stated leaf hash and the tree as they are."""
    from sqlalchemy import text

    engine = _engine(reg)
    try:
        with engine.begin() as c:
            c.execute(text("UPDATE audit_entries SET entry = :e WHERE seq = :s"), {"e": data, "s": seq})
    finally:
        engine.dispose()


def _refused(home: Path, *args: str, code: str, words: str) -> dict[str, Any]:
    """Run a command that must fail with exit 3 and ``code``, store nothing, and name the remote."""
    before = _state(home)
    run = kvreg(home, "--json", *args, expect=3)
    error = run.json["error"]
    assert error["code"] == code, run
    assert words in error["message"], run
    assert "'origin'" in error["message"] or "origin" in run.err, run
    assert _state(home) == before, "a refused contact must not replace the stored checkpoint"
    return error


def _published(reg: Registry, depositor: dict[str, Any], make_home) -> tuple[str, str, Path, dict[str, Any]]:
    """A namespace with src/p07 pushed as NS/p07 by a writer whose home has pinned the log."""
    ns, token = _writer(reg, depositor)
    home = _pusher(depositor, make_home(reg, token))
    push = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07").json
    return ns, token, home, push


# --- (1) the normal case ---------------------------------------------------------------------------


def test_push_and_pull_prove_their_entries_and_the_whole_log_verifies(
    registry: Registry, depositor: dict[str, Any], make_home, tmp_path: Path
) -> None:
    ns, token, home, push = _published(registry, depositor, make_home)
    audit = push["audit"]
    assert audit["verified"] is True and audit["notes"] == []
    kinds = {e["type"]: e for e in audit["entries"]}
    assert set(kinds) == {"envelope.stored", "ref.created"}
    assert all(e["entry_checked"] and e["included_in"] == audit["checkpoint"]["size"] for e in kinds.values())
    assert _stored_size(home) == audit["checkpoint"]["size"]  # the new checkpoint is stored

    # Up to date: the ref's latest change is proven, nothing else.
    again = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07").json
    assert [e["type"] for e in again["audit"]["entries"]] == ["ref.created"]
    assert again["audit"]["entries"][0]["index"] == kinds["ref.created"]["index"]
    moved = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/p07").json
    assert {e["type"] for e in moved["audit"]["entries"]} == {"envelope.stored", "ref.moved"}
    assert "audit log: #" in kvreg(home, "push", "origin", "src/p07x", "--as", f"{ns}/p07").out

    reader = registry.user({ns: "read"})
    dst = make_home(registry, reader, trust={ns: depositor["public_key"]})
    pull = kvreg(dst, "--json", "pull", "origin", f"{ns}/p07").json
    types = [(e["type"], e["entry_checked"]) for e in pull["audit"]["entries"]]
    assert types == [("ref.moved", True), ("envelope.stored", True)]
    assert pull["audit"]["previous_size"] is not None  # login pinned the key and a checkpoint

    # The whole log, then an export of it that verifies with no network.
    verified = kvreg(home, "--json", "audit", "verify", "origin").json
    assert verified["entries_checked"] == verified["size"] >= moved["audit"]["checkpoint"]["size"]
    assert verified["types"]["ref.created"] >= 1 and verified["types"]["envelope.stored"] >= 2
    assert verified["previous_size"] == _stored_size(home) or verified["size"] == _stored_size(home)
    shown = kvreg(home, "--json", "audit", "show", "origin").json
    assert shown["verifier_key"] == verified["verifier_key"] and shown["pinned_by"] == "first-contact"

    out = tmp_path / "audit.jsonl"
    with registry.another_process() as other:  # a server we can stop
        kvreg(home, "remote", "add", "other", other.url)
        kvreg(home, "login", "other", "--token", token)
        exported = kvreg(home, "--json", "audit", "export", "other", "--out", str(out)).json
    assert other.proc is not None and other.proc.poll() is not None  # it is gone
    lines = out.read_text().splitlines()
    assert len(lines) == exported["size"] + 1
    header = json.loads(lines[0])
    assert header["format"] == "kvreg.audit-export/v1" and header["verifier_key"] == verified["verifier_key"]
    offline = kvreg(home, "--json", "audit", "verify", "--file", str(out), "--remote", "other").json
    assert offline["file"]["entries_checked"] == exported["size"]
    assert offline["file"]["keys_checked"] == ["file", "pinned for remote other"]
    kvreg(home, "audit", "verify", "--file", str(out), "--key", verified["verifier_key"])
    # The live log extends the export.
    both = kvreg(home, "--json", "audit", "verify", "origin", "--file", str(out)).json
    assert "extends the export" in both["extends_file"]


def test_anonymous_pull_of_a_public_namespace_proves_leaves_it_cannot_read(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns, token = _writer(registry, depositor, public=True)
    home = _pusher(depositor, make_home(registry, token))
    kvreg(home, "push", "origin", "src/p07", "--as", f"{ns}/p07")
    anonymous = make_home(registry, None, trust={ns: depositor["public_key"]})
    pull = kvreg(anonymous, "--json", "pull", "origin", f"{ns}/p07").json
    audit = pull["audit"]
    assert audit["verified"] is True
    assert [e["entry_checked"] for e in audit["entries"]] == [False, False]
    assert any("could not be read without a token" in n for n in audit["notes"])
    assert _state(anonymous) is not None  # first contact pinned the key
    run = kvreg(anonymous, "--json", "audit", "verify", "origin", expect=1)
    assert run.json["error"]["code"] == "UNAUTHENTICATED"


def test_pins_are_explicit_decisions(registry: Registry, make_home, tmp_path: Path) -> None:
    home = make_home(registry, None)
    key = kvreg(home, "--json", "audit", "show", "origin").json["verifier_key"]
    kvreg(home, "remote", "add", "pinned", registry.url, "--log-key", key)
    assert kvreg(home, "--json", "audit", "show", "pinned").json["pinned_by"] == "remote add --log-key"

    from kvreg.core.checkpoint import NoteVerifier
    from kvreg.core.keys import SigningKey

    wrong = NoteVerifier(key.split("+")[0], SigningKey.generate().public_key).to_text()
    kvreg(home, "remote", "add", "wrong", registry.url, "--log-key", wrong)
    run = kvreg(home, "--json", "ls-remote", "wrong", expect=3)
    assert run.json["error"]["code"] == "SIGNATURE_INVALID"
    assert "--replace" in run.err
    # Changing a pin needs --replace; a malformed key is a usage error.
    run = kvreg(home, "--json", "remote", "add", "wrong", registry.url, "--log-key", key, expect=1)
    assert run.json["error"]["code"] == "ALREADY_EXISTS"
    kvreg(home, "remote", "add", "wrong", registry.url, "--log-key", "nonsense", expect=2)
    kvreg(home, "remote", "add", "wrong", registry.url, "--replace", "--log-key", key)
    kvreg(home, "ls-remote", "wrong")
    kvreg(home, "remote", "remove", "wrong")
    assert _state(home, "wrong") is None


# --- (2) a checkpoint signed by another key -----------------------------------------------------------


def test_a_checkpoint_signed_by_another_key_is_refused(
    own_registry: Registry, depositor: dict[str, Any], make_home, tmp_path: Path
) -> None:
    reg = own_registry
    ns, token, home, _ = _published(reg, depositor, make_home)
    before_export = tmp_path / "before.jsonl"
    kvreg(home, "audit", "export", "origin", "--out", str(before_export))
    origin = json.loads(before_export.read_text().splitlines()[0])["origin"]

    # Another process on the same data, with another key under the same log name: an impostor.
    with reg.another_process(
        KVREG_LOG_KEY_FILE=str(tmp_path / "other.key"), KVREG_LOG_ORIGIN=origin
    ) as other:
        other.namespace()  # a change, so that it signs a new checkpoint with its own key
        _point(home, other.url)
        error = _refused(home, "ls-remote", "origin", ns, code="SIGNATURE_INVALID", words="pinned log key")
        assert error["hint"] and "--replace" in error["hint"]
        _refused(home, "pull", "origin", f"{ns}/p07", code="SIGNATURE_INVALID", words="pinned log key")
        _refused(home, "audit", "verify", "origin", code="SIGNATURE_INVALID", words="pinned log key")

        # An export made through it verifies with its own key, but not with the pinned one.
        fresh = make_home(other, token)
        impostor = tmp_path / "impostor.jsonl"
        kvreg(fresh, "audit", "export", "origin", "--out", str(impostor))
        kvreg(fresh, "audit", "verify", "--file", str(impostor))
        run = kvreg(
            home, "--json", "audit", "verify", "--file", str(impostor), "--remote", "origin", expect=3
        )
        assert run.json["error"]["code"] == "SIGNATURE_INVALID"
        new_key = json.loads(impostor.read_text().splitlines()[0])["verifier_key"]
        run = kvreg(
            home, "--json", "audit", "verify", "--file", str(before_export), "--key", new_key, expect=3
        )
        assert run.json["error"]["code"] == "SIGNATURE_INVALID"

        # A person who checked the new key may re-pin deliberately.
        kvreg(home, "remote", "add", "origin", other.url, "--replace", "--log-key", new_key)
        kvreg(home, "ls-remote", "origin", ns)


# --- (3) a truncated log -----------------------------------------------------------------------------


def test_a_truncated_log_is_refused(
    own_registry: Registry, depositor: dict[str, Any], make_home, tmp_path: Path
) -> None:
    reg = own_registry
    ns, _token, home, _ = _published(reg, depositor, make_home)
    export = tmp_path / "before.jsonl"
    kvreg(home, "audit", "export", "origin", "--out", str(export))
    seen = _stored_size(home)

    _rewrite_log(reg, lambda rows: rows[:-2])
    _refused(home, "ls-remote", "origin", ns, code="LOG_INCONSISTENT", words="shrank")
    _refused(home, "pull", "origin", f"{ns}/p07", code="LOG_INCONSISTENT", words="shrank")
    _refused(home, "audit", "verify", "origin", code="LOG_INCONSISTENT", words="shrank")
    assert _stored_size(home) == seen

    # A client that never saw the longer log has nothing to compare with, but an archived export has.
    stranger = make_home(reg, reg.admin_token)
    kvreg(stranger, "audit", "verify", "origin")
    run = kvreg(stranger, "--json", "audit", "verify", "origin", "--file", str(export), expect=3)
    assert run.json["error"]["code"] == "LOG_INCONSISTENT" and "fewer than" in run.json["error"]["message"]
    kvreg(stranger, "audit", "verify", "--file", str(export))  # the archive itself is intact


# --- (4) a reordered log -------------------------------------------------------------------------------


def _swap(rows: list[tuple[bytes, bytes]], i: int, j: int) -> list[tuple[bytes, bytes]]:
    out = list(rows)
    out[i], out[j] = out[j], out[i]
    return out


def test_a_reordered_log_is_refused(
    own_registry: Registry, depositor: dict[str, Any], make_home, tmp_path: Path
) -> None:
    reg = own_registry
    ns, _token, home, push = _published(reg, depositor, make_home)
    export = tmp_path / "before.jsonl"
    kvreg(home, "audit", "export", "origin", "--out", str(export))
    envelope_at = next(e["index"] for e in push["audit"]["entries"] if e["type"] == "envelope.stored")

    # The server itself refuses to sign a tree that contradicts the checkpoints it signed.
    _rewrite_log(reg, lambda rows: _swap(rows, 1, envelope_at), forget_checkpoints=False)
    error = _refused(home, "ls-remote", "origin", ns, code="LOG_INCONSISTENT", words="refuses to sign")
    assert "altered" in error["message"]

    # With its signed checkpoints deleted too, it signs the rewritten history; the client's
    # consistency proof from the checkpoint it stored fails.
    _rewrite_log(reg, lambda rows: rows)
    reg.namespace()  # the log grows: a consistency proof, not just a same-size fork
    _refused(home, "ls-remote", "origin", ns, code="LOG_INCONSISTENT", words="does not extend")
    _refused(home, "audit", "verify", "origin", code="LOG_INCONSISTENT", words="does not extend")

    # The archive from before still verifies (it is a record of the history as it was), and
    # checking the live log against it names the rewrite, even from a store that saw nothing.
    stranger = make_home(reg, reg.admin_token)
    kvreg(stranger, "audit", "verify", "--file", str(export))
    run = kvreg(stranger, "--json", "audit", "verify", "origin", "--file", str(export), expect=3)
    assert run.json["error"]["code"] == "LOG_INCONSISTENT"
    assert "reordered" in run.json["error"]["message"] or "rewrote" in run.json["error"]["message"]


# --- (5) an entry edited in the database -------------------------------------------------------------


def test_an_entry_edited_in_the_database_is_caught(
    own_registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    reg = own_registry
    ns, token, home, push = _published(reg, depositor, make_home)
    ref_at = next(e["index"] for e in push["audit"]["entries"] if e["type"] == "ref.created")
    seq, entry, leaf = _log_rows(reg)[ref_at]
    doc = json.loads(entry)
    forged = entry.replace(json.dumps(doc["actor"]).encode(), b'"mallory"')
    assert forged != entry and leaf_hash(forged) != leaf
    _edit_entry(reg, seq, forged)

    # Checkpoints are unchanged (the tree was not touched): contacts pass ...
    kvreg(home, "ls-remote", "origin", ns)
    # ... but the entry no longer hashes to its leaf: audit verify names it,
    error = _refused(home, "audit", "verify", "origin", code="LOG_INCONSISTENT", words=f"entry {seq} ")
    assert "edited" in error["message"]
    # and a pull that proves the ref's entry refuses before storing anything.
    dst = make_home(reg, token, trust={ns: depositor["public_key"]})
    error = _refused(dst, "pull", "origin", f"{ns}/p07", code="LOG_INCONSISTENT", words=f"entry {seq}")
    assert not any((dst / "objects").rglob("*")) and not (dst / "refs" / ns).exists()


# --- (6) a registry reset to an older state ---------------------------------------------------------


@pytest.mark.parametrize("own_registry", ["sqlite-folder"], indirect=True)
def test_a_registry_reset_to_an_older_state_is_refused(
    own_registry: Registry, depositor: dict[str, Any], make_home, tmp_path: Path
) -> None:
    """A restore from an old backup. SQLite+folder only: its whole state is one folder to copy
    back; with PostgreSQL+S3 the same is a database dump and a bucket copy, and what the client
    sees of it, a shorter log, is the truncation test above, run on both backends."""
    reg = own_registry
    ns, _token, home, _ = _published(reg, depositor, make_home)
    backup = tmp_path / "backup"
    reg.stop()
    shutil.copytree(reg.root / "data", backup)
    reg.start()
    _point(home, reg.url)
    kvreg(home, "push", "origin", "src/p07x", "--as", f"{ns}/p07x")
    seen = _stored_size(home)

    reg.stop()
    shutil.rmtree(reg.root / "data")
    shutil.copytree(backup, reg.root / "data")
    reg.start()
    _point(home, reg.url)
    _refused(home, "pull", "origin", f"{ns}/p07", code="LOG_INCONSISTENT", words="shrank")
    _refused(home, "audit", "verify", "origin", code="LOG_INCONSISTENT", words="shrank")

    # The restored registry goes on: its history forks from the one this client saw.
    writer = reg.user({ns: "write"})
    other = _pusher(depositor, make_home(reg, writer))
    for name in ("p07x", "other"):
        kvreg(other, "push", "origin", f"src/{name}", "--as", f"{ns}/{name}-again")
    assert _stored_size(other) > seen
    _refused(home, "ls-remote", "origin", ns, code="LOG_INCONSISTENT", words="does not extend")
