"""The client's side of the audit log, against an in-memory log served through ``httpx.MockTransport``.

``FakeLog`` answers the five log endpoints as the registry does (RFC 6962 proofs from
``kvreg.core.logtree``, C2SP notes from ``kvreg.core.checkpoint``) and can be made to
lie: sign with another key, shrink, fork, rewrite, edit an entry, send bad proofs,
refuse to sign. The real registry is the integration suite's
(``tests/integration/test_audit_client.py``).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.helpers import Run, kvreg
from kvreg.core import logtree, merkle
from kvreg.core.canonical import canonical_json
from kvreg.core.checkpoint import Checkpoint, NoteVerifier, sign_checkpoint
from kvreg.core.errors import (
    EXIT_INTEGRITY,
    LogInconsistentError,
    SignatureError,
    UnauthenticatedError,
    UsageError,
)
from kvreg.core.keys import SigningKey
from kvreg.core.logverify import envelope_claim, parse_verifier, ref_claim, verify_advance
from kvreg.core.merkle import empty_root, leaf_hash
from kvreg.remote.api.log import LogProof
from kvreg.remote.auditexport import compare_with_export, export_log, verify_export, verify_remote_log
from kvreg.remote.auditlog import RemoteLog, contact
from kvreg.remote.http import RegistryClient
from kvreg.remote.remotes import RemoteConfig
from kvreg.store.audit_state import RemoteLogStore
from kvreg.store.home import Home

URL = "http://registry.test"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class FakeLog:
    """An audit log served over HTTP as the registry serves it, with knobs to make it lie."""

    def __init__(self, origin: str = "registry.test/log") -> None:
        self.key = SigningKey.generate()
        self.origin = origin
        self.entries: list[bytes] = []
        self.served: dict[int, bytes] = {}  # seq -> bytes served instead (an edited row)
        self.sign_key: SigningKey | None = None  # sign with another key
        self.sign_origin: str | None = None
        self.private = False  # /log/entries answers 401
        self.no_log = False  # every /log route answers 404
        self.refuse_to_sign = False
        self.bad_consistency = False
        self.serve_only: int | None = None  # /log/entries serves only the first entries
        self.requests: list[httpx.Request] = []
        self.lock = threading.Lock()

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.origin, self.key.public_key)

    def append(self, type: str = "ns.event", namespace: str | None = "ns", **fields: Any) -> int:
        seq = len(self.entries)
        doc = {"seq": seq, "time": f"2025-01-01T00:00:{seq % 60:02d}.000000Z", "type": type, "actor": "alice"}
        doc.update(
            {"namespace": namespace, "subjects": [], "old": None, "new": None, "details": {}}, **fields
        )
        self.entries.append(canonical_json(doc))
        return seq

    def leaves(self) -> list[bytes]:
        return [leaf_hash(e) for e in self.entries]

    def _node(self, n: int):  # type: ignore[no-untyped-def]
        nodes = logtree.from_leaves(self.leaves()[:n])
        return lambda level, idx: nodes[(level, idx)]

    def root(self, n: int) -> bytes:
        return logtree.root(n, self._node(n)) if n else empty_root()

    def note(self, size: int | None = None) -> str:
        n = len(self.entries) if size is None else size
        name = self.sign_origin or self.origin
        return sign_checkpoint(Checkpoint(name, n, self.root(n)), self.sign_key or self.key, name)

    # --- HTTP ---------------------------------------------------------------------------------

    def handler(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            return self._answer(request)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        path, q = request.url.path, request.url.params
        if path.startswith("/api/v1/log/") and self.no_log:
            return _error(404, "NOT_FOUND", "no route")
        if path == "/api/v1/log/key":
            return httpx.Response(200, json={"origin": self.origin, "verifier_key": self.verifier.to_text()})
        if path == "/api/v1/log/checkpoint":
            if self.refuse_to_sign:
                return _error(422, "INTEGRITY", "the database was altered; refusing to sign")
            return httpx.Response(200, text=self.note())
        if path == "/api/v1/log/entries":
            if self.private:
                return _error(401, "UNAUTHENTICATED", "reading log entries needs a token")
            served = len(self.entries) if self.serve_only is None else self.serve_only
            start, end = int(q["start"]), min(int(q["end"]), served)
            page = [
                {
                    "seq": i,
                    "entry": _b64(self.served.get(i, self.entries[i])),
                    "leaf_hash": _b64(leaf_hash(self.entries[i])),
                }
                for i in range(start, min(end, start + 1000))
            ]
            return httpx.Response(200, json={"entries": page, "size": len(self.entries)})
        if path == "/api/v1/log/proof/inclusion":
            i, n = int(q["index"]), int(q["size"])
            hashes = merkle.inclusion_proof(i, n, logtree.stored_range_hash(self._node(n)))
            body = {"index": i, "size": n, "root": _b64(self.root(n)), "hashes": [_b64(h) for h in hashes]}
            return httpx.Response(200, json={**body, "leaf_hash": _b64(self.leaves()[i])})
        if path == "/api/v1/log/proof/consistency":
            m, n = int(q["first"]), int(q["second"])
            hashes = merkle.consistency_proof(m, n, logtree.stored_range_hash(self._node(n)))
            if self.bad_consistency:
                hashes = [bytes(32) for _ in hashes] or [bytes(32)]
            return httpx.Response(
                200,
                json={"first": m, "size": n, "root": _b64(self.root(n)), "hashes": [_b64(h) for h in hashes]},
            )
        return _error(404, "NOT_FOUND", "no route")

    def client(self) -> RegistryClient:
        return RegistryClient(
            URL,
            "kvreg_" + "t" * 43,
            remote_name="origin",
            retries=0,
            transport=httpx.MockTransport(self.handler),
        )

    def paths(self) -> list[str]:
        return [str(r.url.path) + ("?" + r.url.query.decode() if r.url.query else "") for r in self.requests]


def _error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": code, "message": message}}, headers={"X-Kvreg-Error-Code": code}
    )


@pytest.fixture
def fake() -> FakeLog:
    log = FakeLog()
    for _ in range(5):
        log.append()
    return log


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    RemoteConfig(h).add("origin", URL)
    return h


def _contact(home: Home, fake: FakeLog) -> RemoteLog:
    """One command's contact: check, then save (as a successful command does)."""
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        audit.check()
        audit.save()
    return audit


def _state(home: Home) -> bytes | None:
    path = RemoteLogStore(home).path("origin")
    return path.read_bytes() if path.exists() else None


# --- pinning and checkpoints ----------------------------------------------------------------------


def test_first_contact_pins_the_key_and_later_contacts_prove_consistency(home: Home, fake: FakeLog) -> None:
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        assert audit.check() == Checkpoint(fake.origin, 5, fake.root(5))
        assert _state(home) is None  # nothing stored before the command succeeds
        audit.save()
    doc = json.loads(_state(home) or b"")
    assert doc["verifier_key"] == fake.verifier.to_text() and doc["pinned_by"] == "first-contact"
    assert doc["checkpoint"] == fake.note()
    assert fake.paths() == ["/api/v1/log/key", "/api/v1/log/checkpoint"]

    fake.requests.clear()
    for _ in range(6):
        fake.append()
    audit = _contact(home, fake)
    assert audit.previous is not None and audit.previous.size == 5 and audit.current.size == 11  # type: ignore[union-attr]
    assert fake.paths() == ["/api/v1/log/checkpoint", "/api/v1/log/proof/consistency?first=5&second=11"]
    assert json.loads(_state(home) or b"")["checkpoint"] == fake.note()

    fake.requests.clear()
    _contact(home, fake)  # unchanged: no proof needed
    assert fake.paths() == ["/api/v1/log/checkpoint"]


def test_a_failed_command_stores_nothing(home: Home, fake: FakeLog) -> None:
    with (
        pytest.raises(RuntimeError),
        contact(home, "origin", transport=httpx.MockTransport(fake.handler)) as (_, audit),
    ):
        audit.check()
        raise RuntimeError("the command failed later")
    assert _state(home) is None
    with contact(home, "origin", transport=httpx.MockTransport(fake.handler)) as (_, audit):
        audit.check()
    assert _state(home) is not None


def _refused(home: Home, fake: FakeLog, error: type[Exception], words: str) -> Any:
    before = _state(home)
    with fake.client() as client, pytest.raises(error) as info:
        RemoteLog(home, "origin", client).check()
    assert words in info.value.message, info.value.message  # type: ignore[attr-defined]
    assert "'origin'" in info.value.message  # type: ignore[attr-defined]
    assert info.value.exit_code == EXIT_INTEGRITY  # type: ignore[attr-defined]
    assert _state(home) == before
    return info.value


def test_a_checkpoint_from_another_key_is_refused(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    fake.sign_key = SigningKey.generate()  # same name, another key
    e = _refused(home, fake, SignatureError, "not signed by the pinned log key")
    assert "--replace" in e.hint
    fake.sign_key, fake.sign_origin = SigningKey.generate(), "impostor/log"
    _refused(home, fake, SignatureError, "not signed by the pinned log key")


def test_a_forged_signature_by_the_pinned_name_is_refused(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    note = fake.note()
    body, sig = note.rsplit("\n\n", 1)
    forged = body.replace("\n5\n", "\n4\n") + "\n\n" + sig
    fake.note = lambda size=None: forged  # type: ignore[method-assign]
    _refused(home, fake, SignatureError, "does not verify")


def test_a_shrunk_log_is_refused(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    fake.entries = fake.entries[:3]
    e = _refused(home, fake, LogInconsistentError, "shrank from 5 to 3")
    assert "--replace" in e.hint and str(RemoteLogStore(home).path("origin")) in e.hint


def test_a_fork_of_the_same_size_is_refused(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    fake.entries[2] = canonical_json({"seq": 2, "type": "forged"})
    _refused(home, fake, LogInconsistentError, "forked")


def test_a_rewritten_history_fails_the_consistency_proof(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    fake.entries[1], fake.entries[2] = fake.entries[2], fake.entries[1]
    fake.append()
    _refused(home, fake, LogInconsistentError, "does not extend the log of 5 entries")


def test_a_bad_consistency_proof_is_refused(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    fake.append()
    fake.bad_consistency = True
    _refused(home, fake, LogInconsistentError, "does not extend")


def test_a_registry_that_refuses_to_sign_is_an_integrity_failure(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    fake.refuse_to_sign = True
    e = _refused(home, fake, LogInconsistentError, "refuses to sign")
    assert "altered" in e.message


def test_a_registry_without_a_log(home: Home, fake: FakeLog, caplog: pytest.LogCaptureFixture) -> None:
    fake.no_log = True
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        assert audit.check() is None
        assert audit.prove([envelope_claim(1, "ns", D1)]) == {
            "verified": False,
            "reason": "the registry publishes no audit log",
        }
        audit.save()
    assert _state(home) is None and "publishes no audit log" in caplog.text
    fake.no_log = False
    _contact(home, fake)
    fake.no_log = True  # once pinned, a log that disappears is refused
    _refused(home, fake, LogInconsistentError, "no longer publishes")


def test_an_explicit_pin_and_an_edited_state_file(home: Home, fake: FakeLog) -> None:
    store = RemoteLogStore(home)
    store.pin(
        "origin",
        URL,
        NoteVerifier(fake.origin, SigningKey.generate().public_key).to_text(),
    )
    _refused(home, fake, SignatureError, "not signed by the pinned log key")
    store.pin("origin", URL, fake.verifier.to_text())
    audit = _contact(home, fake)
    assert not audit.summary()["first_contact"] and audit.summary()["pinned_by"] == "remote add --log-key"
    with pytest.raises(UsageError):
        store.pin("origin", URL, "not a key")

    path = store.path("origin")
    doc = json.loads(path.read_text())
    doc["checkpoint"] = doc["checkpoint"].replace("\n5\n", "\n9\n")
    path.write_text(json.dumps(doc))
    with pytest.raises(SignatureError, match="does not verify with the key pinned"):
        store.load("origin")
    assert store.reset("origin") and store.load("origin") is None


def test_verifier_keys_with_plus_signs_parse() -> None:
    for _ in range(64):
        v = NoteVerifier("kvreg-log-abc", SigningKey.generate().public_key)
        assert parse_verifier(v.to_text()) == v
    text = NoteVerifier("n", SigningKey.generate().public_key).to_text()
    for bad in ("", "n+00", text.replace("+", "+0", 1), text[:-4] + "AAAA", "n+zz+AAAA"):
        with pytest.raises(SignatureError):
            parse_verifier(bad)


def test_verify_advance_needs_the_signed_roots() -> None:
    log = FakeLog()
    for _ in range(9):
        log.append()
    old, new = Checkpoint(log.origin, 4, log.root(4)), Checkpoint(log.origin, 9, log.root(9))

    def fetch(m: int, n: int) -> LogProof:
        return LogProof(
            n, log.root(n), merkle.consistency_proof(m, n, logtree.stored_range_hash(log._node(n)))
        )

    verify_advance(old, new, fetch)
    verify_advance(None, new, fetch)
    verify_advance(Checkpoint(log.origin, 0, empty_root()), new, fetch)
    with pytest.raises(LogInconsistentError, match="does not extend"):
        verify_advance(old, Checkpoint(log.origin, 9, bytes(32)), fetch)  # a proof answer's root is ignored
    with pytest.raises(LogInconsistentError, match="answered one to size 8"):
        verify_advance(old, new, lambda m, n: fetch(m, 8))


# --- concurrent commands -------------------------------------------------------------------------------


def test_save_keeps_the_larger_of_two_concurrent_checkpoints_after_proving_them_consistent(
    home: Home, fake: FakeLog
) -> None:
    _contact(home, fake)
    with fake.client() as a_client, fake.client() as b_client:
        a = RemoteLog(home, "origin", a_client)
        a.check()  # size 5
        fake.append()
        fake.append()
        b = RemoteLog(home, "origin", b_client)
        b.check()  # size 7
        b.save()
        fake.requests.clear()
        a.save()  # must not go back to 5; proves 5 -> 7 first
        assert "/api/v1/log/proof/consistency?first=5&second=7" in fake.paths()
    assert json.loads(_state(home) or b"")["checkpoint"] == fake.note(7)

    # A checkpoint stored meanwhile that contradicts this one is refused, not overwritten.
    with fake.client() as client:
        c = RemoteLog(home, "origin", client)
        c.check()
        fake.append()
        c.refresh()  # size 8
        fake.entries[0] = canonical_json({"seq": 0, "type": "forged"})
        fake.append()
        store = RemoteLogStore(home)
        stored = store.load("origin")
        assert stored is not None
        forged = fake.note(9)
        store.write(stored.with_checkpoint(forged, _parse(forged), URL))
        with pytest.raises(LogInconsistentError):
            c.save()


def _parse(note: str) -> Checkpoint:
    from kvreg.core.checkpoint import parse_checkpoint_body

    return parse_checkpoint_body(note.split("\n\n")[0] + "\n")


# --- proving entries -----------------------------------------------------------------------------


def _pushed(fake: FakeLog) -> tuple[int, int]:
    env = fake.append("envelope.stored", subjects=[D1], new={"signer": "k"})
    ref = fake.append("ref.created", subjects=[D1], new=D1, details={"ref": "ns/p"})
    return env, ref


def test_prove_reads_checks_and_proves_each_entry(home: Home, fake: FakeLog) -> None:
    _contact(home, fake)
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        audit.check()  # size 5: the change happens after this checkpoint ...
        env, ref = _pushed(fake)
        fake.append()
        report = audit.prove(
            [envelope_claim(env, "ns", D1), ref_claim(ref, "ns", "p", D1, created=True, old=None)]
        )
        audit.save()
    # ... so a fresh one was taken (consistent with the first) and includes both.
    assert report["checkpoint"]["size"] == 8 and report["previous_size"] == 5
    assert [(e["index"], e["type"], e["entry_checked"]) for e in report["entries"]] == [
        (env, "envelope.stored", True),
        (ref, "ref.created", True),
    ]
    assert json.loads(_state(home) or b"")["checkpoint"] == fake.note(8)


@pytest.mark.parametrize(
    ("claim", "words"),
    [
        (ref_claim(6, "ns", "other", D1), "about ref 'ns/p', not 'ns/other'"),
        (ref_claim(6, "ns", "p", D2), "do not include"),
        (ref_claim(6, "ns", "p", D1, created=False, old=D2), "not ref.moved"),
        (envelope_claim(6, "ns", D1), "not envelope.stored"),
        (envelope_claim(5, "elsewhere", D1), "namespace 'ns'"),
    ],
)
def test_an_entry_that_says_something_else_is_refused(
    home: Home, fake: FakeLog, claim: Any, words: str
) -> None:
    _pushed(fake)
    with fake.client() as client, pytest.raises(LogInconsistentError, match=words):
        RemoteLog(home, "origin", client).prove([claim])


def test_an_edited_entry_fails_its_inclusion_proof(home: Home, fake: FakeLog) -> None:
    _env, ref = _pushed(fake)
    fake.served[ref] = fake.entries[ref].replace(b'"alice"', b'"mallory"')
    with (
        fake.client() as client,
        pytest.raises(LogInconsistentError, match=f"entry {ref} .* not in its signed log"),
    ):
        RemoteLog(home, "origin", client).prove([ref_claim(ref, "ns", "p", D1)])


def test_unreadable_entries_still_prove_their_leaves(home: Home, fake: FakeLog) -> None:
    env, ref = _pushed(fake)
    fake.private = True
    with fake.client() as client:
        report = RemoteLog(home, "origin", client).prove(
            [envelope_claim(env, "ns", D1), ref_claim(ref, "ns", "p", D1), ref_claim(None, "ns", "q", D1)]
        )
    assert [e["entry_checked"] for e in report["entries"]] == [False, False]
    assert len(report["notes"]) == 3 and "names no audit entry for ref ns/q" in report["notes"][0]


def test_an_entry_beyond_the_signed_log_is_refused(home: Home, fake: FakeLog) -> None:
    with fake.client() as client, pytest.raises(LogInconsistentError, match="not in its signed log of 5"):
        RemoteLog(home, "origin", client).prove([envelope_claim(7, "ns", D1)])


# --- whole logs and exports ------------------------------------------------------------------------


@pytest.fixture
def big(fake: FakeLog) -> FakeLog:
    for i in range(2500 - len(fake.entries)):
        fake.append("ref.moved" if i % 3 else "envelope.stored")
    return fake


def test_verify_remote_log_pages_through_every_entry(home: Home, big: FakeLog) -> None:
    with big.client() as client:
        audit = RemoteLog(home, "origin", client)
        result = verify_remote_log(audit)
    assert result.checkpoint.size == 2500 and len(result.entries) == 2500
    assert sum(result.types.values()) == 2500 and result.types["envelope.stored"] == 832
    assert sum(1 for p in big.paths() if p.startswith("/api/v1/log/entries")) == 3


@pytest.mark.parametrize("damage", ["edited", "missing", "reordered", "private"])
def test_verify_remote_log_finds_damage(home: Home, fake: FakeLog, damage: str) -> None:
    if damage == "edited":
        fake.served[3] = fake.entries[3].replace(b"alice", b"mallo")
        error, words = LogInconsistentError, "entry 3 does not hash to the leaf"
    elif damage == "missing":
        fake.serve_only = 4
        error, words = LogInconsistentError, "serves 4 entries but its signed checkpoint commits to 5"
    elif damage == "reordered":
        fake.entries[1], fake.entries[2] = fake.entries[2], fake.entries[1]
        error, words = LogInconsistentError, "says it is entry 2"
    else:
        fake.private = True
        error, words = UnauthenticatedError, "token"
    with fake.client() as client, pytest.raises(error, match=words):
        verify_remote_log(RemoteLog(home, "origin", client))


def _export(home: Home, fake: FakeLog, path: Path) -> list[dict[str, Any]]:
    with fake.client() as client:
        audit = RemoteLog(home, "origin", client)
        result = export_log(audit, path)
        audit.save()
    assert result.extra["file"] == str(path)
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_an_export_verifies_offline_and_every_kind_of_damage_is_found(
    home: Home, big: FakeLog, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    lines = _export(home, big, path)
    header = lines[0]
    assert header["format"] == "kvreg.audit-export/v1" and header["size"] == 2500 == len(lines) - 1
    assert header["checkpoint"] == big.note() and header["verifier_key"] == big.verifier.to_text()
    pinned = RemoteLogStore(home).load("origin")
    check = verify_export(path, keys=[("given", big.verifier)], pinned=pinned)
    assert check.keys_checked == ["file", "given", "pinned for remote origin"]
    assert len(check.leaves) == 2500 and "extends the checkpoint of 2500" in check.notes[0]

    def damaged(change: Any) -> Path:
        copy = [dict(line) for line in lines]
        change(copy)
        return _write(tmp_path / "damaged.jsonl", copy)

    entry = base64.b64decode(lines[8]["entry"])
    edited = _b64(entry.replace(b"alice", b"mallo"))
    cases = [
        (lambda c: c[8].update(entry=edited), "entry 7 is not in the signed log"),
        (lambda c: c[8].update(proof=list(reversed(c[8]["proof"]))), "entry 7 is not in the signed log"),
        (lambda c: c.__setitem__(slice(8, 10), [c[9], c[8]]), "holds entry 8, expected 7"),
        (lambda c: c.pop(), "the export was truncated"),
        (lambda c: c.pop(100), "holds entry 100, expected 99"),
        (lambda c: c.append(c[-1]), "more lines"),
        (lambda c: c[0].update(size=2499), "header says 2499"),
        (lambda c: c[0].update(format="other"), "is not a kvreg.audit-export/v1 file"),
    ]
    for change, words in cases:
        with pytest.raises(LogInconsistentError, match=words):
            verify_export(damaged(change))

    # Re-signed by someone else with their key in the header: consistent alone, refused against a pin.
    other = SigningKey.generate()
    note = sign_checkpoint(Checkpoint(big.origin, 2500, big.root(2500)), other, big.origin)
    key = NoteVerifier(big.origin, other.public_key).to_text()
    resigned = damaged(lambda c: c[0].update(checkpoint=note, verifier_key=key))
    verify_export(resigned)
    with pytest.raises(SignatureError, match="pinned for remote origin"):
        verify_export(resigned, pinned=pinned)
    with pytest.raises(SignatureError, match="given"):
        verify_export(resigned, keys=[("given", big.verifier)])


def test_an_export_against_the_stored_checkpoint_and_the_live_log(
    home: Home, fake: FakeLog, tmp_path: Path
) -> None:
    path = tmp_path / "old.jsonl"
    _export(home, fake, path)
    for _ in range(3):
        fake.append()
    _contact(home, fake)  # this store has now seen 8 entries: more than the export
    check = verify_export(path, pinned=RemoteLogStore(home).load("origin"))
    assert "more than the export's 5" in check.notes[0]
    with fake.client() as client:
        live = verify_remote_log(RemoteLog(home, "origin", client))
    assert "extends the export's 5" in compare_with_export(live, check, where="r")

    # A store that saw a different history of the same length refuses the export.
    other = FakeLog(fake.origin)
    other.key = fake.key
    for _ in range(5):
        other.append("other.event")
    stranger = Home(tmp_path / "stranger")
    RemoteConfig(stranger).add("origin", URL)
    _contact(stranger, other)
    with pytest.raises(LogInconsistentError, match="two different histories"):
        verify_export(path, pinned=RemoteLogStore(stranger).load("origin"))
    with other.client() as client:
        live = verify_remote_log(RemoteLog(stranger, "origin", client))
    with pytest.raises(LogInconsistentError, match="its entry 0 is not the entry 0"):
        compare_with_export(live, check, where="r")


def test_verifying_thousands_of_entries_is_fast(home: Home, big: FakeLog, tmp_path: Path) -> None:
    started = time.perf_counter()
    lines = _export(home, big, tmp_path / "a.jsonl")
    exported = time.perf_counter() - started
    started = time.perf_counter()
    verify_export(tmp_path / "a.jsonl")
    verified = time.perf_counter() - started
    assert len(lines) == 2501
    assert exported < 30 and verified < 30, (exported, verified)  # generous: shared CI cores


# --- the commands ------------------------------------------------------------------------------------


def _kvreg(home: Path, *args: str, expect: int) -> Run:
    return kvreg(home, *args, expect=expect, timeout=120)


def test_audit_verify_file_on_the_command_line(home: Home, fake: FakeLog, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    lines = _export(home, fake, path)
    out = json.loads(
        _kvreg(
            home.root, "audit", "verify", "--file", str(path), "--remote", "origin", "--json", expect=0
        ).out
    )
    assert out["file"]["entries_checked"] == 5 and out["file"]["types"] == {"ns.event": 5}
    _kvreg(home.root, "audit", "verify", "--file", str(path), "--key", fake.verifier.to_text(), expect=0)
    lines[3]["entry"] = _b64(base64.b64decode(lines[3]["entry"]).replace(b"alice", b"mallo"))
    bad = _write(tmp_path / "bad.jsonl", lines)
    run = _kvreg(home.root, "--json", "audit", "verify", "--file", str(bad), expect=3)
    assert json.loads(run.out)["error"]["code"] == "LOG_INCONSISTENT"
    other = NoteVerifier(fake.origin, SigningKey.generate().public_key).to_text()
    _kvreg(home.root, "audit", "verify", "--file", str(path), "--key", other, expect=3)
    _kvreg(home.root, "audit", "verify", expect=2)
    _kvreg(home.root, "audit", "verify", "--key", other, "origin", expect=2)
    _kvreg(home.root, "audit", "verify", "origin", "--file", str(path), "--remote", "origin", expect=2)
    _kvreg(home.root, "audit", "verify", "--file", str(path), "--key", "garbage", expect=2)
    _kvreg(home.root, "audit", "verify", "--file", str(path), "--remote", "nowhere", expect=1)
    _kvreg(home.root, "audit", "verify", "--file", str(tmp_path / "absent.jsonl"), expect=2)


@pytest.mark.parametrize(
    "command", [["audit"], ["audit", "verify"], ["audit", "export"], ["audit", "show"]], ids=" ".join
)
def test_help(tmp_path: Path, command: list[str]) -> None:
    out = _kvreg(tmp_path, *command, "--help", expect=0).out
    assert f"kvreg {' '.join(command)}" in out
