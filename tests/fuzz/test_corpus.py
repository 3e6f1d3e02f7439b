"""Replays the fuzz corpus (``tests/fuzz/corpus/<parser>/*``): every input that once
crashed a parser, or was accepted though invalid, must now be refused with the
parser's typed error. See ``corpus/README.md`` for the format of each folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import torch

from kvreg.core.checkpoint import NoteVerifier, parse_checkpoint_body, verify_signed_checkpoint
from kvreg.core.envelope import Envelope
from kvreg.core.errors import (
    ChunkInvalidError,
    ConfigError,
    EnvelopeInvalidError,
    InvalidNameError,
    KvregError,
    ManifestInvalidError,
    MerkleProofError,
    RangeNotSatisfiableError,
    ReceiptInvalidError,
    RemoteError,
    RequestInvalidError,
    SignatureError,
)
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.names import RefName
from kvreg.core.receipt import Receipt
from kvreg.core.safetensors_header import parse_header
from kvreg.core.trust import TrustPolicy
from kvreg.engine.chunks import ChunkLayout, parse_chunk
from kvreg.remote.auditexport import verify_export
from kvreg.remote.errors import map_error
from kvreg.remote.http import RegistryClient
from kvreg.remote.session import Reply
from kvreg_registry.api.routes_objects import parse_range

CORPUS = Path(__file__).parent / "corpus"
VERIFIER = NoteVerifier("log", SigningKey.from_seed(bytes(32)).public_key)
LAYOUT = ChunkLayout(start=0, end=4, num_layers=2, kv_heads=2, head_dim=4, dtype=torch.float32)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _range(data: bytes) -> None:
    size, _, header = _text(data).partition("\n")
    with pytest.raises((RequestInvalidError, RangeNotSatisfiableError)):
        parse_range(header, int(size))


def _note(data: bytes) -> None:
    with pytest.raises(SignatureError):
        verify_signed_checkpoint(_text(data), VERIFIER)


def _reply(data: bytes) -> None:
    assert isinstance(map_error(500, {}, data), KvregError)
    with pytest.raises(RemoteError):
        RegistryClient._json(Reply(200, httpx.Headers(), data, 1), "x")


def _export(data: bytes, tmp: Path) -> None:
    path = tmp / "export.jsonl"
    path.write_bytes(data)
    with pytest.raises((MerkleProofError, SignatureError)):  # LogInconsistentError is a MerkleProofError
        verify_export(path)


def _refused(fn: Callable[[bytes], object], *errors: type[KvregError]) -> Callable[[bytes], None]:
    def check(data: bytes) -> None:
        with pytest.raises(errors):
            fn(data)

    return check


REPLAY: dict[str, Callable[[bytes], None]] = {
    "range": _range,
    "note": _note,
    "checkpoint": _refused(lambda b: parse_checkpoint_body(_text(b)), SignatureError),
    "receipt": _refused(Receipt.from_payload, ReceiptInvalidError),
    "chunk": _refused(lambda b: parse_chunk(bytearray(b), LAYOUT), ChunkInvalidError),
    "safetensors": _refused(lambda b: parse_header(b, total_size=len(b)), ChunkInvalidError),
    "manifest": _refused(Manifest.from_bytes, ManifestInvalidError, MerkleProofError),
    "envelope": _refused(Envelope.from_json_bytes, EnvelopeInvalidError),
    "trust": _refused(TrustPolicy.from_json_bytes, ConfigError),
    "name": _refused(lambda b: RefName.parse(_text(b)), InvalidNameError),
    "reply": _reply,
}
NEEDS_FOLDER: dict[str, Callable[[bytes, Path], None]] = {"export": _export}

FILES = sorted(p for p in CORPUS.glob("*/*") if p.is_file())


def test_corpus_folders_are_known() -> None:
    folders = {p.name for p in CORPUS.iterdir() if p.is_dir()}
    assert folders <= REPLAY.keys() | NEEDS_FOLDER.keys(), folders - REPLAY.keys() - NEEDS_FOLDER.keys()
    assert FILES, "the corpus holds the crashers found so far; it is never empty"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_input_is_refused(path: Path, tmp_path: Path) -> None:
    parser = path.parent.name
    if parser in NEEDS_FOLDER:
        NEEDS_FOLDER[parser](path.read_bytes(), tmp_path)
    else:
        REPLAY[parser](path.read_bytes())
