"""The artifact manifest (``kvreg.manifest/v1``; docs/design.md, "Objects"): a validated document.

A ``Manifest`` wraps the parsed JSON document and validates it strictly on
construction (``kvreg.core.manifest_schema.validate``; ``ManifestInvalidError`` naming
the field path, or ``MerkleProofError`` for a wrong Merkle root), then hands out its
typed sections.

Bytes are never re-derived to verify anything. ``Manifest.from_bytes`` keeps the
exact bytes it was given (for a manifest out of a DSSE envelope, the signed
payload) and ``raw_bytes``/``digest`` use them. ``Manifest.from_dict`` serializes
the document as RFC 8785 canonical JSON, which then are its raw bytes.
``to_bytes()`` always returns the canonical serialization of the document; store
and send ``raw_bytes``. Fields this version does not know, at any level, are kept
as they are through ``from_bytes``, ``to_dict``, ``from_dict`` and ``to_bytes``.

This module does not read or write files, check that referenced objects exist,
verify signatures (``kvreg.core.envelope``), prove prefixes
(``kvreg.core.manifest_prefix``), or compare fingerprints with a local engine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kvreg.core.canonical import canonical_json, parse_json_object
from kvreg.core.digest import Digest
from kvreg.core.errors import ManifestInvalidError
from kvreg.core.manifest_schema import (
    DTYPE_BYTES,
    MAX_MANIFEST_BYTES,
    SCHEMA,
    ChunkEntry,
    ConfigInfo,
    ManifestViews,
    ModelInfo,
    PromptInfo,
    Schedule,
    TextInfo,
    TokenizerInfo,
    TokensInfo,
    Verification,
    Witness,
    validate,
)

__all__ = ["Manifest"]


class Manifest:
    """A validated ``kvreg.manifest/v1`` document and the exact bytes it came from."""

    __slots__ = ("_canonical", "_data", "_digest", "_raw", "_views")

    def __init__(self, data: dict[str, Any], raw: bytes, views: ManifestViews) -> None:
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
        return cls(doc, raw, validate(doc))

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
        manifest = cls(doc, raw, validate(doc))
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

    def stated_sizes(self) -> dict[Digest, int]:
        """Object sizes the manifest states outright (chunks, tokens, text, prompt): exact, so a
        download may be bounded by them. The witness logits' size follows from their shape
        (:meth:`witness_size`); a chat prompt's messages have no stated size."""
        sizes: dict[Digest, int] = {c.digest: c.size for c in self._views.chunks}
        sizes[self._views.tokens.digest] = 4 * self._views.tokens.count
        sizes[self._views.text.digest] = self._views.text.size
        if self._views.prompt is not None:
            sizes[self._views.prompt.digest] = self._views.prompt.size
        return sizes

    def witness_size(self) -> int | None:
        """The witness logits' size from their shape and dtype (None for a dtype kvreg does not know)."""
        w = self._views.witness
        if w.dtype not in DTYPE_BYTES:
            return None
        n = DTYPE_BYTES[w.dtype]
        for dim in w.shape:
            n *= dim
        return n

    def object_digests(self) -> list[Digest]:
        """Every object the manifest references (chunks in order, then tokens, text,
        witness logits, prompt, a chat prompt's messages), each once."""
        out: list[Digest] = []
        seen: set[str] = set()
        candidates = [c.digest for c in self._views.chunks]
        candidates += [self._views.tokens.digest, self._views.text.digest, self._views.witness.logits_digest]
        if self._views.prompt is not None:
            candidates.append(self._views.prompt.digest)
            if self._views.prompt.chat is not None:
                candidates.append(self._views.prompt.chat.messages)
        for d in candidates:
            if d not in seen:
                seen.add(d)
                out.append(d)
        return out
