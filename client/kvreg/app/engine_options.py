"""The engine options a use case takes: dtype, threads, attention, profile, device, block size.

``EngineOptions`` holds what the user chose, each ``None`` when not chosen, as
plain values: it never imports torch, so a command can build it before the engine
loads. For a new computation (deposit, route, ask) unset options take the
engine's defaults; for a graft or a verify they take the artifact's recorded
config, and an option given overrides it (the config fingerprint then differs
and the engine refuses, naming the field: that is intended). The block size of a
recorded config never changes.

This module does not load the engine (``kvreg.app.loader`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.core.errors import ConfigError
from kvreg.engine import profiles

# Library defaults, repeated here so that they are known before torch loads
# (kvreg.engine.pinned holds the same values; a test compares them).
DEFAULT_DEVICE = "cpu"
DEFAULT_PROFILE = profiles.DEFAULT_PROFILE

FIELDS: tuple[str, ...] = ("dtype", "threads", "attn_implementation", "profile", "device", "block_size")
_RECORDED: tuple[str, ...] = ("dtype", "attn_implementation", "threads", "device", "profile", "block_size")


@dataclass(frozen=True)
class EngineOptions:
    """What the user chose for the engine (None: not chosen)."""

    dtype: str | None = None
    threads: int | None = None
    attn_implementation: str | None = None
    profile: str | None = None
    device: str | None = None
    block_size: int | None = None

    def given(self) -> dict[str, Any]:
        """The options chosen, by ``EngineSettings`` field name."""
        return {name: getattr(self, name) for name in FIELDS if getattr(self, name) is not None}

    def for_new(self) -> dict[str, Any]:
        """The settings of a new computation: the options chosen, engine defaults for the rest."""
        return self.given()

    def over_recorded(self, recorded: dict[str, Any]) -> dict[str, Any]:
        """The settings of a recorded config, with the options chosen over them."""
        base: dict[str, Any] = {}
        for name in _RECORDED:
            if name not in recorded:
                raise ConfigError(f"the artifact's recorded config has no {name!r} field")
            base[name] = recorded[name]
        overrides = self.given()
        if "block_size" in overrides and overrides["block_size"] != base["block_size"]:
            raise ConfigError(
                f"the artifact was computed in blocks of {base['block_size']} tokens; "
                "its block size cannot change"
            )
        base.update(overrides)
        return base
