"""The artifact manifest, schema ``kvreg.manifest/v1`` (DESIGN.md §2).

A ``Manifest`` wraps the parsed JSON document and validates it strictly on
construction: every required field present with its exact JSON type (``true`` is
not an integer), digests well formed, the chunk list on the absolute grid of the
block size and covering exactly the token count, layer types one per layer, and
the Merkle root equal to the RFC 6962 root over the chunk digests. A violation
raises ``ManifestInvalidError`` naming the field path (``chunks[3].end``); a
wrong Merkle root raises ``MerkleProofError``.

Bytes are never re-derived to verify anything. ``Manifest.from_bytes`` keeps the
exact bytes it was given (for a manifest out of a DSSE envelope, the signed
payload) and ``raw_bytes``/``digest`` use them. ``Manifest.from_dict`` serializes
the document as RFC 8785 canonical JSON, which then are its raw bytes.
``to_bytes()`` always returns the canonical serialization of the document; store
and send ``raw_bytes``. Fields this version does not know, at any level, are kept
as they are through ``from_bytes``, ``to_dict``, ``from_dict`` and ``to_bytes``.

``prefix_consistency_proof`` and ``verify_prefix`` show with an RFC 6962
consistency proof over chunk leaves that the full blocks of one artifact are the
first blocks of another.

This module does not read or write files, check that referenced objects exist,
verify signatures (``kvreg.core.envelope``), or compare fingerprints with a local
engine.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from kvreg.core.canonical import canonical_json, parse_json_object
from kvreg.core.digest import Digest, is_digest
from kvreg.core.errors import ManifestInvalidError, MerkleProofError
from kvreg.core.merkle import (
    chunk_leaf_hashes,
    chunk_merkle_root,
    consistency_proof,
    leaf_range_hash,
    root_from_leaf_hashes,
)
from kvreg.core.merkle import verify_consistency as _verify_consistency

__all__ = [
    "DTYPES",
    "MAX_MANIFEST_BYTES",
    "PROFILES",
    "SCHEMA",
    "VERDICTS",
    "ChunkEntry",
    "ConfigInfo",
    "Manifest",
    "ModelInfo",
    "PromptInfo",
    "Schedule",
    "TextInfo",
    "TokenizerInfo",
    "TokensInfo",
    "Verification",
    "Witness",
    "prefix_consistency_proof",
    "verify_prefix",
]

SCHEMA = "kvreg.manifest/v1"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
DTYPES = ("float32", "bfloat16", "float16")
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
class PromptInfo:
    digest: Digest
    size: int
    token_count: int


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
class _Views:
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


def _validate(doc: dict[str, Any]) -> _Views:
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
        prompt = PromptInfo(
            digest=_digest(pr, "digest", "prompt.digest"),
            size=_int(pr, "size", "prompt.size", minimum=0),
            token_count=_int(pr, "token_count", "prompt.token_count", minimum=1),
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

    return _Views(
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


# --- the manifest -----------------------------------------------------------------


class Manifest:
    """A validated ``kvreg.manifest/v1`` document and the exact bytes it came from."""

    __slots__ = ("_canonical", "_data", "_digest", "_raw", "_views")

    def __init__(self, data: dict[str, Any], raw: bytes, views: _Views) -> None:
        # Use from_bytes or from_dict; this constructor trusts its arguments.
        self._data = data
        self._raw = raw
        self._views = views
        self._digest: Digest | None = None
        self._canonical: bytes | None = None

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Manifest:
        """Parse and validate manifest bytes, keeping them exactly as given."""
        raw = bytes(data)
        doc = parse_json_object(
            raw, what="manifest", max_bytes=MAX_MANIFEST_BYTES, error=ManifestInvalidError
        )
        return cls(doc, raw, _validate(doc))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Manifest:
        """Validate a document; its raw bytes are its RFC 8785 canonical serialization."""
        if not isinstance(d, Mapping):
            raise ManifestInvalidError(f"manifest must be a mapping, not {type(d).__name__}")
        raw = canonical_json(dict(d), error=ManifestInvalidError)
        # Re-reading the canonical bytes normalizes types (tuples to lists, ...) and
        # guarantees that the stored document is exactly what the bytes say.
        doc = parse_json_object(
            raw, what="manifest", max_bytes=MAX_MANIFEST_BYTES, error=ManifestInvalidError
        )
        manifest = cls(doc, raw, _validate(doc))
        manifest._canonical = raw
        return manifest

    # --- bytes and identity -----------------------------------------------------

    @property
    def raw_bytes(self) -> bytes:
        """The exact bytes this manifest was read from (or its canonical form if built from a dict)."""
        return self._raw

    @property
    def digest(self) -> Digest:
        """The manifest digest: SHA-256 of ``raw_bytes``."""
        if self._digest is None:
            self._digest = Digest.of_bytes(self._raw)
        return self._digest

    def to_bytes(self) -> bytes:
        """The RFC 8785 canonical serialization of the document (not necessarily ``raw_bytes``)."""
        if self._canonical is None:
            self._canonical = canonical_json(self._data, error=ManifestInvalidError)
        return self._canonical

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the whole document, unknown fields included."""
        return copy.deepcopy(self._data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Manifest):
            return NotImplemented
        return self._raw == other._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"Manifest({self.digest.short()}, tokens={self.token_count}, chunks={len(self._views.chunks)})"

    # --- accessors --------------------------------------------------------------------

    @property
    def schema(self) -> str:
        return SCHEMA

    @property
    def model(self) -> ModelInfo:
        return self._views.model

    @property
    def tokenizer(self) -> TokenizerInfo:
        return self._views.tokenizer

    @property
    def config(self) -> ConfigInfo:
        return ConfigInfo(self._views.config.fingerprint, self._views.config.profile, self.config_fields)

    @property
    def config_fields(self) -> dict[str, Any]:
        return copy.deepcopy(self._views.config.fields)

    @property
    def schedule(self) -> Schedule:
        return self._views.schedule

    @property
    def block_size(self) -> int:
        return self._views.schedule.block_size

    @property
    def token_count(self) -> int:
        return self._views.tokens.count

    @property
    def tokens(self) -> TokensInfo:
        return self._views.tokens

    @property
    def text(self) -> TextInfo:
        return self._views.text

    @property
    def prompt(self) -> PromptInfo | None:
        return self._views.prompt

    @property
    def chunks(self) -> list[ChunkEntry]:
        return list(self._views.chunks)

    @property
    def merkle_root(self) -> Digest:
        return self._views.merkle_root

    @property
    def witness(self) -> Witness:
        return self._views.witness

    @property
    def verification(self) -> Verification | None:
        v = self._views.verification
        return None if v is None else Verification(v.verifier, v.verdict, copy.deepcopy(v.evidence))

    @property
    def annotations(self) -> dict[str, Any]:
        return copy.deepcopy(self._data["annotations"])

    @property
    def created(self) -> str | None:
        return self._views.created

    @property
    def kvreg_version(self) -> str:
        return self._views.kvreg_version

    def object_digests(self) -> list[Digest]:
        """Every object the manifest references (chunks in order, then tokens, text,
        witness logits, prompt), each once."""
        out: list[Digest] = []
        seen: set[str] = set()
        candidates = [c.digest for c in self._views.chunks]
        candidates += [self._views.tokens.digest, self._views.text.digest, self._views.witness.logits_digest]
        if self._views.prompt is not None:
            candidates.append(self._views.prompt.digest)
        for d in candidates:
            if d not in seen:
                seen.add(d)
                out.append(d)
        return out


# --- prefix relations -----------------------------------------------------------------


def _full_chunks(m: Manifest) -> int:
    return m.token_count // m.block_size


def _check_same_lineage(short: Manifest, long: Manifest) -> int:
    for what, a, b in (
        ("model fingerprint", short.model.fingerprint, long.model.fingerprint),
        ("tokenizer fingerprint", short.tokenizer.fingerprint, long.tokenizer.fingerprint),
        ("config fingerprint", short.config.fingerprint, long.config.fingerprint),
    ):
        if a != b:
            raise MerkleProofError(f"not a prefix: the {what}s differ ({a.short()} vs {b.short()})")
    if short.block_size != long.block_size:
        raise MerkleProofError(f"not a prefix: block sizes differ ({short.block_size} vs {long.block_size})")
    if short.token_count > long.token_count:
        raise MerkleProofError(
            f"not a prefix: the shorter artifact has {short.token_count} tokens, "
            f"the longer {long.token_count}"
        )
    m = _full_chunks(short)
    if m == 0:
        raise MerkleProofError(
            f"the shorter artifact ({short.token_count} tokens) has no full block of {short.block_size} "
            "tokens; there is no prefix to prove"
        )
    return m


def prefix_consistency_proof(short: Manifest, long: Manifest) -> list[bytes]:
    """An RFC 6962 consistency proof that the full blocks of ``short`` are the first
    chunks of ``long``. Raises ``MerkleProofError`` if they are not."""
    m = _check_same_lineage(short, long)
    short_chunks, long_chunks = short.chunks, long.chunks
    for i in range(m):
        if short_chunks[i].digest != long_chunks[i].digest:
            raise MerkleProofError(
                f"not a prefix: chunk {i} differs ({short_chunks[i].digest.short()} vs "
                f"{long_chunks[i].digest.short()})"
            )
    leaves = chunk_leaf_hashes([c.digest for c in long_chunks])
    return consistency_proof(m, len(leaves), leaf_range_hash(leaves))


def verify_prefix(short: Manifest, long: Manifest, proof: list[bytes]) -> None:
    """Check ``proof`` (from ``prefix_consistency_proof``): the tree over the full
    blocks of ``short`` is a prefix of ``long``'s chunk tree. Raises ``MerkleProofError``.

    When ``short`` ends on a block boundary its whole chunk tree (its
    ``merkle_root``) is checked; otherwise its partial last chunk is not part of
    the claim.
    """
    m = _check_same_lineage(short, long)
    short_chunks = short.chunks
    if m == len(short_chunks):
        old_root = short.merkle_root.raw
    else:
        old_root = root_from_leaf_hashes(chunk_leaf_hashes([c.digest for c in short_chunks[:m]]))
    _verify_consistency(m, len(long.chunks), old_root, long.merkle_root.raw, proof)
