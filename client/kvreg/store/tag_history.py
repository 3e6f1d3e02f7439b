"""The tags this store has seen on each OCI remote: ``$KVREG_HOME/remotes/<name>.tags.json``.

An OCI registry keeps no transparency log, so nothing proves that a tag was never
moved back to an older signed artifact: a registry (or whoever can write to it)
could serve yesterday's validly signed answer. The client recovers part of that
protection on its own: per repository and tag it remembers the kvreg manifest
digests it has seen there, in the order it saw them, with their ``created`` times::

    {"format": "kvreg.oci-tags/v1", "remote": "hub",
     "tags": {"kv/ns:name": [{"digest": D, "created": T | null, "seen_at": T}, ...]}}

:meth:`TagHistory.check` refuses (``RefRollbackError``, exit 3) a tag found at a
digest seen earlier and replaced since, or at an artifact whose ``created`` is
older than the newest seen for that tag. :meth:`TagHistory.record` appends what a
push or pull accepted (an accepted older artifact, ``--allow-rollback`` or a push
of it, drops the newer entries: the user chose it). Writes are atomic, under a
lock; at most :data:`MAX_ENTRIES` digests are kept per tag and
:data:`MAX_TAGS` tags per remote (the oldest go first). A first pull of a tag
has nothing to compare with (trust on first use).

This module reads and writes the file; ``kvreg.remote.oci.pulling`` decides when.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvreg.core.digest import Digest, is_digest
from kvreg.core.errors import ConfigError, RefRollbackError, UsageError
from kvreg.core.remote_names import validate_remote_name
from kvreg.core.timestamps import parse_rfc3339, rfc3339
from kvreg.store import jsonfile
from kvreg.store.home import Home

log = logging.getLogger(__name__)

__all__ = ["FORMAT", "MAX_ENTRIES", "MAX_TAGS", "TagHistory"]

FORMAT = "kvreg.oci-tags/v1"
DIR = "remotes"
MAX_ENTRIES = 64
MAX_TAGS = 5000
_MODE = 0o644


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_rfc3339(text)
    except (UsageError, ValueError):
        return None


class TagHistory:
    """The tags seen on one OCI remote (see the module docstring)."""

    def __init__(self, home: Home, remote: str) -> None:
        self.home = home
        self.remote = validate_remote_name(remote)
        self.path: Path = home.root / DIR / f"{remote}.tags.json"

    def __repr__(self) -> str:
        return f"TagHistory({str(self.path)!r})"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with jsonfile.lock_file(self.path.parent / f".{self.remote}.tags.lock"):
            yield

    def _load(self) -> dict[str, list[dict[str, Any]]]:
        doc = jsonfile.read_object(self.path, "tag history")
        if not doc:
            return {}
        tags = doc.get("tags")
        if doc.get("format") != FORMAT or not isinstance(tags, dict):
            raise ConfigError(
                f"tag history {self.path} is not a {FORMAT} file",
                hint=f"remove {self.path} (the client forgets the tags it saw on {self.remote})",
            )
        out: dict[str, list[dict[str, Any]]] = {}
        for key, entries in tags.items():
            if isinstance(key, str) and isinstance(entries, list):
                out[key] = [e for e in entries if isinstance(e, dict) and is_digest(e.get("digest"))]
        return out

    @staticmethod
    def key(repository: str, tag: str) -> str:
        return f"{repository}:{tag}"

    def seen(self, repository: str, tag: str) -> list[dict[str, Any]]:
        """The digests seen at ``repository:tag``, oldest first."""
        return self._load().get(self.key(repository, tag), [])

    def repositories(self) -> dict[str, list[Digest]]:
        """Every repository with a tag seen, and the kvreg manifest digests seen there."""
        out: dict[str, list[Digest]] = {}
        for key, entries in self._load().items():
            repo = key.rsplit(":", 1)[0]
            out.setdefault(repo, []).extend(Digest(e["digest"]) for e in entries)
        return out

    def check(self, repository: str, tag: str, digest: Digest, created: str | None) -> None:
        """Refuse (``RefRollbackError``) ``repository:tag`` at ``digest`` if it moved back."""
        entries = self.seen(repository, tag)
        if not entries or entries[-1]["digest"] == str(digest):
            return
        where = f"{repository}:{tag} on {self.remote}"
        for i, e in enumerate(entries[:-1]):
            if e["digest"] == str(digest):
                newer = entries[i + 1]
                raise RefRollbackError(
                    f"{where} moved back to {digest}, which this store saw there before it was replaced by "
                    f"{newer['digest']} (seen {newer.get('seen_at') or '?'}): a rollback to an older "
                    "signed artifact; nothing was written",
                    hint="if the publisher really moved the tag back, pull again with --allow-rollback",
                    ref=where,
                    digest=str(digest),
                    replaced_by=newer["digest"],
                )
        this = _time(created)
        newest = max(
            (e for e in entries if _time(e.get("created")) is not None),
            key=lambda e: _time(e.get("created")) or dt.datetime.min.replace(tzinfo=dt.UTC),
            default=None,
        )
        newest_time = None if newest is None else _time(newest.get("created"))
        if this is not None and newest is not None and newest_time is not None and this < newest_time:
            raise RefRollbackError(
                f"{where} now names an artifact created {created}, older than {newest['digest']} "
                f"(created {newest.get('created')}) seen there before: a rollback; nothing was written",
                hint="if the publisher really moved the tag back, pull again with --allow-rollback",
                ref=where,
                digest=str(digest),
                newest=newest["digest"],
            )

    def record(self, repository: str, tag: str, digest: Digest, created: str | None) -> None:
        """Remember that ``repository:tag`` was accepted at ``digest`` (the latest value)."""
        key = self.key(repository, tag)
        with self._locked():
            tags = self._load()
            entries = [e for e in tags.pop(key, []) if e["digest"] != str(digest)]
            this = _time(created)
            if this is not None:  # accepted: forget newer ones, or they would refuse it next time
                entries = [e for e in entries if (_time(e.get("created")) or this) <= this]
            entries.append({"digest": str(digest), "created": created, "seen_at": rfc3339()})
            tags[key] = entries[-MAX_ENTRIES:]
            while len(tags) > MAX_TAGS:
                tags.pop(next(iter(tags)))
            doc = {"format": FORMAT, "remote": self.remote, "tags": tags}
            jsonfile.write_object(self.path, doc, mode=_MODE, what="tag history")
        log.debug("recorded %s at %s", key, digest)

    def forget(self) -> bool:
        """Remove the whole history of this remote; True if there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
