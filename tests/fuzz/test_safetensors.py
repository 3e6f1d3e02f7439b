"""Fuzzing safetensors headers (``kvreg.core.safetensors_header``) and KV chunks
(``kvreg.engine.chunks.parse_chunk``): header length, offsets, dtypes and shapes against
the manifest's layout.

Arbitrary and mutated bytes raise only ``ChunkInvalidError``; a declared header length
of up to 2**64 - 1 is refused before anything of that size is read or allocated; an
accepted header tiles the data section exactly.
"""

from __future__ import annotations

import io
import json
import struct

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fuzz.strategies import fuzz, json_values, mutated, safetensors_bytes, typed
from kvreg.core.errors import ChunkInvalidError
from kvreg.core.safetensors_header import DTYPE_SIZES, MAX_HEADER_BYTES, parse_header, read_header
from kvreg.engine.chunks import ChunkLayout, parse_chunk, serialize_chunk

VALID = safetensors_bytes({"a": ("F32", [2, 3]), "b": ("BF16", [4]), "c": ("U8", [0])}, {"k": "v"})


def _check_accepted(data: bytes) -> None:
    h = typed(parse_header, data, total_size=len(data), allowed=ChunkInvalidError)
    if h is None:
        return
    assert h.data_offset + h.data_size == len(data)
    position = 0
    for t in h.tensors.values():
        assert t.begin == position and t.dtype in DTYPE_SIZES
        n = DTYPE_SIZES[t.dtype]
        for dim in t.shape:
            n *= dim
        assert t.nbytes == n
        position = t.end


@fuzz(300)
@given(st.binary(max_size=120))
def test_header_arbitrary_bytes(data: bytes) -> None:
    typed(parse_header, data, allowed=ChunkInvalidError)
    _check_accepted(data)


@fuzz(300)
@given(mutated(VALID))
def test_header_mutated(data: bytes) -> None:
    _check_accepted(data)
    typed(read_header, io.BytesIO(data), total_size=len(data), allowed=ChunkInvalidError)


@fuzz(300)
@given(st.dictionaries(st.sampled_from(("a", "b", "__metadata__")), json_values, max_size=3))
def test_header_arbitrary_json(doc: dict) -> None:
    try:
        raw = json.dumps(doc).encode()
    except ValueError:
        return
    _check_accepted(struct.pack("<Q", len(raw)) + raw)


@fuzz(200)
@given(
    st.sampled_from([*sorted(DTYPE_SIZES), "F4", "f32", ""]),
    st.lists(st.integers(-2, 2**45), max_size=4),
    st.lists(st.integers(-2, 2**52), min_size=0, max_size=3),
)
def test_header_entry_fields(dtype: str, shape: list[int], offsets: list[int]) -> None:
    raw = json.dumps({"t": {"dtype": dtype, "shape": shape, "data_offsets": offsets}}).encode()
    data = struct.pack("<Q", len(raw)) + raw
    _check_accepted(data)
    typed(parse_header, data, allowed=ChunkInvalidError)


@pytest.mark.parametrize("n", [2**63, 2**64 - 1, MAX_HEADER_BYTES + 1, 1, 0])
def test_huge_header_length_is_refused_without_reading(n: int) -> None:
    data = struct.pack("<Q", n) + b"{}"

    class Reader(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            assert size == 8  # only the length itself is ever read
            return super().read(size)

    with pytest.raises(ChunkInvalidError):
        parse_header(data)
    with pytest.raises(ChunkInvalidError):
        read_header(Reader(data), total_size=len(data))


def test_header_length_beyond_the_file_is_refused_before_reading() -> None:
    data = struct.pack("<Q", 50_000_000) + b"{}"
    with pytest.raises(ChunkInvalidError, match="out of range"):
        read_header(io.BytesIO(data), total_size=len(data))


def test_deeply_nested_header_is_refused() -> None:
    raw = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ChunkInvalidError):
        parse_header(struct.pack("<Q", len(raw)) + raw)


# --- chunks against the manifest's layout -------------------------------------------------

LAYOUT = ChunkLayout(start=4, end=7, num_layers=2, kv_heads=2, head_dim=4, dtype=torch.float32)


def _chunk(layout: ChunkLayout) -> bytes:
    gen = torch.Generator().manual_seed(0)
    shape = (layout.kv_heads, layout.n_tokens, layout.head_dim)
    keys = [torch.randn(shape, generator=gen).to(layout.dtype) for _ in range(layout.num_layers)]
    values = [torch.randn(shape, generator=gen).to(layout.dtype) for _ in range(layout.num_layers)]
    return serialize_chunk(layout, keys, values)


CHUNK = _chunk(LAYOUT)


def test_chunk_round_trip() -> None:
    keys, values = parse_chunk(bytearray(CHUNK), LAYOUT)
    assert serialize_chunk(LAYOUT, keys, values) == CHUNK


@fuzz(300)
@given(mutated(CHUNK, max_ops=3))
def test_chunk_mutated(data: bytes) -> None:
    out = typed(parse_chunk, bytearray(data), LAYOUT, allowed=ChunkInvalidError)
    if out is not None:  # only edits of tensor bytes keep a chunk readable; the layout is intact
        keys, values = out
        assert len(keys) == len(values) == LAYOUT.num_layers
        assert all(t.shape == (2, 3, 4) and t.dtype == torch.float32 for t in keys + values)
        assert len(data) == len(CHUNK)


@fuzz(60)
@given(
    st.integers(0, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from((torch.float32, torch.float16, torch.bfloat16)),
)
def test_chunk_against_another_layout_is_refused(
    start: int, n: int, layers: int, heads: int, dtype: torch.dtype
) -> None:
    other = ChunkLayout(
        start=start, end=start + n, num_layers=layers, kv_heads=heads, head_dim=4, dtype=dtype
    )
    if other == LAYOUT:
        return
    with pytest.raises(ChunkInvalidError):
        parse_chunk(bytearray(CHUNK), other)


@pytest.mark.parametrize("meta", ["[" * 100_000, "1e999999", '{"a":' * 50_000, "\ud800"])
def test_chunk_hostile_metadata_is_refused(meta: str) -> None:
    header = json.dumps({"__metadata__": {"kvreg.chunk": meta}}).encode()
    with pytest.raises(ChunkInvalidError):
        parse_chunk(bytearray(struct.pack("<Q", len(header)) + header), LAYOUT)
