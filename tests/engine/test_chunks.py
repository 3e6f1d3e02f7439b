"""The chunk format: deterministic bytes, strict zero-copy parsing."""

from __future__ import annotations

import struct

import pytest
import torch

from kvreg.core.digest import Digest
from kvreg.core.errors import ChunkInvalidError
from kvreg.engine.chunks import ChunkLayout, parse_chunk, serialize_chunk


def _tensors(layout: ChunkLayout, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    shape = (layout.kv_heads, layout.n_tokens, layout.head_dim)
    keys = [torch.randn(shape, generator=g).to(layout.dtype) for _ in range(layout.num_layers)]
    values = [torch.randn(shape, generator=g).to(layout.dtype) for _ in range(layout.num_layers)]
    return keys, values


LAYOUT = ChunkLayout(start=16, end=32, num_layers=12, kv_heads=2, head_dim=8, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_round_trip_is_bit_exact(dtype: torch.dtype) -> None:
    layout = ChunkLayout(0, 5, 3, 2, 4, dtype)
    keys, values = _tensors(layout)
    data = bytearray(serialize_chunk(layout, keys, values))
    k2, v2 = parse_chunk(data, layout)
    for a, b in zip(keys + values, k2 + v2, strict=True):
        assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_same_kv_always_serializes_to_the_same_bytes() -> None:
    keys, values = _tensors(LAYOUT)
    first = serialize_chunk(LAYOUT, keys, values)
    # non-contiguous inputs with equal values give equal bytes too
    wide = [torch.cat([k, k], dim=1)[:, : LAYOUT.n_tokens, :] for k in keys]
    assert serialize_chunk(LAYOUT, wide, values) == first
    assert Digest.of_bytes(first) == Digest.of_bytes(serialize_chunk(LAYOUT, keys, values))


def test_golden_header() -> None:
    layout = ChunkLayout(0, 1, 1, 1, 2, torch.float32)
    data = serialize_chunk(layout, [torch.tensor([[[1.0, 2.0]]])], [torch.tensor([[[3.0, 4.0]]])])
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + n].rstrip(b" ")
    assert header == (
        b'{"__metadata__":{"kvreg.chunk":"{\\"dtype\\":\\"float32\\",\\"end\\":1,\\"format\\":\\"kvreg.chunk/v1\\",'
        b'\\"layers\\":1,\\"start\\":0}"},"layers.0.key":{"dtype":"F32","shape":[1,1,2],"data_offsets":[0,8]},'
        b'"layers.0.value":{"dtype":"F32","shape":[1,1,2],"data_offsets":[8,16]}}'
    )
    assert data[8 + n :] == struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)


def _corrupt(data: bytes, old: bytes, new: bytes) -> bytearray:
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + n].replace(old, new, 1)
    header = header.ljust(n)[:n] if len(header) <= n else header
    return bytearray(struct.pack("<Q", len(header)) + header + data[8 + n :])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: bytearray(d[:-1]), "ends at"),
        (lambda d: bytearray(d + b"\0"), "ends at"),
        (lambda d: bytearray(d[:4]), "shorter"),
        (lambda d: bytearray(b"\xff" * 8 + d[8:]), "out of range"),
        (lambda d: _corrupt(d, b'"F32"', b'"F16"'), "bytes do not fit"),
        (lambda d: _corrupt(d, b"kvreg.chunk/v1", b"kvreg.chunk/v9"), "metadata"),
        (lambda d: _corrupt(d, b"layers.11.value", b"layers.12.value"), "exactly"),
    ],
)
def test_malformed_chunks_are_rejected(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    keys, values = _tensors(LAYOUT)
    data = serialize_chunk(LAYOUT, keys, values)
    with pytest.raises(ChunkInvalidError, match=message):
        parse_chunk(mutate(data), LAYOUT)


def test_a_chunk_for_another_position_or_shape_is_rejected() -> None:
    keys, values = _tensors(LAYOUT)
    data = bytearray(serialize_chunk(LAYOUT, keys, values))
    with pytest.raises(ChunkInvalidError, match="metadata"):
        parse_chunk(data, ChunkLayout(0, 16, 12, 2, 8, torch.float32))
    with pytest.raises(ChunkInvalidError):
        parse_chunk(data, ChunkLayout(16, 32, 12, 2, 8, torch.bfloat16))
