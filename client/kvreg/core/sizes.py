"""Byte sizes as people type and read them: ``20GiB``, ``500MB``, ``1.5T``, ``none``.

:func:`parse_size` turns such text into a byte count (or None for no limit) and
:func:`format_size` writes a byte count back in binary units. Pure functions: no
file, no setting; ``kvreg.store.settings_file`` uses them for ``store.max-bytes``.
"""

from __future__ import annotations

import math
import re

from kvreg.core.errors import UsageError

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
NONE_WORDS = frozenset({"none", "unlimited", "off"})  # sizes and remote names: no value


def parse_size(text: str) -> int | None:
    """Bytes from ``20GiB``, ``500MB``, ``1.5T``, ``123`` (decimal units are powers of 1000,
    ``KiB``/``K`` and friends powers of 1024); ``none`` gives None (no limit)."""
    if text.strip().lower() in NONE_WORDS:
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
