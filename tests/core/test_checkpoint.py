"""Signed notes and checkpoints: the Go reference's golden example, round trips, forgeries."""

from __future__ import annotations

import base64

import pytest

from kvreg.core.checkpoint import (
    Checkpoint,
    NoteVerifier,
    open_note,
    parse_checkpoint_body,
    sign_checkpoint,
    sign_note,
    verify_signed_checkpoint,
)
from kvreg.core.errors import SignatureError
from kvreg.core.keys import SigningKey

# The example of golang.org/x/mod/sumdb/note (and c2sp.org/signed-note implementations).
GOLDEN_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GOLDEN_TEXT = (
    "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
)
GOLDEN_NOTE = (
    GOLDEN_TEXT
    + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqd"
    + "ngotpRZb6KE6RyyBwJnAM=\n"
)


def _golden_key() -> SigningKey:
    raw = base64.b64decode(GOLDEN_SKEY.split("+", 4)[4])
    assert raw[0] == 1
    return SigningKey.from_seed(raw[1:])


def test_matches_the_reference_implementation() -> None:
    key = _golden_key()
    assert sign_note(GOLDEN_TEXT, key, "PeterNeumann") == GOLDEN_NOTE
    verifier = NoteVerifier("PeterNeumann", key.public_key)
    assert verifier.key_id.hex() == "c74f20a3"
    assert open_note(GOLDEN_NOTE, verifier) == GOLDEN_TEXT
    assert NoteVerifier.from_text(verifier.to_text()) == verifier


def test_checkpoint_round_trip_and_refusals() -> None:
    key = SigningKey.generate()
    verifier = NoteVerifier("kvreg.example/log", key.public_key)
    cp = Checkpoint("kvreg.example/log", 12345, bytes(range(32)))
    note = sign_checkpoint(cp, key, "kvreg.example/log")
    assert note.startswith("kvreg.example/log\n12345\n")
    assert verify_signed_checkpoint(note, verifier) == cp
    # Another key, an edited size, a note without our signature, garbage.
    other = NoteVerifier("kvreg.example/log", SigningKey.generate().public_key)
    for bad, v in (
        (note, other),
        (note.replace("12345", "12346"), verifier),
        (sign_checkpoint(cp, key, "someone-else"), verifier),
        ("no blank line", verifier),
        (note.replace("\u2014", "--"), verifier),
    ):
        with pytest.raises(SignatureError):
            verify_signed_checkpoint(bad, v)
    # A witness's extra signature line is ignored.
    witness = SigningKey.generate()
    extra = sign_note(cp.body(), witness, "witness").split("\n\n", 1)[1]
    assert verify_signed_checkpoint(note + extra, verifier) == cp


@pytest.mark.parametrize(
    "body",
    [
        "o\n01\nAAAA\n",
        "o\n-1\n" + base64.b64encode(bytes(32)).decode() + "\n",
        "o\n1\nnot base64!\n",
        "o\n1\n",
    ],
)
def test_malformed_bodies(body: str) -> None:
    with pytest.raises(SignatureError):
        parse_checkpoint_body(body)


def test_verifier_key_text_round_trips_for_any_key() -> None:
    """Base64 keys often contain '+', the separator of the verifier text."""
    for _ in range(200):
        v = NoteVerifier("kvreg-log", SigningKey.generate().public_key)
        assert NoteVerifier.from_text(v.to_text()) == v
