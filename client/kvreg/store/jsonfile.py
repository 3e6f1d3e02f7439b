"""Small JSON documents in ``$KVREG_HOME`` (``config.json``, ``credentials.json``): a lock file
around read-modify-write, a bounded read that refuses anything but a JSON object, and an
atomic write. Shared by ``kvreg.store.settings_file`` and ``kvreg.remote.remotes``, which own the
documents' contents; this module knows nothing of their keys.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kvreg.core.errors import ConfigError, StoreError
from kvreg.fileio.atomicfile import atomic_write_bytes
from kvreg.fileio.locks import flock
from kvreg.store.layout import Layout

MAX_FILE_BYTES = 1024 * 1024


@contextlib.contextmanager
def lock_file(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created, mode 0600, with its folder) for the block."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(flock(path, mode=0o600))
        except OSError as e:
            raise ConfigError(f"cannot lock {path}: {e.strerror or e}") from e
        yield


@contextlib.contextmanager
def locked(home: Layout, name: str) -> Iterator[None]:
    """An exclusive lock on ``$KVREG_HOME/.<name>.lock`` around a read-modify-write."""
    with lock_file(home.root / f".{name}.lock"):
        yield


def read_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``{}`` when absent or empty); ``ConfigError`` otherwise."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from e
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{what} {path} is larger than {MAX_FILE_BYTES} bytes")
    if not data.strip():
        return {}
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        # ``e`` may quote the file's text; for the credentials file that could be a token.
        raise ConfigError(f"{what} {path} is not valid JSON", hint=f"fix or remove {path}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{what} {path} must hold a JSON object", hint=f"fix or remove {path}")
    return doc


def write_object(
    path: Path, doc: Mapping[str, Any], *, mode: int, what: str, tmp_dir: Path | None = None
) -> None:
    """Write ``doc`` as indented, sorted JSON, atomically, with ``mode``."""
    data = (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        if tmp_dir is not None:
            tmp_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data, mode=mode, tmp_dir=tmp_dir)
    except (OSError, StoreError) as e:
        raise ConfigError(f"cannot write {what} {path}: {e}") from e
