"""Settings in ``$KVREG_HOME/config.json``: ``kvreg config get|set|unset KEY [VALUE]``.

``config.json`` is one JSON object shared by several parts of kvreg (remotes live
under ``"remotes"``, ``receipts.always`` under ``"receipts"``). A dotted key names
a member of a section: ``store.max-bytes`` is ``{"store": {"max-bytes": N}}``.
Every other member of the file is kept as it is.

Changes are read-modify-write under an exclusive ``flock`` on
``$KVREG_HOME/.config.lock`` (the same lock ``kvreg remote add`` takes, so neither
loses the other's change) and the file is replaced atomically
(``kvreg.fileio.atomicfile``): a crash leaves the old file or the new one.

Only known keys can be set (:data:`KEYS`); each has a parser that turns the text a
user types into the JSON value stored, and a formatter for display. Sizes accept
``20GiB``, ``500MB``, ``1.5TiB``, a plain byte count, or ``none`` (no budget).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.core.errors import ConfigError, UsageError
from kvreg.store import jsonfile
from kvreg.store.layout import Layout

MAX_BYTES_KEY = "store.max-bytes"
_CONFIG_MODE = 0o644

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", re.ASCII)
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_NONE_WORDS = frozenset({"none", "unlimited", "off"})


def parse_size(text: str) -> int | None:
    """Bytes from ``20GiB``, ``500MB``, ``1.5T``, ``123`` (decimal units are powers of 1000,
    ``KiB``/``K`` and friends powers of 1024); ``none`` gives None (no limit)."""
    if text.strip().lower() in _NONE_WORDS:
        return None
    m = _SIZE.fullmatch(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise UsageError(
            f"invalid size {text!r}",
            hint="a byte count with an optional unit, e.g. 20GiB, 500MB, 1.5TiB, 1048576; or none",
        )
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 0 or value >= 2**63:
        raise UsageError(f"size {text!r} is out of range")
    return int(value)


def format_size(n: int | None) -> str:
    """``21474836480`` → ``20.0 GiB``; None → ``none``."""
    if n is None:
        return "none"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _parse_remote(text: str) -> str | None:
    if text.strip().lower() in _NONE_WORDS:
        return None
    if _REMOTE_NAME.fullmatch(text) is None or ".." in text:
        raise UsageError(f"invalid remote name {text!r}", hint="e.g. origin, or none")
    return text


def _check_size_value(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ConfigError(f"{MAX_BYTES_KEY} must be a non-negative byte count or null, not {value!r}")


def _check_remote_value(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and _REMOTE_NAME.fullmatch(value)):
        return value
    raise ConfigError(f"receipts.always must be a remote name or null, not {value!r}")


@dataclass(frozen=True)
class Key:
    """A known setting: its dotted name, what it means, how to parse, check and show it."""

    name: str
    help: str
    parse: Callable[[str], Any]
    check: Callable[[Any], Any]
    show: Callable[[Any], str]


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key(
            MAX_BYTES_KEY,
            "size budget of the local object store (e.g. 20GiB, 500MB, none); "
            "least recently used unpinned objects are evicted to stay under it",
            parse_size,
            _check_size_value,
            format_size,
        ),
        Key(
            "receipts.always",
            "send a signed graft receipt to this remote after every graft (or none)",
            _parse_remote,
            _check_remote_value,
            lambda v: "none" if v is None else str(v),
        ),
    )
}


def key(name: str) -> Key:
    """The known key ``name``; ``UsageError`` listing the known keys otherwise."""
    found = KEYS.get(name)
    if found is None:
        raise UsageError(f"unknown configuration key {name!r}", hint="known keys: " + ", ".join(sorted(KEYS)))
    return found


# --- the file ------------------------------------------------------------------------


def locked(home: Layout) -> contextlib.AbstractContextManager[None]:
    """Exclusive lock on ``$KVREG_HOME/.config.lock`` (shared with ``kvreg.remote.remotes``)."""
    return jsonfile.locked(home, "config")


def read_document(path: Path) -> dict[str, Any]:
    """The whole ``config.json`` (``{}`` when it does not exist); ``ConfigError`` if invalid."""
    return jsonfile.read_object(path, "config")


def _write_document(path: Path, doc: dict[str, Any], tmp_dir: Path) -> None:
    jsonfile.write_object(path, doc, mode=_CONFIG_MODE, what="config", tmp_dir=tmp_dir)


def _split(name: str) -> tuple[str, str]:
    section, _, member = name.partition(".")
    return section, member


def _section(doc: dict[str, Any], section: str, path: Path) -> dict[str, Any]:
    value = doc.get(section, {})
    if not isinstance(value, dict):
        raise ConfigError(f"config {path}: {section!r} must be an object", hint=f"fix {path}")
    return value


def get(home: Layout, name: str) -> Any:
    """The stored value of ``name`` (checked), or None when it is not set."""
    k = key(name)
    section, member = _split(k.name)
    doc = read_document(home.config_path)
    value = _section(doc, section, home.config_path).get(member)
    try:
        return k.check(value)
    except ConfigError as e:
        raise ConfigError(
            f"config {home.config_path}: {e.message}", hint=f"fix it: kvreg config set {name} VALUE"
        ) from e


def set_value(home: Layout, name: str, value: Any) -> None:
    """Store an already parsed ``value`` for ``name`` (None removes it)."""
    k = key(name)
    k.check(value)
    section, member = _split(k.name)
    with locked(home):
        doc = read_document(home.config_path)
        part = dict(_section(doc, section, home.config_path))
        if value is None:
            part.pop(member, None)
        else:
            part[member] = value
        if part:
            doc[section] = part
        else:
            doc.pop(section, None)
        _write_document(home.config_path, doc, home.tmp_dir)


def set_text(home: Layout, name: str, text: str) -> Any:
    """Parse ``text`` for ``name`` and store it; return the stored value."""
    value = key(name).parse(text)
    set_value(home, name, value)
    return value


def unset(home: Layout, name: str) -> bool:
    """Remove ``name``; True if it was set."""
    was = get(home, name) is not None
    set_value(home, name, None)
    return was


def max_bytes(home: Layout) -> int | None:
    """The store's size budget (``store.max-bytes``), or None for no budget."""
    return _check_size_value(get(home, MAX_BYTES_KEY))
