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
The folders' paths are :class:`kvreg.store.layout.Layout`'s; ``Home`` adds the root's
resolution and the stores. This module does not read ``trust.json`` or
``config.json``; it only says where they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from kvreg.store.envelopes import EnvelopeStore
from kvreg.store.layout import Layout
from kvreg.store.objects import ObjectStore
from kvreg.store.refs import RefStore

ENV_VAR = "KVREG_HOME"
DEFAULT_DIRNAME = ".kvreg"


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


class Home(Layout):
    """The local store root, its folders (:class:`Layout`) and its stores. Cheap to construct;
    touches the disk lazily."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(resolve_root(path, environ=environ))

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
