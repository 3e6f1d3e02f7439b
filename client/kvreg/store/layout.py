"""Where the parts of a local store are, given its root: folders and files, no stores.

:class:`Layout` is the store's map (``objects/``, ``logs/``, ``cache/``,
``config.json``, ...) and :meth:`Layout.ensure` creates its folders. The modules that
only need paths (the access log, leases, the settings file, the absence errors the
object store raises) take a ``Layout``, so they sit below ``kvreg.store.home`` and the
object store can use them without an import loop. ``kvreg.store.home.Home`` is a
``Layout`` that also hands out the stores. This module does not choose the root
(``home.resolve_root`` does), and reads or writes no file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Self

from kvreg.core.errors import StoreError
from kvreg.fileio.atomicfile import ensure_dir, fsync_dir

log = logging.getLogger(__name__)

_DIRS = ("objects", "envelopes", "refs", "logs", "tmp", "quarantine", "keys", "cache")
_PRIVATE = frozenset({"keys"})


class Layout:
    """The folders and files of the store at ``root`` (an absolute path)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    # --- folders and files ----------------------------------------------------

    @property
    def objects_dir(self) -> Path:
        return self.root / "objects"

    @property
    def envelopes_dir(self) -> Path:
        return self.root / "envelopes"

    @property
    def refs_dir(self) -> Path:
        return self.root / "refs"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def quarantine_dir(self) -> Path:
        return self.root / "quarantine"

    @property
    def keys_dir(self) -> Path:
        return self.root / "keys"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    @property
    def trust_path(self) -> Path:
        return self.root / "trust.json"

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def probes_dir(self) -> Path:
        """``cache/probes/``: the witness probes that passed on this host (``kvreg.store.probes``)."""
        return self.cache_dir / "probes"

    @property
    def paging_dir(self) -> Path:
        """``cache/paging/``: eviction's runtime state (the access log, leases, their locks)."""
        return self.cache_dir / "paging"

    def ensure(self) -> Self:
        """Create the root and every folder of the layout (idempotent, and durable: the root's
        entry and the folders' are fsynced when new); return self."""
        try:
            ensure_dir(self.root)
            created = False
            for name in _DIRS:
                d = self.root / name
                created = created or not d.is_dir()
                if name in _PRIVATE:
                    d.mkdir(mode=0o700, exist_ok=True)
                    d.chmod(0o700)
                else:
                    d.mkdir(exist_ok=True)
            if created:
                fsync_dir(self.root)
        except OSError as exc:
            raise StoreError(f"cannot create the kvreg store at {self.root}: {exc}") from exc
        log.debug("store layout ready at %s", self.root)
        return self
