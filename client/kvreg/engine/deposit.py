"""Deposit: compute a text's KV state on the block grid and store it as a signed artifact.

Tokenize (the prompt, if any, with the tokenizer's special tokens — or, for a chat
prompt rendered by ``kvreg.engine.chat``, without them: its template wrote them — then
the text without them, so that the prompt's tokens are exactly a prefix of the artifact's),
prefill block by block under the pinned config capturing each block's KV, turn
every block into a chunk object, record the next-token logits as the witness,
build and sign the manifest (a chat prompt adds ``prompt.chat`` and the messages
object), then write objects → manifest and envelope → ref. Chunks already in the
store are not written again.

``compute_artifact`` is the pure computation (also used by ``verify
--recompute``); ``deposit`` adds signing and storing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import kvreg
from kvreg.core.blockkey import block_keys, pack_tokens
from kvreg.core.digest import Digest
from kvreg.core.envelope import sign_envelope
from kvreg.core.errors import UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.merkle import chunk_merkle_root
from kvreg.core.names import RefName
from kvreg.core.timestamps import rfc3339
from kvreg.engine.chat import ChatPrompt
from kvreg.engine.chunks import ChunkLayout, serialize_chunk
from kvreg.engine.runtime import LoadedModel, logits_digest, new_cache, prefill, tensor_bytes
from kvreg.store.artifacts import WriteReport, store_artifact
from kvreg.store.home import Home

log = logging.getLogger(__name__)


@dataclass
class ComputedArtifact:
    tokens: list[int]
    prompt_token_count: int | None
    chunks: list[dict[str, Any]]  # manifest chunk entries
    chunk_bytes: dict[Digest, bytes]
    witness_bytes: bytes
    witness: dict[str, Any]
    prefill_seconds: float


def chunk_layout(lm: LoadedModel, start: int, end: int) -> ChunkLayout:
    info = lm.info
    return ChunkLayout(
        start, end, info["num_layers"], info["kv_heads"], info["head_dim"], lm.config.torch_dtype
    )


def tokenize(lm: LoadedModel, text: str, prompt: str | ChatPrompt | None) -> tuple[list[int], int | None]:
    """The artifact's tokens and how many of them are the prompt's (None without a prompt)."""
    if prompt is None:
        tokens = lm.encode(text, first=True)
        return tokens, None
    prompt_tokens = prompt.tokens if isinstance(prompt, ChatPrompt) else lm.encode(prompt, first=True)
    return prompt_tokens + lm.encode(text, first=False), len(prompt_tokens)


def compute_artifact(
    lm: LoadedModel, tokens: list[int], prompt_token_count: int | None = None
) -> ComputedArtifact:
    """Prefill ``tokens`` on the grid and serialize every block; no I/O."""
    if not tokens:
        raise UsageError("nothing to deposit: the text has no tokens")
    max_positions = getattr(lm.model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if max_positions and len(tokens) > max_positions:
        raise UsageError(
            f"the text has {len(tokens)} tokens, more than the model's {max_positions} positions"
        )
    started = time.perf_counter()
    cache = new_cache(lm)
    logits, blocks = prefill(lm, cache, tokens, 0, capture=True)
    elapsed = time.perf_counter() - started
    fps = (lm.model_fp, lm.tokenizer_fp, lm.config.fingerprint)
    keys = block_keys(*fps, tokens, lm.config.block_size)
    entries: list[dict[str, Any]] = []
    chunk_bytes: dict[Digest, bytes] = {}
    for index, (block, key) in enumerate(zip(blocks, keys, strict=True)):
        layout = chunk_layout(lm, block.start, block.end)
        if block.keys[0].shape != (layout.kv_heads, layout.n_tokens, layout.head_dim):
            raise UsageError(
                f"captured KV shape {tuple(block.keys[0].shape)} does not match the model config"
            )
        data = serialize_chunk(layout, block.keys, block.values)
        digest = Digest.of_bytes(data)
        chunk_bytes[digest] = data
        entries.append(
            {
                "index": index,
                "start": block.start,
                "end": block.end,
                "digest": str(digest),
                "size": len(data),
                "block_key": str(key),
            }
        )
    witness_bytes = tensor_bytes(logits)
    witness = {
        "logits_digest": str(logits_digest(logits)),
        "dtype": str(logits.dtype).removeprefix("torch."),
        "shape": list(logits.shape),
    }
    return ComputedArtifact(tokens, prompt_token_count, entries, chunk_bytes, witness_bytes, witness, elapsed)


@dataclass
class DepositResult:
    ref: RefName | None
    manifest: Manifest
    write: WriteReport
    prefill_seconds: float
    new_chunks: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": str(self.ref) if self.ref else None,
            "manifest_digest": str(self.manifest.digest),
            "merkle_root": str(self.manifest.merkle_root),
            "token_count": self.manifest.token_count,
            "chunk_count": len(self.manifest.chunks),
            "new_chunks": self.new_chunks,
            "block_size": self.manifest.block_size,
            "bytes_written": self.write.bytes_written,
            "bytes_new": self.write.bytes_new,
            "prefill_seconds": round(self.prefill_seconds, 6),
            "config_fingerprint": str(self.manifest.config.fingerprint),
            "model_fingerprint": str(self.manifest.model.fingerprint),
        }


def build_manifest(
    lm: LoadedModel,
    computed: ComputedArtifact,
    *,
    text: str,
    prompt: str | ChatPrompt | None,
    verification: dict[str, Any] | None,
    annotations: dict[str, Any],
) -> tuple[Manifest, dict[Digest, bytes]]:
    """The manifest document and every object it references (digest → bytes)."""
    objects: dict[Digest, bytes] = dict(computed.chunk_bytes)
    tokens_bytes = pack_tokens(computed.tokens)
    text_bytes = text.encode("utf-8")
    for data in (tokens_bytes, text_bytes, computed.witness_bytes):
        objects[Digest.of_bytes(data)] = data
    doc: dict[str, Any] = {
        "schema": "kvreg.manifest/v1",
        "model": {"fingerprint": str(lm.model_fp), **lm.info},
        "tokenizer": {"fingerprint": str(lm.tokenizer_fp), "name": lm.info["name"]},
        "config": {
            "fingerprint": str(lm.config.fingerprint),
            "profile": lm.config.settings.profile,
            "fields": lm.config.fields,
        },
        "schedule": {"block_size": lm.config.block_size, "grid": "absolute"},
        "tokens": {"count": len(computed.tokens), "digest": str(Digest.of_bytes(tokens_bytes))},
        "text": {"digest": str(Digest.of_bytes(text_bytes)), "size": len(text_bytes)},
        "chunks": computed.chunks,
        "merkle_root": str(chunk_merkle_root([Digest(c["digest"]) for c in computed.chunks])),
        "witness": computed.witness,
        "verification": verification,
        "annotations": annotations,
        "created": rfc3339(),
        "kvreg_version": kvreg.__version__,
    }
    if prompt is not None and computed.prompt_token_count is not None:
        prompt_text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
        prompt_bytes = prompt_text.encode("utf-8")
        objects[Digest.of_bytes(prompt_bytes)] = prompt_bytes
        doc["prompt"] = {
            "digest": str(Digest.of_bytes(prompt_bytes)),
            "size": len(prompt_bytes),
            "token_count": computed.prompt_token_count,
        }
        if isinstance(prompt, ChatPrompt):
            objects[prompt.messages_digest] = prompt.messages_json
            doc["prompt"]["chat"] = {
                "template": str(prompt.template_digest),
                "messages": str(prompt.messages_digest),
                "generation_prompt": prompt.generation_prompt,
            }
    return Manifest.from_dict(doc), objects


def deposit(
    lm: LoadedModel,
    home: Home,
    *,
    text: str,
    ref: RefName | None,
    key: SigningKey,
    prompt: str | ChatPrompt | None = None,
    verification: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
) -> DepositResult:
    """Compute, sign and store an artifact; move ``ref`` to it (compare-and-swap).

    ``prompt`` precedes ``text``: plain text (tokenized with special tokens) or a
    :class:`~kvreg.engine.chat.ChatPrompt` (its tokens as rendered). ``text`` may be
    empty when there is a prompt: the artifact is then the prompt alone."""
    expected = home.refs.get_or_none(ref) if ref is not None else None
    tokens, prompt_count = tokenize(lm, text, prompt)
    computed = compute_artifact(lm, tokens, prompt_count)
    notes = dict(annotations or {})
    if prompt is not None:
        notes.setdefault("question", prompt.text if isinstance(prompt, ChatPrompt) else prompt)
    manifest, objects = build_manifest(
        lm, computed, text=text, prompt=prompt, verification=verification, annotations=notes
    )
    new_chunks = sum(1 for d in computed.chunk_bytes if not home.objects.has(d))
    envelope = sign_envelope(manifest.raw_bytes, key)
    write = store_artifact(home, objects, manifest, envelope, ref, expected=expected)
    log.info(
        "deposited %s: %d tokens, %d chunks (%d new)",
        manifest.digest,
        len(tokens),
        len(computed.chunks),
        new_chunks,
    )
    return DepositResult(ref, manifest, write, computed.prefill_seconds, new_chunks)
