"""Remote names: the one rule for the name of a registry a store talks to (``origin``).

A remote name is ``[A-Za-z0-9][A-Za-z0-9._-]{0,63}`` with no ``..``: it names files
(``$KVREG_HOME/remotes/<name>.json``) and appears in commands. This module only
checks names; remotes and their URLs are ``kvreg.remote.remotes``'s.
"""

from __future__ import annotations

import re

from kvreg.core.errors import UsageError

__all__ = ["REMOTE_NAME_PATTERN", "validate_remote_name"]

REMOTE_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_REMOTE_NAME_RE = re.compile(REMOTE_NAME_PATTERN, re.ASCII)


def validate_remote_name(name: str) -> str:
    """Return ``name`` if it is a valid remote name, else raise ``UsageError``."""
    if not isinstance(name, str) or _REMOTE_NAME_RE.fullmatch(name) is None or ".." in name:
        raise UsageError(
            f"invalid remote name {name!r}",
            hint="1-64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, "
            "no '..' (e.g. origin)",
        )
    return name
