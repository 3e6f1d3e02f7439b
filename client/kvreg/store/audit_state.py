"""What a store remembers of each remote's audit log: ``$KVREG_HOME/remotes/<name>.json``.

One state file per remote (written atomically, under a lock ``remotes/.<name>.lock``)::

    {"format": "kvreg.remote-log/v1", "remote": "origin", "url": "https://...",
     "verifier_key": "kvreg-log-...+1a2b3c4d+AQ...", "pinned_at": TIME,
     "pinned_by": "first-contact" | "remote add --log-key",
     "checkpoint": "<the last signed note this store verified>" | null, "updated_at": TIME,
     "refs": {"ns/name": {"index": N, "digest": D}}}

``refs`` keeps, per ref, the highest audit entry this store proved for it (at most
:data:`MAX_STORED_REFS`; the refs proven longest ago are dropped first). The stored
note is verified again with the pinned key whenever it is read, so an edited state
file is refused (``SignatureError``); any other damage is a ``ConfigError``.

This module reads and writes these files only: when to pin, what to check and when
to save are ``kvreg.remote.auditlog``'s; the checks themselves ``kvreg.core.logverify``'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.core.checkpoint import Checkpoint, NoteVerifier, verify_signed_checkpoint
from kvreg.core.errors import ConfigError, SignatureError, StoreError
from kvreg.core.logverify import parse_log_key, parse_verifier
from kvreg.core.remote_names import validate_remote_name
from kvreg.core.timestamps import rfc3339
from kvreg.fileio.atomicfile import atomic_write_bytes, remove_quietly
from kvreg.store.home import Home
from kvreg.store.jsonfile import lock_file

log = logging.getLogger(__name__)

__all__ = ["MAX_STORED_REFS", "STATE_DIR", "STATE_FORMAT", "RemoteLogState", "RemoteLogStore"]

STATE_FORMAT = "kvreg.remote-log/v1"
STATE_DIR = "remotes"
_STATE_MODE = 0o644
_MAX_STATE_BYTES = 1 << 20
MAX_STORED_REFS = 2000  # per remote in the state file; beyond, the refs proven longest ago are dropped


@dataclass(frozen=True)
class RemoteLogState:
    """What this store remembers of one remote's log: the pinned key and the last verified checkpoint."""

    remote: str
    url: str
    verifier: NoteVerifier
    pinned_at: str
    pinned_by: str
    note: str | None = None
    checkpoint: Checkpoint | None = None
    updated_at: str | None = None
    refs: dict[str, tuple[int, str]] = field(default_factory=dict)  # "ns/name" -> (entry index, digest)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": STATE_FORMAT,
            "remote": self.remote,
            "url": self.url,
            "verifier_key": self.verifier.to_text(),
            "pinned_at": self.pinned_at,
            "pinned_by": self.pinned_by,
            "checkpoint": self.note,
            "updated_at": self.updated_at,
        }
        if self.refs:
            doc["refs"] = {ref: {"index": i, "digest": d} for ref, (i, d) in sorted(self.refs.items())}
        return doc

    def with_checkpoint(self, note: str, checkpoint: Checkpoint, url: str) -> RemoteLogState:
        return RemoteLogState(
            self.remote,
            url,
            self.verifier,
            self.pinned_at,
            self.pinned_by,
            note,
            checkpoint,
            rfc3339(),
            self.refs,
        )

    def with_refs(self, refs: dict[str, tuple[int, str]]) -> RemoteLogState:
        """This state with ``refs`` merged in (the higher index wins), capped at ``MAX_STORED_REFS``."""
        merged = dict(self.refs)
        for ref, (i, d) in refs.items():
            if ref not in merged or merged[ref][0] < i:
                merged[ref] = (i, d)
        if len(merged) > MAX_STORED_REFS:
            kept = sorted(merged.items(), key=lambda kv: kv[1][0])[-MAX_STORED_REFS:]
            merged = dict(kept)
        return RemoteLogState(
            self.remote,
            self.url,
            self.verifier,
            self.pinned_at,
            self.pinned_by,
            self.note,
            self.checkpoint,
            self.updated_at,
            merged,
        )


class RemoteLogStore:
    """The state files ``$KVREG_HOME/remotes/<name>.json`` of one store."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.dir = home.root / STATE_DIR

    def path(self, name: str) -> Path:
        return self.dir / f"{validate_remote_name(name)}.json"

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """An exclusive lock around a read-modify-write of ``name``'s state."""
        with lock_file(self.dir / f".{validate_remote_name(name)}.lock"):
            yield

    def load(self, name: str) -> RemoteLogState | None:
        """The state of ``name`` (None: nothing pinned); its stored note is verified with the pinned key."""
        path = self.path(name)
        try:
            with path.open("rb") as f:
                data = f.read(_MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
        hint = f"remove it and pin again deliberately: kvreg remote add {name} URL --replace"
        if len(data) > _MAX_STATE_BYTES:
            raise ConfigError(f"{path} is larger than {_MAX_STATE_BYTES} bytes", hint=hint)
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"{path} is not valid JSON", hint=hint) from e
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
            raise ConfigError(f"{path} is not a {STATE_FORMAT} file", hint=hint)
        strings = ("url", "verifier_key", "pinned_at", "pinned_by")
        if any(not isinstance(doc.get(k), str) for k in strings) or doc.get("remote") != name:
            raise ConfigError(f"{path} is malformed", hint=hint)
        try:
            verifier = parse_verifier(doc["verifier_key"])
        except SignatureError as e:
            raise ConfigError(f"{path}: {e.message}", hint=hint) from e
        note = doc.get("checkpoint")
        checkpoint = None
        if note is not None:
            if not isinstance(note, str):
                raise ConfigError(f"{path}: 'checkpoint' must be a signed note or null", hint=hint)
            try:
                checkpoint = verify_signed_checkpoint(note, verifier)
            except SignatureError as e:
                raise SignatureError(
                    f"the checkpoint stored in {path} does not verify with the key pinned for {name!r}: "
                    f"{e.message}",
                    hint=f"someone edited this store's state; {hint}",
                    remote=name,
                ) from e
        updated = doc.get("updated_at")
        return RemoteLogState(
            name,
            doc["url"],
            verifier,
            doc["pinned_at"],
            doc["pinned_by"],
            note,
            checkpoint,
            updated if isinstance(updated, str) else None,
            _parse_refs(doc.get("refs", {}), path, hint),
        )

    def write(self, state: RemoteLogState) -> None:
        data = (json.dumps(state.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        try:
            atomic_write_bytes(self.path(state.remote), data, mode=_STATE_MODE)
        except StoreError as e:
            raise ConfigError(f"cannot write {self.path(state.remote)}: {e.message}") from e

    def pin(
        self, name: str, url: str, verifier_key: str, *, by: str = "remote add --log-key"
    ) -> RemoteLogState:
        """Pin ``verifier_key`` for ``name``, forgetting any previous pin and checkpoint."""
        verifier = parse_log_key(verifier_key)
        state = RemoteLogState(name, url, verifier, rfc3339(), by)
        with self.lock(name):
            self.write(state)
        log.info("pinned log key %s for remote %s", verifier.to_text(), name)
        return state

    def reset(self, name: str) -> bool:
        """Forget ``name``'s pinned key and checkpoint (a human decision); True if there was a pin."""
        path = self.path(name)
        with self.lock(name):
            existed = path.exists()
            remove_quietly(path)
        if existed:
            log.info("forgot the pinned log key and checkpoint of remote %s", name)
        return existed


def _parse_refs(value: Any, path: Path, hint: str) -> dict[str, tuple[int, str]]:
    """The ``refs`` of a state file: ``{"ns/name": {"index": N, "digest": D}}``."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: 'refs' must be an object", hint=hint)
    out: dict[str, tuple[int, str]] = {}
    for ref, item in value.items():
        index = item.get("index") if isinstance(item, dict) else None
        digest = item.get("digest") if isinstance(item, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or index < 0 or not isinstance(digest, str):
            raise ConfigError(f"{path}: refs[{ref!r}] must be {{'index': N, 'digest': D}}", hint=hint)
        out[str(ref)] = (index, digest)
    return out
