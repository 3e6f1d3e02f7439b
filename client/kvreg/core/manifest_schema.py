"""The ``kvreg.manifest/v1`` schema (docs/design.md, "Objects"): its typed sections and their strict check.

:func:`validate` checks a parsed document: every required field present with its
exact JSON type (``true`` is not an integer), digests well formed, the chunk list on
the absolute grid of the block size and covering exactly the token count, layer
types one per layer, and the Merkle root equal to the RFC 6962 root over the chunk
digests. A violation raises ``ManifestInvalidError`` naming the field path
(``chunks[3].end``); a wrong Merkle root raises ``MerkleProofError``. It returns the
typed views (:class:`ModelInfo`, :class:`ChunkEntry`, ...) that
``kvreg.core.manifest.Manifest`` hands out.

This module does not parse bytes, keep raw bytes or compute digests of documents
(``kvreg.core.manifest`` does), and reads or writes no file.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from kvreg.core.digest import Digest, is_digest
from kvreg.core.errors import ManifestInvalidError, MerkleProofError
from kvreg.core.merkle import chunk_merkle_root

__all__ = [
    "DTYPES",
    "DTYPE_BYTES",
    "GRIDS",
    "MAX_MANIFEST_BYTES",
    "PROFILES",
    "SCHEMA",
    "VERDICTS",
    "ChatInfo",
    "ChunkEntry",
    "ConfigInfo",
    "ManifestViews",
    "ModelInfo",
    "PromptInfo",
    "Schedule",
    "TextInfo",
    "TokenizerInfo",
    "TokensInfo",
    "Verification",
    "Witness",
    "validate",
]

SCHEMA = "kvreg.manifest/v1"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
DTYPES = ("float32", "bfloat16", "float16")
#: Bytes per element of the dtypes a manifest names (its KV and its witness logits).
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
PROFILES = ("native", "portable")
VERDICTS = ("pass", "fail", "unknown")
GRIDS = ("absolute",)
_CREATED_RE = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,9})?Z", re.ASCII)


# --- typed views ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelInfo:
    fingerprint: Digest
    name: str
    architecture: str
    model_type: str
    num_layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    layer_types: tuple[str, ...]
    sliding_window: int | None


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    fingerprint: Digest
    name: str


@dataclass(frozen=True, slots=True)
class ConfigInfo:
    fingerprint: Digest
    profile: str
    fields: dict[str, Any] = field(hash=False)


@dataclass(frozen=True, slots=True)
class Schedule:
    block_size: int
    grid: str


@dataclass(frozen=True, slots=True)
class TokensInfo:
    count: int
    digest: Digest


@dataclass(frozen=True, slots=True)
class TextInfo:
    digest: Digest
    size: int


@dataclass(frozen=True, slots=True)
class ChatInfo:
    """How a chat prompt was rendered: the template's digest, the messages object, the generation prompt."""

    template: Digest
    messages: Digest
    generation_prompt: bool


@dataclass(frozen=True, slots=True)
class PromptInfo:
    digest: Digest
    size: int
    token_count: int
    chat: ChatInfo | None = None  # set when the prompt was rendered with a chat template


@dataclass(frozen=True, slots=True)
class ChunkEntry:
    index: int
    start: int
    end: int
    digest: Digest
    size: int
    block_key: Digest

    @property
    def n_tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Witness:
    logits_digest: Digest
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Verification:
    verifier: str
    verdict: str
    evidence: dict[str, Any] = field(hash=False)


# --- field readers ----------------------------------------------------------------


def _fail(path: str, message: str) -> NoReturn:
    raise ManifestInvalidError(f"manifest field {path}: {message}", field=path)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a non-integer number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _get(d: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in d:
        _fail(path, "is required")
    return d[key]


def _obj(d: Mapping[str, Any], key: str, path: str) -> dict[str, Any]:
    v = _get(d, key, path)
    if not isinstance(v, dict):
        _fail(path, f"must be an object, not {_json_type(v)}")
    return v


def _str(d: Mapping[str, Any], key: str, path: str) -> str:
    v = _get(d, key, path)
    if not isinstance(v, str):
        _fail(path, f"must be a string, not {_json_type(v)}")
    return v


def _check_int(v: Any, path: str, minimum: int) -> int:
    if type(v) is not int:  # excludes bool, float
        _fail(path, f"must be an integer, not {_json_type(v)}")
    if v < minimum:
        _fail(path, f"must be at least {minimum}, got {v}")
    return v


def _int(d: Mapping[str, Any], key: str, path: str, *, minimum: int) -> int:
    return _check_int(_get(d, key, path), path, minimum)


def _bool(d: Mapping[str, Any], key: str, path: str) -> bool:
    v = _get(d, key, path)
    if not isinstance(v, bool):
        _fail(path, f"must be a boolean, not {_json_type(v)}")
    return v


def _digest(d: Mapping[str, Any], key: str, path: str) -> Digest:
    v = _get(d, key, path)
    if not is_digest(v):
        _fail(path, f"must be a digest 'sha256:<64 lowercase hex>', got {v!r:.80}")
    return Digest(v)


def _enum(d: Mapping[str, Any], key: str, path: str, allowed: tuple[str, ...]) -> str:
    v = _str(d, key, path)
    if v not in allowed:
        _fail(path, f"must be one of {', '.join(allowed)}; got {v!r:.80}")
    return v


# --- validation ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManifestViews:
    """The typed sections of a valid manifest, as :func:`validate` reads them."""

    model: ModelInfo
    tokenizer: TokenizerInfo
    config: ConfigInfo
    schedule: Schedule
    tokens: TokensInfo
    text: TextInfo
    prompt: PromptInfo | None
    chunks: tuple[ChunkEntry, ...]
    merkle_root: Digest
    witness: Witness
    verification: Verification | None
    created: str | None
    kvreg_version: str


def _read_model(doc: dict[str, Any]) -> ModelInfo:
    m = _obj(doc, "model", "model")
    num_layers = _int(m, "num_layers", "model.num_layers", minimum=1)
    layer_types_raw = _get(m, "layer_types", "model.layer_types")
    if not isinstance(layer_types_raw, list):
        _fail("model.layer_types", f"must be an array, not {_json_type(layer_types_raw)}")
    for i, t in enumerate(layer_types_raw):
        if not isinstance(t, str):
            _fail(f"model.layer_types[{i}]", f"must be a string, not {_json_type(t)}")
    if len(layer_types_raw) != num_layers:
        _fail(
            "model.layer_types", f"has {len(layer_types_raw)} entries, but model.num_layers is {num_layers}"
        )
    sw = _get(m, "sliding_window", "model.sliding_window")
    sliding_window = None if sw is None else _check_int(sw, "model.sliding_window", 1)
    return ModelInfo(
        fingerprint=_digest(m, "fingerprint", "model.fingerprint"),
        name=_str(m, "name", "model.name"),
        architecture=_str(m, "architecture", "model.architecture"),
        model_type=_str(m, "model_type", "model.model_type"),
        num_layers=num_layers,
        kv_heads=_int(m, "kv_heads", "model.kv_heads", minimum=1),
        head_dim=_int(m, "head_dim", "model.head_dim", minimum=1),
        dtype=_enum(m, "dtype", "model.dtype", DTYPES),
        layer_types=tuple(layer_types_raw),
        sliding_window=sliding_window,
    )


def _read_chunks(doc: dict[str, Any], block_size: int, count: int) -> tuple[ChunkEntry, ...]:
    raw = _get(doc, "chunks", "chunks")
    if not isinstance(raw, list):
        _fail("chunks", f"must be an array, not {_json_type(raw)}")
    if not raw:
        _fail("chunks", "must not be empty")
    expected = -(-count // block_size)
    if len(raw) != expected:
        _fail(
            "chunks",
            f"has {len(raw)} entries, but {count} tokens in blocks of {block_size} make {expected}",
        )
    out: list[ChunkEntry] = []
    for i, c in enumerate(raw):
        p = f"chunks[{i}]"
        if not isinstance(c, dict):
            _fail(p, f"must be an object, not {_json_type(c)}")
        index = _int(c, "index", f"{p}.index", minimum=0)
        if index != i:
            _fail(f"{p}.index", f"must be {i} (its position), got {index}")
        start = _int(c, "start", f"{p}.start", minimum=0)
        if start != i * block_size:
            _fail(f"{p}.start", f"must be {i * block_size} on the absolute grid of {block_size}, got {start}")
        end = _int(c, "end", f"{p}.end", minimum=0)
        want_end = min((i + 1) * block_size, count)
        if end != want_end:
            _fail(f"{p}.end", f"must be {want_end}, got {end}")
        out.append(
            ChunkEntry(
                index=index,
                start=start,
                end=end,
                digest=_digest(c, "digest", f"{p}.digest"),
                size=_int(c, "size", f"{p}.size", minimum=1),
                block_key=_digest(c, "block_key", f"{p}.block_key"),
            )
        )
    # With the count above, the last end is min(expected * B, count) == count.
    return tuple(out)


def _read_verification(doc: dict[str, Any]) -> Verification | None:
    v = _get(doc, "verification", "verification")
    if v is None:
        return None
    if not isinstance(v, dict):
        _fail("verification", f"must be an object or null, not {_json_type(v)}")
    evidence = _obj(v, "evidence", "verification.evidence")
    return Verification(
        verifier=_str(v, "verifier", "verification.verifier"),
        verdict=_enum(v, "verdict", "verification.verdict", VERDICTS),
        evidence=copy.deepcopy(evidence),
    )


def _read_annotations(doc: dict[str, Any]) -> None:
    a = _obj(doc, "annotations", "annotations")
    for key in ("title", "question", "answer"):
        if key in a and not isinstance(a[key], str):
            _fail(f"annotations.{key}", f"must be a string, not {_json_type(a[key])}")
    if "tags" in a:
        tags = a["tags"]
        if not isinstance(tags, list):
            _fail("annotations.tags", f"must be an array, not {_json_type(tags)}")
        for i, t in enumerate(tags):
            if not isinstance(t, str):
                _fail(f"annotations.tags[{i}]", f"must be a string, not {_json_type(t)}")


def _read_created(doc: dict[str, Any]) -> str | None:
    if "created" not in doc:
        return None
    v = _str(doc, "created", "created")
    m = _CREATED_RE.fullmatch(v)
    if m is None:
        _fail("created", f"must be an RFC 3339 UTC time like 2025-01-31T12:00:00Z, got {v!r:.80}")
    try:
        datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        _fail("created", f"is not a valid date and time: {v!r}")
    return v


def validate(doc: dict[str, Any]) -> ManifestViews:
    """Check a parsed ``kvreg.manifest/v1`` document strictly and read its typed sections.

    Raises ``ManifestInvalidError`` naming the field path, or ``MerkleProofError`` for a
    ``merkle_root`` that is not the root over the chunk digests."""
    schema = _get(doc, "schema", "schema")
    if schema != SCHEMA:
        _fail("schema", f"must be {SCHEMA!r}, got {schema!r:.80}")

    model = _read_model(doc)

    t = _obj(doc, "tokenizer", "tokenizer")
    tokenizer = TokenizerInfo(
        fingerprint=_digest(t, "fingerprint", "tokenizer.fingerprint"), name=_str(t, "name", "tokenizer.name")
    )

    c = _obj(doc, "config", "config")
    config = ConfigInfo(
        fingerprint=_digest(c, "fingerprint", "config.fingerprint"),
        profile=_enum(c, "profile", "config.profile", PROFILES),
        fields=copy.deepcopy(_obj(c, "fields", "config.fields")),
    )

    s = _obj(doc, "schedule", "schedule")
    schedule = Schedule(
        block_size=_int(s, "block_size", "schedule.block_size", minimum=1),
        grid=_enum(s, "grid", "schedule.grid", GRIDS),
    )

    tk = _obj(doc, "tokens", "tokens")
    tokens = TokensInfo(
        count=_int(tk, "count", "tokens.count", minimum=1), digest=_digest(tk, "digest", "tokens.digest")
    )

    tx = _obj(doc, "text", "text")
    text = TextInfo(
        digest=_digest(tx, "digest", "text.digest"), size=_int(tx, "size", "text.size", minimum=0)
    )

    prompt: PromptInfo | None = None
    if "prompt" in doc:
        pr = _obj(doc, "prompt", "prompt")
        chat: ChatInfo | None = None
        if "chat" in pr:
            ch = _obj(pr, "chat", "prompt.chat")
            chat = ChatInfo(
                template=_digest(ch, "template", "prompt.chat.template"),
                messages=_digest(ch, "messages", "prompt.chat.messages"),
                generation_prompt=_bool(ch, "generation_prompt", "prompt.chat.generation_prompt"),
            )
        prompt = PromptInfo(
            digest=_digest(pr, "digest", "prompt.digest"),
            size=_int(pr, "size", "prompt.size", minimum=0),
            token_count=_int(pr, "token_count", "prompt.token_count", minimum=1),
            chat=chat,
        )
        if prompt.token_count > tokens.count:
            _fail(
                "prompt.token_count",
                f"is {prompt.token_count}, more than tokens.count ({tokens.count})",
            )

    chunks = _read_chunks(doc, schedule.block_size, tokens.count)

    merkle_root = _digest(doc, "merkle_root", "merkle_root")

    w = _obj(doc, "witness", "witness")
    shape_raw = _get(w, "shape", "witness.shape")
    if not isinstance(shape_raw, list):
        _fail("witness.shape", f"must be an array, not {_json_type(shape_raw)}")
    shape = tuple(_check_int(x, f"witness.shape[{i}]", 0) for i, x in enumerate(shape_raw))
    witness = Witness(
        logits_digest=_digest(w, "logits_digest", "witness.logits_digest"),
        dtype=_str(w, "dtype", "witness.dtype"),
        shape=shape,
    )

    verification = _read_verification(doc)
    _read_annotations(doc)
    created = _read_created(doc)
    kvreg_version = _str(doc, "kvreg_version", "kvreg_version")

    computed = chunk_merkle_root([ch.digest for ch in chunks])
    if computed != merkle_root:
        raise MerkleProofError(
            f"manifest merkle_root {merkle_root} does not match the root {computed} "
            f"over its {len(chunks)} chunks",
            expected=str(merkle_root),
            actual=str(computed),
        )

    return ManifestViews(
        model=model,
        tokenizer=tokenizer,
        config=config,
        schedule=schedule,
        tokens=tokens,
        text=text,
        prompt=prompt,
        chunks=chunks,
        merkle_root=merkle_root,
        witness=witness,
        verification=verification,
        created=created,
        kvreg_version=kvreg_version,
    )
