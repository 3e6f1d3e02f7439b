"""Opening the local store of an invocation from its ``--home`` option.

:func:`open_home` resolves the root (``--home``, else ``$KVREG_HOME``, else
``~/.kvreg``) without touching the disk; :data:`StoreHome` is the type the use
cases take, so that the CLI can name it without importing the store. This module
creates nothing and reads nothing.
"""

from __future__ import annotations

from typing import TypeAlias

from kvreg.store.home import Home

StoreHome: TypeAlias = Home


def open_home(path: str | None) -> StoreHome:
    """The store at ``path``, else ``$KVREG_HOME``, else ``~/.kvreg`` (nothing is created)."""
    return Home(path)
