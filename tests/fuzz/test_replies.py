"""Fuzzing the client's reading of what a registry (or an archived export) hands it:
error bodies (``kvreg.remote.errors.map_error``), JSON answers
(``RegistryClient._json``) and audit-log export files
(``kvreg.remote.auditexport.verify_export``).

A hostile or broken registry may send anything; the client must turn it into a typed
error, never a traceback. An export file with any edit in what the signed checkpoint
covers is refused.
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.strategies import fuzz, mutated, typed
from kvreg.core.auditexport_format import entry_line, export_header, header_line
from kvreg.core.canonical import canonical_json
from kvreg.core.checkpoint import Checkpoint, NoteVerifier, sign_checkpoint
from kvreg.core.errors import KvregError, MerkleProofError, RemoteError, SignatureError
from kvreg.core.keys import SigningKey
from kvreg.core.merkle import inclusion_proof, leaf_hash, leaf_range_hash, root_from_leaf_hashes
from kvreg.remote.auditexport import ExportCheck, verify_export
from kvreg.remote.errors import map_error
from kvreg.remote.http import RegistryClient
from kvreg.remote.session import Reply

DEEP = b"[" * 100_000 + b"]" * 100_000

bodies = st.binary(max_size=200) | st.builds(
    lambda doc: json.dumps(doc).encode(),
    st.fixed_dictionaries(
        {},
        optional={
            "error": st.dictionaries(
                st.sampled_from(("code", "message", "hint", "details")),
                st.text(max_size=20) | st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
            )
        },
    ),
)


@fuzz(300)
@given(st.integers(100, 599), bodies, st.sampled_from(("", "NOT_FOUND", "BOGUS", "\u00e9")))
def test_map_error_always_gives_a_typed_error(status: int, body: bytes, code: str) -> None:
    headers = {"X-Kvreg-Error-Code": code} if code else {}
    error = map_error(status, headers, body)
    assert isinstance(error, KvregError) and error.details["http_status"] == status


@fuzz(300)
@given(bodies)
def test_json_answers(body: bytes) -> None:
    doc = typed(RegistryClient._json, Reply(200, httpx.Headers(), body, 1), "x", allowed=RemoteError)
    assert doc is None or isinstance(doc, dict)


def test_deeply_nested_answers_are_typed_errors() -> None:
    assert isinstance(map_error(500, {}, DEEP), KvregError)
    with pytest.raises(RemoteError):
        RegistryClient._json(Reply(200, httpx.Headers(), DEEP, 1), "x")


# --- audit-log export files ----------------------------------------------------------------

KEY = SigningKey.from_seed(bytes(range(32)))
VERIFIER = NoteVerifier("kvreg.example/log", KEY.public_key)
ENTRIES = [canonical_json({"seq": i, "type": "ref.set", "time": "2025-01-31T12:00:00Z"}) for i in range(5)]
LEAVES = [leaf_hash(e) for e in ENTRIES]
CHECKPOINT = Checkpoint(VERIFIER.name, len(ENTRIES), root_from_leaf_hashes(LEAVES))
NOTE = sign_checkpoint(CHECKPOINT, KEY, VERIFIER.name)
EXPORT = header_line(
    export_header(
        remote="r",
        url="http://x",
        checkpoint=CHECKPOINT,
        note=NOTE,
        verifier=VERIFIER,
        types={"ref.set": 5},
        exported_at="2025-01-31T12:00:00Z",
    )
) + b"".join(
    entry_line(i, e, inclusion_proof(i, len(LEAVES), leaf_range_hash(LEAVES)), CHECKPOINT)
    for i, e in enumerate(ENTRIES)
)


def _verify(data: bytes) -> ExportCheck | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "export.jsonl"
        path.write_bytes(data)
        return typed(verify_export, path, allowed=(MerkleProofError, SignatureError))


def test_export_round_trip() -> None:
    check = _verify(EXPORT)
    assert check is not None and check.checkpoint == CHECKPOINT and check.leaves == LEAVES


@fuzz(200)
@given(mutated(EXPORT))
def test_export_mutated(data: bytes) -> None:
    check = _verify(data)
    if check is not None:  # only edits of unsigned header fields (remote, url, types, ...) pass
        assert check.checkpoint == CHECKPOINT and check.leaves == LEAVES


@fuzz(100)
@given(st.integers(0, len(ENTRIES) - 1), st.integers(0, 10**6), st.integers(0, 7))
def test_export_entry_with_one_bit_changed_is_refused(i: int, at: int, bit: int) -> None:
    lines = EXPORT.split(b"\n")
    doc = json.loads(lines[i + 1])
    entry = bytearray(base64.b64decode(doc["entry"]))
    entry[at % len(entry)] ^= 1 << bit
    doc["entry"] = base64.b64encode(bytes(entry)).decode()
    lines[i + 1] = json.dumps(doc).encode()
    assert _verify(b"\n".join(lines)) is None


def test_export_with_a_deeply_nested_line_is_refused() -> None:
    assert _verify(DEEP + b"\n") is None
    first = EXPORT.split(b"\n", 1)[0]
    assert _verify(first + b"\n" + DEEP + b"\n") is None
