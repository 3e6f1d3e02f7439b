"""Fingerprints of a model directory: weights + architecture config, and tokenizer.

- **Weights**: for every tensor, its name, safetensors dtype, shape and the SHA-256
  of its bytes, sorted by name. Sharding is invisible: the same tensors split over
  other files give the same fingerprint. Per-file results are cached under the
  store's ``cache/`` keyed by (path, size, mtime, inode), so a second call only
  stats the files.
- **Model** = H(weights, config.json without the fields that change on a re-save:
  ``transformers_version``, ``_name_or_path``).
- **Tokenizer** = H(every tokenizer file: JSON files canonicalised, others raw).

Only safetensors weights are accepted (no pickle). This module reads files; it
does not load the model or import torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kvreg.core.canonical import canonical_json
from kvreg.core.digest import Digest
from kvreg.core.errors import ModelError
from kvreg.core.safetensors_header import read_header
from kvreg.fileio.atomicfile import atomic_write_bytes

log = logging.getLogger(__name__)

VOLATILE_CONFIG_KEYS = frozenset({"transformers_version", "_name_or_path"})
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)
_CACHE_NAME = "weights-fingerprints.json"


def normalized_json(value: object) -> bytes:
    """A stable byte form of third-party JSON (config.json, tokenizer files).

    Not RFC 8785: those files may hold integers beyond 2**53 (``model_max_length``
    is often 1e30), which canonical JSON rejects. Sorted keys, no whitespace,
    UTF-8, Python's shortest round-trip float repr — stable across platforms.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


_READ = 1 << 22


def weight_files(model_dir: Path) -> list[Path]:
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelError(
            f"no *.safetensors weights in {model_dir}",
            hint="kvreg loads safetensors weights only (no pickle); convert the checkpoint first",
        )
    return files


def _hash_range(path: Path, begin: int, end: int) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        f.seek(begin)
        remaining = end - begin
        while remaining:
            block = f.read(min(_READ, remaining))
            if not block:
                raise ModelError(f"{path} is truncated")
            h.update(block)
            remaining -= len(block)
    return h.hexdigest()


def _file_entries(path: Path, threads: int) -> list[list[Any]]:
    size = path.stat().st_size
    with path.open("rb") as f:
        header = read_header(f, total_size=size, error=ModelError)
    base = header.data_offset
    infos = list(header.tensors.values())
    with ThreadPoolExecutor(max_workers=threads) as pool:
        hashes = list(pool.map(lambda t: _hash_range(path, base + t.begin, base + t.end), infos))
    return [[t.name, t.dtype, list(t.shape), h] for t, h in zip(infos, hashes, strict=True)]


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"


def weights_fingerprint(model_dir: Path, *, cache_dir: Path | None = None, threads: int = 2) -> Digest:
    cache: dict[str, list[list[Any]]] = {}
    cache_path = cache_dir / _CACHE_NAME if cache_dir else None
    if cache_path and cache_path.exists():
        try:
            loaded = json.loads(cache_path.read_bytes())
            if isinstance(loaded, dict):
                cache = loaded
        except ValueError:
            log.warning("ignoring unreadable fingerprint cache %s", cache_path)
    entries: list[list[Any]] = []
    changed = False
    for path in weight_files(model_dir):
        key = _stat_key(path)
        if key not in cache:
            cache[key] = _file_entries(path, threads)
            changed = True
        entries.extend(cache[key])
    names = [e[0] for e in entries]
    if len(names) != len(set(names)):
        raise ModelError(f"{model_dir}: a tensor name appears in more than one weights file")
    entries.sort(key=lambda e: e[0])
    if cache_path and changed:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        live = {k: v for k, v in cache.items() if Path(k.split("|", 1)[0]).exists()}
        atomic_write_bytes(cache_path, json.dumps(live).encode(), mode=0o644)
    return Digest.of_bytes(canonical_json({"format": "kvreg.weights/v1", "tensors": entries}))


def load_config_json(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        config = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ModelError(
            f"{model_dir} has no config.json", hint="MODEL must be a Hugging Face model directory"
        ) from None
    except ValueError as e:
        raise ModelError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ModelError(f"{path} is not a JSON object")
    return config


def model_fingerprint(model_dir: Path, *, cache_dir: Path | None = None, threads: int = 2) -> Digest:
    config = {k: v for k, v in load_config_json(model_dir).items() if k not in VOLATILE_CONFIG_KEYS}
    weights = weights_fingerprint(model_dir, cache_dir=cache_dir, threads=threads)
    config_digest = Digest.of_bytes(normalized_json(config))
    return Digest.of_bytes(
        canonical_json({"format": "kvreg.model/v1", "weights": str(weights), "config": str(config_digest)})
    )


def tokenizer_fingerprint(model_dir: Path) -> Digest:
    files: dict[str, str] = {}
    for name in TOKENIZER_FILES:
        path = model_dir / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if name.endswith(".json"):
            try:
                data = normalized_json(json.loads(data))
            except ValueError as e:
                raise ModelError(f"{path} is not valid JSON: {e}") from None
        files[name] = str(Digest.of_bytes(data))
    if not files:
        raise ModelError(
            f"no tokenizer files in {model_dir}", hint=f"expected one of: {', '.join(TOKENIZER_FILES)}"
        )
    return Digest.of_bytes(canonical_json({"format": "kvreg.tokenizer/v1", "files": files}))


def default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))
