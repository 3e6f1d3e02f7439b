"""The registry's audit log as this client checks it on every contact: a pinned key, the last checkpoint.

A registry logs every state change as a leaf of an append-only RFC 6962 Merkle
tree and signs checkpoints ``(origin, size, root)`` as C2SP signed notes
(``kvreg.core.checkpoint``). This module makes a client hold the registry to
that history.

**Pinning.** Each remote has a state file ``$KVREG_HOME/remotes/<name>.json``
(written atomically, under a lock ``remotes/.<name>.lock``)::

    {"format": "kvreg.remote-log/v1", "remote": "origin", "url": "https://...",
     "verifier_key": "kvreg-log-...+1a2b3c4d+AQ...", "pinned_at": TIME,
     "pinned_by": "first-contact" | "remote add --log-key",
     "checkpoint": "<the last signed note this store verified>" | null, "updated_at": TIME}

The key is pinned on first contact (trust on first use: ``GET /log/key``) unless
``kvreg remote add NAME URL --log-key KEY`` pinned one learned out of band. From
then on a checkpoint not signed by the pinned key is a ``SignatureError``; only a
deliberate ``kvreg remote add NAME URL --replace`` (or ``remote remove``) forgets
the pin. The stored note is verified again with the pinned key whenever it is
read, so an edited state file is refused too.

**Every contact** (push, pull, ls-remote, login, audit) first calls
:meth:`RemoteLog.check`: ``GET /log/checkpoint``, the signature with the pinned
key, the origin, then against the stored checkpoint ``(m, r)``: a smaller size is
a log that shrank (a reset to an older state, or a fork shown to this client); the
same size with another root is a fork; a larger size needs ``GET
/log/proof/consistency?first=m&second=n`` (``second`` explicit, since the log may
grow meanwhile), verified against the roots of the two *signed* checkpoints,
never against the root the proof answer carries. Any failure raises
``LogInconsistentError`` or ``SignatureError`` (exit 3) naming the remote.

**Nothing is stored by a command that fails.** The new checkpoint is kept in
memory and written by :meth:`RemoteLog.save`, which the commands call after
everything else succeeded (:func:`contact` does). Not storing a newer, verified
checkpoint loses nothing: the next contact proves consistency from the older one.
When another process stored a different checkpoint meanwhile, ``save`` proves
the two consistent before keeping the larger.

**Push and pull** prove their own change: :meth:`RemoteLog.prove` reads each
audit entry they name (``log_index`` answers, ``X-Kvreg-Log-Index``), checks that
it says what was done (type, namespace, ref, digests), takes a fresh checkpoint
that includes it (itself checked against the previous one), and verifies the
entry's inclusion proof against that checkpoint's root. A registry that keeps
entries private (``/log/entries`` answers 401/403 without a suitable token) still
proves the *leaf* it names to be in the signed log; the report then says that
the entry's content was not checked (``entry_checked: false``).

**Whole logs** (``kvreg audit verify``, ``kvreg audit export``) are
``kvreg.remote.auditexport``'s.

This module does not print (``kvreg.cli.audit`` and ``kvreg.cli.remote`` render
its reports) and does not configure remotes (``kvreg.remote.config``).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.core.atomicfile import atomic_write_bytes, remove_quietly
from kvreg.core.canonical import parse_json_object
from kvreg.core.checkpoint import Checkpoint, NoteVerifier, verify_signed_checkpoint
from kvreg.core.errors import (
    ConfigError,
    ForbiddenError,
    IntegrityError,
    LogInconsistentError,
    MerkleProofError,
    NotFoundError,
    SignatureError,
    StoreError,
    UnauthenticatedError,
    UsageError,
)
from kvreg.core.merkle import leaf_hash, verify_consistency, verify_inclusion
from kvreg.remote.config import connect, validate_remote_name
from kvreg.remote.http import LogProof, RegistryClient
from kvreg.store.home import Home
from kvreg.store.jsonfile import lock_file

log = logging.getLogger(__name__)

__all__ = [
    "REF_TYPES",
    "STATE_FORMAT",
    "EntryClaim",
    "LogInconsistentError",
    "RemoteLog",
    "RemoteLogState",
    "RemoteLogStore",
    "b64",
    "contact",
    "envelope_claim",
    "now",
    "parse_entry",
    "parse_log_key",
    "parse_verifier",
    "ref_claim",
    "verify_advance",
]

STATE_FORMAT = "kvreg.remote-log/v1"
STATE_DIR = "remotes"
MAX_ENTRY_BYTES = 1 << 20
_STATE_MODE = 0o644
_MAX_STATE_BYTES = 1 << 20
REF_TYPES = frozenset({"ref.created", "ref.moved", "tag.created"})


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _where(name: str | None, url: str | None) -> str:
    if name and url:
        return f"registry {name!r} ({url})"
    return f"registry {name or url or '?'}"


def _repin_hint(name: str | None, url: str | None, path: Path | None) -> str:
    kept = f"; the last checkpoint this store verified is in {path}" if path is not None else ""
    return (
        "do not trust what it serves and tell its operators" + kept + ". Only if they changed the "
        f"registry on purpose and you checked its new log key out of band: kvreg remote add {name or 'NAME'} "
        f"{url or 'URL'} --replace --log-key KEY"
    )


# --- the per-remote state file ----------------------------------------------------------------


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

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "remote": self.remote,
            "url": self.url,
            "verifier_key": self.verifier.to_text(),
            "pinned_at": self.pinned_at,
            "pinned_by": self.pinned_by,
            "checkpoint": self.note,
            "updated_at": self.updated_at,
        }

    def with_checkpoint(self, note: str, checkpoint: Checkpoint, url: str) -> RemoteLogState:
        return RemoteLogState(
            self.remote, url, self.verifier, self.pinned_at, self.pinned_by, note, checkpoint, now()
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
        state = RemoteLogState(name, url, verifier, now(), by)
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


def parse_verifier(text: str) -> NoteVerifier:
    """A C2SP verifier key ``NAME+KEYID+KEY`` from an answer or a file; raises ``SignatureError``."""
    if not isinstance(text, str):
        raise SignatureError("a verifier key is text")
    return NoteVerifier.from_text(text)


def parse_log_key(text: str) -> NoteVerifier:
    """A log key given by a person (``NAME+KEYID+KEY``); ``UsageError`` when malformed."""
    try:
        return parse_verifier(text)
    except SignatureError as e:
        raise UsageError(
            f"invalid log key: {e.message}",
            hint="a log key is NAME+KEYID+KEY, as GET /api/v1/log/key answers in 'verifier_key' "
            "(kvreg audit show REMOTE prints it)",
        ) from e


# --- checkpoints --------------------------------------------------------------------------------


ProofFetcher = Callable[[int, int], LogProof]


def verify_advance(
    old: Checkpoint | None, new: Checkpoint, fetch_consistency: ProofFetcher, *, where: str = "the registry"
) -> None:
    """Check that the signed checkpoint ``new`` extends the verified ``old``; raise ``LogInconsistentError``.

    ``fetch_consistency(m, n)`` answers the registry's consistency proof from size
    ``m`` to size ``n``; it is verified against the two signed roots.
    """
    if old is None or old.size == 0:
        return  # every log extends the empty one
    if new.origin != old.origin:
        raise LogInconsistentError(
            f"{where}: its checkpoint names the log {new.origin!r}, not {old.origin!r}"
        )
    if new.size < old.size:
        raise LogInconsistentError(
            f"{where}: the audit log shrank from {old.size} to {new.size} entries since this store last saw "
            "it: the registry was reset to an older state, or shows this client a fork of its history",
            old_size=old.size,
            new_size=new.size,
        )
    if new.size == old.size:
        if new.root != old.root:
            raise LogInconsistentError(
                f"{where}: two different logs of {new.size} entries (roots {b64(old.root)} and "
                f"{b64(new.root)}): the registry forked or rewrote its history",
                size=new.size,
            )
        return
    proof = fetch_consistency(old.size, new.size)
    if proof.size != new.size:
        raise LogInconsistentError(
            f"{where}: asked for a consistency proof to size {new.size}, it answered one to size {proof.size}"
        )
    try:
        verify_consistency(old.size, new.size, old.root, new.root, proof.hashes)
    except MerkleProofError as e:
        raise LogInconsistentError(
            f"{where}: its audit log of {new.size} entries does not extend the log of {old.size} entries "
            f"this store verified before: the registry rewrote its history ({e.message})",
            old_size=old.size,
            new_size=new.size,
        ) from e


# --- entries and claims -----------------------------------------------------------------------


def parse_entry(entry: bytes, index: int) -> dict[str, Any]:
    """An audit entry's JSON, checked to be an object whose ``seq`` is its position ``index``."""
    doc = parse_json_object(
        entry, what=f"audit entry {index}", max_bytes=MAX_ENTRY_BYTES, error=LogInconsistentError
    )
    if doc.get("seq") != index or isinstance(doc.get("seq"), bool):
        raise LogInconsistentError(
            f"audit entry at position {index} says it is entry {doc.get('seq')!r}: "
            "the log was reordered or edited",
            index=index,
        )
    if not isinstance(doc.get("type"), str):
        raise LogInconsistentError(f"audit entry {index} has no type")
    return doc


_ANY: Any = object()


@dataclass(frozen=True)
class EntryClaim:
    """What one audit entry must say: its index and the fields of the change it records.

    ``old``/``new`` left at their default are not checked; ``None`` there means the
    entry must say null.
    """

    index: int | None
    what: str
    types: frozenset[str]
    namespace: str
    subject: str | None = None
    ref: str | None = None
    old: Any = _ANY
    new: Any = _ANY

    def mismatch(self, doc: dict[str, Any]) -> str | None:
        """Why ``doc`` does not record this change, or None when it does."""
        if doc.get("type") not in self.types:
            return f"it is a {doc.get('type')!r} entry, not {' or '.join(sorted(self.types))}"
        if doc.get("namespace") != self.namespace:
            return f"it is about namespace {doc.get('namespace')!r}, not {self.namespace!r}"
        subjects = doc.get("subjects")
        if self.subject is not None and (not isinstance(subjects, list) or self.subject not in subjects):
            return f"its subjects do not include {self.subject}"
        details = doc.get("details")
        if self.ref is not None and (not isinstance(details, dict) or details.get("ref") != self.ref):
            got = details.get("ref") if isinstance(details, dict) else None
            return f"it is about ref {got!r}, not {self.ref!r}"
        if self.old is not _ANY and doc.get("old") != self.old:
            return f"it says the old value was {doc.get('old')!r}, not {self.old!r}"
        if self.new is not _ANY and doc.get("new") != self.new:
            return f"it says the new value is {doc.get('new')!r}, not {self.new!r}"
        return None


def ref_claim(
    index: int | None,
    namespace: str,
    name: str,
    digest: str,
    *,
    created: bool | None = None,
    tag: bool = False,
    old: str | None = None,
) -> EntryClaim:
    """The entry of a ref change to ``digest``: exactly this change when ``created`` is given
    (True: created, ``tag.created`` for a tag; False: moved from ``old``), else the ref's latest change."""
    ref = f"{namespace}/{name}"
    if created is None:
        return EntryClaim(index, f"ref {ref} -> {digest}", REF_TYPES, namespace, digest, ref, new=digest)
    if created:
        types = frozenset({"tag.created" if tag else "ref.created"})
        return EntryClaim(
            index, f"ref {ref} created at {digest}", types, namespace, digest, ref, None, digest
        )
    return EntryClaim(
        index,
        f"ref {ref} moved {old} -> {digest}",
        frozenset({"ref.moved"}),
        namespace,
        digest,
        ref,
        old,
        digest,
    )


def envelope_claim(index: int | None, namespace: str, digest: str) -> EntryClaim:
    """The entry that logged the envelope of manifest ``digest`` in ``namespace``."""
    return EntryClaim(
        index, f"envelope {namespace}@{digest}", frozenset({"envelope.stored"}), namespace, digest
    )


# --- the log of one remote during one command -------------------------------------------------------


class RemoteLog:
    """The audit log of the remote ``name``, checked through ``client`` for the length of one command.

    :meth:`check` verifies the registry's current checkpoint against the pinned key
    and the stored checkpoint (once; later calls return it); :meth:`refresh` takes a
    newer one, consistent with it; :meth:`prove` verifies entries; :meth:`save`
    stores the newest verified checkpoint (call it only when the command succeeded).
    """

    def __init__(self, home: Home, name: str, client: RegistryClient) -> None:
        self.home = home
        self.name = validate_remote_name(name)
        self.client = client
        self.store = RemoteLogStore(home)
        self.base: RemoteLogState | None = None
        self.verifier: NoteVerifier | None = None
        self.note: str | None = None
        self.current: Checkpoint | None = None
        self.enabled = True
        self._checked = False
        self._new_pin = False

    @property
    def where(self) -> str:
        return _where(self.name, self.client.base_url)

    @property
    def state_path(self) -> Path:
        return self.store.path(self.name)

    @property
    def previous(self) -> Checkpoint | None:
        """The checkpoint this store had verified before this command."""
        return None if self.base is None else self.base.checkpoint

    def _fetch_note(self) -> str:
        try:
            return self.client.log_checkpoint()
        except IntegrityError as e:  # the registry's own consistency check refused to sign
            raise LogInconsistentError(
                f"{self.where} refuses to sign a checkpoint of its audit log: {e.message}",
                hint="its database no longer holds the history it signed before; tell its operators",
                remote=self.name,
            ) from e
        except NotFoundError as e:
            if e.code != "NOT_FOUND":
                raise
            raise LogInconsistentError(
                f"{self.where} no longer publishes its audit log (this store pinned its log key)",
                hint=_repin_hint(self.name, self.client.base_url, self.state_path),
                remote=self.name,
            ) from e

    def _verify_note(self, note: str) -> Checkpoint:
        assert self.verifier is not None
        try:
            checkpoint = verify_signed_checkpoint(note, self.verifier)
        except SignatureError as e:
            raise SignatureError(
                f"{self.where}: {e.message}",
                hint=_repin_hint(self.name, self.client.base_url, self.state_path),
                remote=self.name,
                pinned_key=self.verifier.to_text(),
            ) from e
        if checkpoint.origin != self.verifier.name:
            raise SignatureError(
                f"{self.where}: its checkpoint names the log {checkpoint.origin!r}, not the pinned "
                f"{self.verifier.name!r}",
                remote=self.name,
            )
        return checkpoint

    def _consistency(self, first: int, second: int) -> LogProof:
        return self.client.log_consistency_proof(first, second)

    def _advance(self, old: Checkpoint | None, new: Checkpoint) -> None:
        try:
            verify_advance(old, new, self._consistency, where=self.where)
        except LogInconsistentError as e:
            if e.hint is None:
                e.hint = _repin_hint(self.name, self.client.base_url, self.state_path)
            e.details.setdefault("remote", self.name)
            raise

    def check(self) -> Checkpoint | None:
        """The registry's current checkpoint, verified; None when it publishes no log and none is pinned."""
        if self._checked:
            return self.current
        self.base = self.store.load(self.name)
        if self.base is None:
            try:
                key = self.client.log_key()
            except NotFoundError as e:
                if e.code != "NOT_FOUND":
                    raise
                log.warning(
                    "%s publishes no audit log: its history cannot be verified (nothing pinned)", self.where
                )
                self.enabled = False
                self._checked = True
                return None
            try:
                self.verifier = parse_verifier(key.verifier_key)
            except SignatureError as e:
                raise SignatureError(f"{self.where} sent a malformed log key: {e.message}") from e
            if key.origin != self.verifier.name:
                raise SignatureError(
                    f"{self.where}: its log key names {self.verifier.name!r} but its origin is {key.origin!r}"
                )
            self._new_pin = True
            log.info("first contact with %s: pinning its log key %s", self.where, self.verifier.to_text())
        else:
            self.verifier = self.base.verifier
        note = self._fetch_note()
        checkpoint = self._verify_note(note)
        self._advance(self.previous, checkpoint)
        self.note, self.current = note, checkpoint
        self._checked = True
        return checkpoint

    def refresh(self) -> Checkpoint | None:
        """A newer checkpoint (after a change, or for an entry the current one lacks), consistent with it."""
        if not self._checked:
            return self.check()
        if not self.enabled:
            return None
        note = self._fetch_note()
        checkpoint = self._verify_note(note)
        self._advance(self.current, checkpoint)
        self.note, self.current = note, checkpoint
        return checkpoint

    def prove(self, claims: Sequence[EntryClaim]) -> dict[str, Any]:
        """Verify that each claim's entry says what it claims and is in a signed checkpoint.

        Returns a report for the command's output; raises ``LogInconsistentError``
        (exit 3) when an entry says something else or its proof does not verify.
        """
        checkpoint = self.check()
        if checkpoint is None:
            return {"verified": False, "reason": "the registry publishes no audit log"}
        notes: list[str] = []
        indexed = [c for c in claims if c.index is not None]
        for c in claims:
            if c.index is None:
                notes.append(f"the registry names no audit entry for {c.what}")
                log.warning("%s names no audit entry for %s: not verified", self.where, c.what)
        needed = max((c.index for c in indexed if c.index is not None), default=-1) + 1
        if checkpoint.size < needed:
            checkpoint = self.refresh()
            assert checkpoint is not None
            if checkpoint.size < needed:
                raise LogInconsistentError(
                    f"{self.where}: entry {needed - 1} is not in its signed log of {checkpoint.size} entries",
                    remote=self.name,
                )
        entries: list[dict[str, Any]] = []
        for c in indexed:
            assert c.index is not None
            entries.append(self._prove_one(c, c.index, checkpoint, notes))
        return {
            "verified": True,
            "checkpoint": {
                "size": checkpoint.size,
                "root": b64(checkpoint.root),
                "origin": checkpoint.origin,
            },
            "previous_size": None if self.previous is None else self.previous.size,
            "entries": entries,
            "notes": notes,
        }

    def _prove_one(
        self, claim: EntryClaim, i: int, checkpoint: Checkpoint, notes: list[str]
    ) -> dict[str, Any]:
        entry: bytes | None = None
        try:
            page = self.client.log_entries(i, i + 1)
        except (UnauthenticatedError, ForbiddenError):
            notes.append(
                f"entry {i} ({claim.what}) could not be read without a token: its content was not checked"
            )
            log.warning(
                "%s: audit entry %d is not readable without a token; only its inclusion is verified",
                self.where,
                i,
            )
        else:
            if not page.entries:
                raise LogInconsistentError(f"{self.where} does not serve audit entry {i} ({claim.what})")
            entry = page.entries[0].entry
        doc: dict[str, Any] | None = None
        if entry is not None:
            doc = parse_entry(entry, i)
            why = claim.mismatch(doc)
            if why is not None:
                raise LogInconsistentError(
                    f"{self.where}: audit entry {i} does not record {claim.what}: {why}",
                    hint="the registry logs something other than what it did; tell its operators",
                    remote=self.name,
                    index=i,
                )
        proof = self.client.log_inclusion_proof(i, checkpoint.size)
        if proof.size != checkpoint.size:
            raise LogInconsistentError(
                f"{self.where}: asked for the inclusion proof of entry {i} at size {checkpoint.size}, "
                f"it answered one at size {proof.size}"
            )
        leaf = leaf_hash(entry) if entry is not None else proof.leaf_hash
        assert leaf is not None
        try:
            verify_inclusion(leaf, i, checkpoint.size, proof.hashes, checkpoint.root)
        except MerkleProofError as e:
            raise LogInconsistentError(
                f"{self.where}: audit entry {i} ({claim.what}) is not in its signed log of {checkpoint.size} "
                f"entries as served: the entry was edited or the log rewritten ({e.message})",
                hint="the registry serves an entry its signed log does not hold; tell its operators",
                remote=self.name,
                index=i,
            ) from e
        return {
            "index": i,
            "what": claim.what,
            "type": None if doc is None else doc.get("type"),
            "entry_checked": entry is not None,
            "included_in": checkpoint.size,
        }

    def save(self) -> None:
        """Store the newest verified checkpoint (and a first-contact pin), merging with other processes."""
        if not self._checked or not self.enabled or self.current is None or self.note is None:
            return
        assert self.verifier is not None
        url = self.client.base_url
        with self.store.lock(self.name):
            stored = self.store.load(self.name)
            if stored is None:
                if not self._new_pin:  # forgotten meanwhile (remote removed or replaced): do not re-pin
                    return
                t = now()
                state = RemoteLogState(
                    self.name, url, self.verifier, t, "first-contact", self.note, self.current, t
                )
                self.store.write(state)
                return
            if stored.verifier != self.verifier:
                log.warning(
                    "the log key of %s was re-pinned meanwhile; not storing this checkpoint", self.where
                )
                return
            theirs = stored.checkpoint
            if theirs == self.current:
                return
            if theirs is not None and theirs != self.previous:
                # Another process stored a checkpoint this one never compared with: prove them consistent.
                if theirs.size > self.current.size:
                    self._advance(self.current, theirs)
                    return
                self._advance(theirs, self.current)
            self.store.write(stored.with_checkpoint(self.note, self.current, url))

    def summary(self) -> dict[str, Any]:
        """The pin and the checkpoints of this command, for output."""
        return {
            "remote": self.name,
            "url": self.client.base_url,
            "audit_log": self.enabled,
            "origin": None if self.verifier is None else self.verifier.name,
            "verifier_key": None if self.verifier is None else self.verifier.to_text(),
            "pinned": self.base is not None,
            "pinned_at": None if self.base is None else self.base.pinned_at,
            "pinned_by": None if self.base is None else self.base.pinned_by,
            "first_contact": self._new_pin,
            "previous_size": None if self.previous is None else self.previous.size,
            "size": None if self.current is None else self.current.size,
            "root": None if self.current is None else b64(self.current.root),
            "checkpoint": self.note,
            "state_file": str(self.state_path),
        }


@contextlib.contextmanager
def contact(home: Home, name: str, **client_options: Any) -> Iterator[tuple[RegistryClient, RemoteLog]]:
    """A client for the remote ``name`` and its :class:`RemoteLog`; the checkpoint is saved only when
    the block finishes without an exception (the block calls ``check`` or ``prove``)."""
    with connect(home, name, **client_options) as client:
        audit = RemoteLog(home, name, client)
        yield client, audit
        audit.save()
