"""Where the local store lives (``$KVREG_HOME``) and what its folders are.

The root is, in order: an explicit path, ``$KVREG_HOME``, ``~/.kvreg``. Layout::

    objects/ab/<62 hex>        content-addressed objects (read-only files)
    envelopes/ab/<64 hex>.json signed DSSE envelopes, by manifest digest
    refs/<ns>/<name>           refs and tags; refs/.lock serializes changes
    logs/refs/<ns>/<name>      reflogs (JSON lines)
    tmp/                       *.incomplete temp files (same filesystem)
    quarantine/<hex>.<time>    damaged objects moved aside by fsck, never deleted
    keys/                      signing keys (mode 0700)
    cache/                     rebuildable caches
    trust.json, config.json    trust policy and configuration (remotes included)
    credentials.json           registry tokens (mode 0600)
    remotes/<name>.json        a remote's pinned audit-log key and last checkpoint

Nothing is created on construction: the stores create their folders on first
write, and :meth:`Home.ensure` creates the whole layout at once (``kvreg init``).
This module does not read ``trust.json`` or ``config.json``; it only says where
they are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from kvreg.core.errors import StoreError
from kvreg.store.envelopes import EnvelopeStore
from kvreg.store.objects import ObjectStore
from kvreg.store.refs import RefStore

log = logging.getLogger(__name__)

ENV_VAR = "KVREG_HOME"
DEFAULT_DIRNAME = ".kvreg"

_DIRS = ("objects", "envelopes", "refs", "logs", "tmp", "quarantine", "keys", "cache")
_PRIVATE = frozenset({"keys"})


def resolve_root(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Path:
    """The store root: ``path``, else ``$KVREG_HOME``, else ``~/.kvreg``; absolute, ``~`` expanded."""
    env = os.environ if environ is None else environ
    if path is not None and str(path) != "":
        chosen = Path(path)
    elif env.get(ENV_VAR):
        chosen = Path(env[ENV_VAR])
    else:
        chosen = Path.home() / DEFAULT_DIRNAME
    return Path(os.path.abspath(chosen.expanduser()))  # noqa: PTH100 (no symlink resolution wanted)


class Home:
    """The local store root and its parts. Cheap to construct; touches the disk lazily."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> None:
        self.root = resolve_root(path, environ=environ)

    def __repr__(self) -> str:
        return f"Home({str(self.root)!r})"

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

    def ensure(self) -> Home:
        """Create the root and every folder of the layout (idempotent); return self."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for name in _DIRS:
                d = self.root / name
                if name in _PRIVATE:
                    d.mkdir(mode=0o700, exist_ok=True)
                    d.chmod(0o700)
                else:
                    d.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the kvreg store at {self.root}: {exc}") from exc
        log.debug("store layout ready at %s", self.root)
        return self

    # --- stores ---------------------------------------------------------------

    @cached_property
    def objects(self) -> ObjectStore:
        return ObjectStore(self.root)

    @cached_property
    def refs(self) -> RefStore:
        return RefStore(self.root)

    @cached_property
    def envelopes(self) -> EnvelopeStore:
        return EnvelopeStore(self.root)
