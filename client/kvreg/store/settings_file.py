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
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.core.errors import ConfigError, UsageError
from kvreg.core.sizes import NONE_WORDS, format_size, parse_size
from kvreg.store import jsonfile
from kvreg.store.layout import Layout

MAX_BYTES_KEY = "store.max-bytes"
_CONFIG_MODE = 0o644

_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)


def _parse_remote(text: str) -> str | None:
    if text.strip().lower() in NONE_WORDS:
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
