"""KV chunks: one block of the KV state of every layer, as deterministic safetensors bytes.

Format ``kvreg.chunk/v1`` (docs/formats.md): tensors ``layers.{l}.key`` and
``layers.{l}.value`` of shape ``[kv_heads, n_tokens, head_dim]`` in the dtype the
model computed, and one metadata entry ``kvreg.chunk`` whose value is the
canonical JSON of ``{"format", "start", "end", "layers", "dtype"}``. A single
metadata key matters: the safetensors writer orders several keys differently from
run to run, which would give the same KV different bytes.

Reading is strict and zero-copy: the header is validated against what the
manifest says the chunk must hold (names, dtype, shapes, sizes) before any tensor
view is made over the bytes. This module converts between tensors and bytes; it
does not hash, store or fetch.
"""

from __future__ import annotations

import functools
import json
import mmap
import struct
from dataclasses import dataclass

import torch
from safetensors.torch import save

from kvreg.core.canonical import canonical_json
from kvreg.core.errors import ChunkInvalidError
from kvreg.core.safetensors_header import parse_header

CHUNK_FORMAT = "kvreg.chunk/v1"
METADATA_KEY = "kvreg.chunk"

TORCH_TO_ST = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
ST_TO_TORCH = {v: k for k, v in TORCH_TO_ST.items()}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class ChunkLayout:
    """What a chunk must contain, derived from the manifest."""

    start: int
    end: int
    num_layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def n_tokens(self) -> int:
        return self.end - self.start

    def metadata(self) -> dict[str, object]:
        return {
            "format": CHUNK_FORMAT,
            "start": self.start,
            "end": self.end,
            "layers": self.num_layers,
            "dtype": DTYPE_NAMES[self.dtype],
        }


def serialize_chunk(layout: ChunkLayout, keys: list[torch.Tensor], values: list[torch.Tensor]) -> bytes:
    """Bytes of one chunk; ``keys[l]``/``values[l]`` are ``[kv_heads, n, head_dim]`` tensors."""
    tensors: dict[str, torch.Tensor] = {}
    for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
        tensors[f"layers.{layer}.key"] = k.detach().to("cpu").contiguous()
        tensors[f"layers.{layer}.value"] = v.detach().to("cpu").contiguous()
    meta = canonical_json(layout.metadata()).decode()
    return save(tensors, metadata={METADATA_KEY: meta})


@functools.lru_cache(maxsize=16)
def _tensor_names(num_layers: int) -> dict[str, tuple[int, str]]:
    """``layers.{l}.key``/``.value``, each mapped to its layer and kind."""
    return {f"layers.{i}.{kind}": (i, kind) for i in range(num_layers) for kind in ("key", "value")}


def parse_chunk(
    data: bytes | bytearray | memoryview | mmap.mmap, layout: ChunkLayout
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Zero-copy tensors of a chunk, after checking every header field against ``layout``.

    ``data`` should be a writable buffer (``bytearray``) so that torch can view it
    without a warning; the returned tensors share its memory.
    """
    view_bytes = memoryview(data)
    if len(view_bytes) < 8:
        raise ChunkInvalidError("chunk is shorter than its 8-byte header length")
    (header_len,) = struct.unpack("<Q", view_bytes[:8])
    header = parse_header(
        bytes(view_bytes[: min(len(view_bytes), 8 + header_len)]), total_size=len(view_bytes)
    )
    raw_meta = header.metadata.get(METADATA_KEY)
    if set(header.metadata) != {METADATA_KEY} or raw_meta is None:
        raise ChunkInvalidError("chunk metadata must hold exactly the 'kvreg.chunk' entry")
    try:
        meta = json.loads(raw_meta)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting ([[[[...)
        raise ChunkInvalidError("chunk metadata is not valid JSON") from None
    if meta != layout.metadata():
        raise ChunkInvalidError(
            f"chunk metadata {meta!r} does not match the manifest's {layout.metadata()!r}"
        )
    st_dtype = TORCH_TO_ST[layout.dtype]
    shape = (layout.kv_heads, layout.n_tokens, layout.head_dim)
    names = _tensor_names(layout.num_layers)
    if header.tensors.keys() != names.keys():
        raise ChunkInvalidError("chunk tensors are not exactly layers.{0..L-1}.{key,value}")
    for info in header.tensors.values():
        if info.dtype != st_dtype or info.shape != shape:
            raise ChunkInvalidError(
                f"chunk tensor {info.name} is {info.dtype}{list(info.shape)}, "
                f"expected {st_dtype}{list(shape)}"
            )
    # Every tensor now has the same size, and parse_header checked that they tile
    # the data section without gaps, in file order; so the section is one
    # [2 * layers, kv_heads, n, head_dim] array, cut into tensors in one call.
    # The section starts 8-byte aligned (safetensors pads the header).
    itemsize = layout.dtype.itemsize
    flat = torch.frombuffer(
        data, dtype=layout.dtype, count=header.data_size // itemsize, offset=header.data_offset
    )
    parts = flat.view(len(names), *shape).unbind(0)
    keys: list[torch.Tensor] = [flat] * layout.num_layers  # placeholders, all replaced below
    values: list[torch.Tensor] = [flat] * layout.num_layers
    for part, name in zip(parts, header.tensors, strict=True):
        layer, kind = names[name]
        (keys if kind == "key" else values)[layer] = part
    return keys, values
