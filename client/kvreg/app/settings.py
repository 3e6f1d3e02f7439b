"""The local store's settings in ``config.json``: get, set, unset, list the known keys.

The keys and their parsing are :mod:`kvreg.store.settings_file`'s (``store.max-bytes``,
``receipts.always``); other parts of ``config.json`` (remotes) are left as they are.
Unknown keys raise ``UsageError``. This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.store import settings_file
from kvreg.store.home import Home


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    display: str  # the value as users write it ('none' when unset)
    help: str

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "display": self.display}


@dataclass(frozen=True)
class SettingRemoved:
    key: str
    removed: bool  # False: it was not set

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "removed": self.removed}


@dataclass(frozen=True)
class SettingsList:
    settings: list[Setting]
    config_path: Path

    def to_dict(self) -> dict[str, Any]:
        return {"config": [{**s.to_dict(), "help": s.help} for s in self.settings]}


def _setting(name: str, value: Any) -> Setting:
    known = settings_file.KEYS[name]
    return Setting(name, value, known.show(value), known.help)


def get_setting(home: Home, key: str) -> Setting:
    """The value of ``key`` (``None`` when it is not set)."""
    name = settings_file.key(key).name
    return _setting(name, settings_file.get(home, name))


def set_setting(home: Home, key: str, text: str) -> Setting:
    """Set ``key`` from its text form (``none`` removes it); the stored value."""
    name = settings_file.key(key).name
    return _setting(name, settings_file.set_text(home, name, text))


def unset_setting(home: Home, key: str) -> SettingRemoved:
    """Remove ``key``, so that its default applies again."""
    name = settings_file.key(key).name
    return SettingRemoved(name, settings_file.unset(home, name))


def list_settings(home: Home) -> SettingsList:
    """Every known key, sorted, with its value and meaning."""
    return SettingsList(
        [_setting(n, settings_file.get(home, n)) for n in sorted(settings_file.KEYS)], home.config_path
    )
