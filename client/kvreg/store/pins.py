"""Pins: refs and manifests whose objects disk paging never evicts (``kvreg pin``/``unpin``).

``pins.json`` at the store root is ``{"pins": ["ns/name", "sha256:…"]}``, written
atomically under the object logs' lock (``kvreg.store.access_log.locked``).
Everything a pinned ref reaches (its manifest and every object the manifest names)
is never evicted; the pin follows the ref when it moves. This module only keeps the
list: ``kvreg.store.eviction`` honours it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from kvreg.core.digest import Digest, is_digest
from kvreg.core.errors import NotFoundError, StoreError
from kvreg.core.names import RefName
from kvreg.fileio.atomicfile import atomic_write_bytes
from kvreg.store.access_log import locked
from kvreg.store.home import Home
from kvreg.store.layout import Layout

log = logging.getLogger(__name__)

PINS_FILE = "pins.json"


def pins_path(home: Layout) -> Path:
    return home.root / PINS_FILE


def _normalize(target: str) -> str:
    if is_digest(target):
        return str(Digest(target))
    return str(RefName.parse(target))


def pinned(home: Layout) -> list[str]:
    """The pinned refs and digests, sorted."""
    path = pins_path(home)
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"pins file {path} cannot be read: {exc}",
            hint="fix it, or remove it and pin again (nothing is evicted while it is unreadable)",
        ) from exc
    items = doc.get("pins") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
        raise StoreError(f'pins file {path} must hold {{"pins": [strings]}}')
    return sorted(set(items))


def _write(home: Layout, items: Iterable[str]) -> None:
    body = json.dumps({"pins": sorted(set(items))}, indent=2) + "\n"
    home.tmp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(pins_path(home), body.encode("utf-8"), mode=0o644, tmp_dir=home.tmp_dir)


def pin(home: Home, target: str) -> bool:
    """Pin a ref (``ns/name``) or a manifest digest; True if it was not pinned yet.

    The ref must exist (or the manifest be stored) now; ``NotFoundError`` otherwise."""
    name = _normalize(target)
    if name.startswith("sha256:"):
        if not home.objects.has(Digest(name)):
            raise NotFoundError(f"manifest {name} is not in the local store", hint="pull it first")
    else:
        home.refs.get(RefName.parse(name))  # RefNotFoundError if missing
    with locked(home):
        current = pinned(home)
        if name in current:
            return False
        _write(home, [*current, name])
    log.info("pinned %s", name)
    return True


def unpin(home: Layout, target: str) -> bool:
    """Unpin; True if it was pinned."""
    name = _normalize(target)
    with locked(home):
        current = pinned(home)
        if name not in current:
            return False
        _write(home, [p for p in current if p != name])
    log.info("unpinned %s", name)
    return True
