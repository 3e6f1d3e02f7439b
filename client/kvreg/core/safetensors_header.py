"""Strict reader of safetensors headers, without torch.

Why by hand: the ``safetensors`` package validates a file only as far as it needs
to load it, and its loaders copy every tensor. kvreg needs (a) the byte range of
each tensor to hash model weights without materialising them, (b) zero-copy views
of chunk tensors, and (c) a parser that the registry and the fuzz tests can run
on hostile input without torch, that rejects anything ambiguous, and that never
allocates more than the input's size. The format is small and fixed
(https://github.com/huggingface/safetensors#format): an 8-byte little-endian
header length N, N bytes of UTF-8 JSON, then the tensor data.

This module parses and validates the layout; it does not interpret tensor bytes.
Writing is left to the ``safetensors`` package (``kvreg.engine.chunks``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO

from kvreg.core.errors import ChunkInvalidError, KvregError

# Upper bound on the JSON header; the reference implementation uses 100 MB.
MAX_HEADER_BYTES = 100_000_000

DTYPE_SIZES: Mapping[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offset of the first byte, relative to the start of the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    header_size: int  # N, the JSON length
    metadata: dict[str, str]
    tensors: dict[str, TensorInfo]  # in file order of their data

    @property
    def data_offset(self) -> int:
        return 8 + self.header_size

    @property
    def data_size(self) -> int:
        return max((t.end for t in self.tensors.values()), default=0)


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_header(
    prefix: bytes, *, total_size: int | None = None, error: type[KvregError] = ChunkInvalidError
) -> Header:
    """Parse the header at the start of ``prefix`` (which must contain all of it).

    ``total_size`` is the size of the whole file when known: the data section must
    then end exactly at the end of the file (no trailing bytes, no overlap, no gap).
    """
    if len(prefix) < 8:
        raise error("safetensors data is shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n < 2 or n > MAX_HEADER_BYTES:
        raise error(f"safetensors header length {n} is out of range")
    if total_size is not None and 8 + n > total_size:
        raise error(f"safetensors header length {n} exceeds the file size {total_size}")
    if len(prefix) < 8 + n:
        raise error("safetensors header is truncated")
    raw = prefix[8 : 8 + n]
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise error(f"safetensors header is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise error("safetensors header is not a JSON object")
    metadata: dict[str, str] = {}
    tensors: list[TensorInfo] = []
    for name, entry in doc.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in entry.items()
            ):
                raise error("safetensors __metadata__ must map strings to strings")
            metadata = dict(entry)
            continue
        tensors.append(_tensor_info(name, entry, error))
    tensors.sort(key=lambda t: (t.begin, t.end))
    position = 0
    for t in tensors:
        if t.begin != position:
            raise error(f"tensor {t.name!r} data does not start where the previous one ends")
        position = t.end
    if total_size is not None and 8 + n + position != total_size:
        raise error(
            f"safetensors data section ends at {8 + n + position}, but the file has {total_size} bytes"
        )
    return Header(header_size=n, metadata=metadata, tensors={t.name: t for t in tensors})


_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})
_MAX_DIM = 1 << 40
_MAX_OFFSET = 1 << 50


def _tensor_info(name: str, entry: object, error: type[KvregError]) -> TensorInfo:
    # Plain loops rather than all(...) generators: this runs for every tensor of
    # every chunk a graft reads.
    if type(entry) is not dict or entry.keys() != _ENTRY_KEYS:
        raise error(f"tensor {name!r}: entry must have exactly dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    size = DTYPE_SIZES.get(dtype) if type(dtype) is str else None
    if size is None:
        raise error(f"tensor {name!r}: unknown dtype {dtype!r}")
    if type(shape) is not list:
        raise error(f"tensor {name!r}: shape must be a list of non-negative integers")
    nbytes = size
    for d in shape:
        if type(d) is not int or not 0 <= d < _MAX_DIM:
            raise error(f"tensor {name!r}: shape must be a list of non-negative integers")
        nbytes *= d
    if type(offsets) is not list or len(offsets) != 2:
        raise error(f"tensor {name!r}: data_offsets must be two ordered non-negative integers")
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end < _MAX_OFFSET:
        raise error(f"tensor {name!r}: data_offsets must be two ordered non-negative integers")
    if end - begin != nbytes:
        raise error(f"tensor {name!r}: {end - begin} bytes do not fit dtype {dtype} shape {shape}")
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def read_header(
    f: BinaryIO, *, total_size: int | None = None, error: type[KvregError] = ChunkInvalidError
) -> Header:
    """Read and parse the header from an open binary file positioned at 0."""
    first = f.read(8)
    if len(first) < 8:
        raise error("safetensors file is shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", first)
    if n < 2 or n > MAX_HEADER_BYTES or (total_size is not None and 8 + n > total_size):
        raise error(f"safetensors header length {n} is out of range")
    return parse_header(first + f.read(n), total_size=total_size, error=error)
