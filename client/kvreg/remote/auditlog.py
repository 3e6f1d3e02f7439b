"""The registry's audit log as this client checks it on every contact: a pinned key, the last checkpoint.

A registry logs every state change as a leaf of an append-only RFC 6962 Merkle
tree and signs checkpoints ``(origin, size, root)`` as C2SP signed notes
(``kvreg.core.checkpoint``). This module makes a client hold the registry to
that history.

**Pinning.** Each remote has a state file ``$KVREG_HOME/remotes/<name>.json``
(``kvreg.store.audit_state``) holding its pinned log key and last verified checkpoint.
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

**Per-ref rollback.** An entry that names the pulled digest proves only that the
ref *once* pointed there; an older, genuinely signed value of a moved ref proves as
well. So a proven ref entry that stands for the ref's current value (a pull, an
up-to-date push: ``EntryClaim.latest``) is also checked to be the ref's latest
change, two ways. (a) The state file keeps, per ref, the highest entry index (and
its digest) this store proved; an entry below it is ``RefRollbackError`` (exit 3),
whatever else the registry shows. (b) The entries after it, up to the checkpoint
verified at the start of the command (taken before the ref was read, so a move
racing the command is not mistaken for a lie), are read (``GET /log/entries``, at
most :data:`MAX_LATEST_SCAN` entries, i.e. ten pages), authenticated against that
signed checkpoint (the right-hand siblings of the entry's inclusion proof are
recomputed from them) and replayed: if they leave the ref elsewhere, the registry
served an outdated ref: ``RefRollbackError``. Beyond the bound, or when the
entries need a token the client lacks, (b) is skipped and the report's notes say
so; (a) still holds.

**Freeze.** The registry dates every checkpoint it signs (``timestamp`` extension
line, signed afresh on each request). A checkpoint older than the remote's
``max_checkpoint_age`` (``kvreg.remote.remotes``; 24 hours unless set, 0: off) is
``CheckpointStaleError`` (exit 3): a registry, or someone answering for it, that
keeps serving an old state is caught once that age has passed. A checkpoint with
no timestamp is accepted with a warning from a registry that never dated one, and
refused once this store holds a dated one (a downgrade). Timestamps in the future
are accepted (clock skew) and never stored as anything but the note.

**Whole logs** (``kvreg audit verify``, ``kvreg audit export``) are
``kvreg.remote.auditexport``'s.

This module fetches and decides; the checks themselves (signatures, proofs, entries,
claims) are ``kvreg.core.logverify``'s, and the state files ``kvreg.store.audit_state``'s.
It does not print (``kvreg.cli.audit`` and ``kvreg.cli.remote`` render its reports)
and does not configure remotes (``kvreg.remote.remotes``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kvreg.core.checkpoint import Checkpoint, NoteVerifier
from kvreg.core.errors import (
    CheckpointStaleError,
    ForbiddenError,
    IntegrityError,
    LogInconsistentError,
    MerkleProofError,
    NotFoundError,
    RefRollbackError,
    SignatureError,
    UnauthenticatedError,
)
from kvreg.core.logverify import (
    REF_CHANGE_TYPES,
    EntryClaim,
    b64,
    note_timestamp,
    parse_entry,
    parse_verifier,
    replay_ref,
    suffix_problem,
    verify_advance,
)
from kvreg.core.merkle import leaf_hash, verify_inclusion
from kvreg.core.remote_names import validate_remote_name
from kvreg.core.timestamps import rfc3339
from kvreg.remote.api.log import LogProof
from kvreg.remote.http import RegistryClient, connect
from kvreg.remote.remotes import DEFAULT_MAX_CHECKPOINT_AGE, RemoteConfig
from kvreg.store.audit_state import RemoteLogState, RemoteLogStore
from kvreg.store.home import Home

log = logging.getLogger(__name__)

__all__ = ["MAX_LATEST_SCAN", "RemoteLog", "contact"]

MAX_LATEST_SCAN = 10 * 1000  # entries read after a ref's entry to prove it is the latest (ten pages)


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


class RemoteLog:
    """The audit log of the remote ``name``, checked through ``client`` for the length of one command.

    :meth:`check` verifies the registry's current checkpoint against the pinned key
    and the stored checkpoint (once; later calls return it); :meth:`refresh` takes a
    newer one, consistent with it; :meth:`prove` verifies entries; :meth:`save`
    stores the newest verified checkpoint (call it only when the command succeeded).
    """

    def __init__(
        self,
        home: Home,
        name: str,
        client: RegistryClient,
        *,
        max_age: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``max_age``: the oldest checkpoint accepted, in seconds (0: any); None reads the
        remote's ``max_checkpoint_age`` (the default for a remote not configured)."""
        self.home = home
        self.name = validate_remote_name(name)
        self.client = client
        self.store = RemoteLogStore(home)
        self.max_age = _configured_max_age(home, self.name) if max_age is None else max_age
        self.clock = clock
        self.base: RemoteLogState | None = None
        self.verifier: NoteVerifier | None = None
        self.note: str | None = None
        self.current: Checkpoint | None = None
        self.timestamp: int | None = None  # of the current checkpoint
        self.first: Checkpoint | None = None  # the checkpoint verified at the start of the command
        self.enabled = True
        self.refs: dict[str, tuple[int, str]] = {}  # ref entries proven by this command
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

    def _verify_note(self, note: str) -> tuple[Checkpoint, int | None]:
        assert self.verifier is not None
        try:
            checkpoint, stamp = note_timestamp(note, self.verifier)
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
        self._check_fresh(checkpoint, stamp)
        return checkpoint, stamp

    def _check_fresh(self, checkpoint: Checkpoint, stamp: int | None) -> None:
        """Refuse a checkpoint older than ``max_age``, or an undated one after dated ones (freeze)."""
        if stamp is None:
            stored = self.base.note if self.base is not None else None
            if stored is not None and self.verifier is not None:
                try:
                    _, stored_stamp = note_timestamp(stored, self.verifier)
                except SignatureError:
                    stored_stamp = None
                if stored_stamp is not None:
                    raise CheckpointStaleError(
                        f"{self.where}: its checkpoint of {checkpoint.size} entries is not dated, though the "
                        "one this store verified before was: an old checkpoint replayed, or a registry "
                        "that withholds its fresh state (freeze)",
                        hint="do not trust what it serves now and tell its operators",
                        remote=self.name,
                        size=checkpoint.size,
                    )
            if self.max_age:
                log.warning(
                    "%s does not date its checkpoints: a frozen registry cannot be told from an idle one",
                    self.where,
                )
            return
        if not self.max_age:
            return
        age = int(self.clock()) - stamp
        if age > self.max_age:
            raise CheckpointStaleError(
                f"{self.where}: its newest checkpoint ({checkpoint.size} entries) was signed {age} s ago, "
                f"more than the {self.max_age} s this store accepts: the registry, or someone answering "
                "for it, serves an old state and may withhold newer changes (freeze)",
                hint="tell its operators (a registry signs a fresh checkpoint on every request); check this "
                f"machine's clock; the limit is kvreg remote add {self.name} URL --max-checkpoint-age AGE",
                remote=self.name,
                size=checkpoint.size,
                signed_at=stamp,
                age=age,
                max_age=self.max_age,
            )

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
        checkpoint, stamp = self._verify_note(note)
        self._advance(self.previous, checkpoint)
        self.note, self.current, self.timestamp, self.first = note, checkpoint, stamp, checkpoint
        self._checked = True
        return checkpoint

    def refresh(self) -> Checkpoint | None:
        """A newer checkpoint (after a change, or for an entry the current one lacks), consistent with it."""
        if not self._checked:
            return self.check()
        if not self.enabled:
            return None
        note = self._fetch_note()
        checkpoint, stamp = self._verify_note(note)
        self._advance(self.current, checkpoint)
        self.note, self.current, self.timestamp = note, checkpoint, stamp
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
            if c.ref is not None and c.types <= REF_CHANGE_TYPES:
                entries[-1]["latest"] = self._check_latest(c, c.index, notes) if c.latest else None
                self._remember(c.ref, c.index, c.subject)
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

    def _remember(self, ref: str, index: int, digest: str | None) -> None:
        if digest is not None and (ref not in self.refs or self.refs[ref][0] < index):
            self.refs[ref] = (index, digest)

    def _check_latest(self, claim: EntryClaim, i: int, notes: list[str]) -> str:
        """Check that entry ``i`` is ``claim.ref``'s latest change (see "Per-ref rollback"):
        ``"proven"``, or ``"not checked"`` with a note; raise ``RefRollbackError``."""
        assert claim.ref is not None
        ref = claim.ref
        seen = self.base.refs.get(ref) if self.base is not None else None
        if seen is not None and i < seen[0]:
            raise RefRollbackError(
                f"{self.where} serves ref {ref} at {claim.subject} (audit entry {i}), but this store proved "
                f"entry {seen[0]} for it before ({seen[1]}): the registry rolled the ref back to an older "
                "value",
                hint="do not use what it serves for this ref and tell its operators",
                remote=self.name,
                ref=ref,
                index=i,
                seen_index=seen[0],
                seen_digest=seen[1],
            )
        assert self.first is not None
        bound = self.first.size  # the log as it was before the ref was read
        if i + 1 >= bound:
            return "proven"
        if bound - i - 1 > MAX_LATEST_SCAN:
            notes.append(
                f"ref {ref}: entry {i} is {bound - i - 1} entries before the end of the log, more than the "
                f"{MAX_LATEST_SCAN} read to prove it is the ref's latest change: not checked"
            )
            log.warning("%s: whether entry %d is the latest change of %s was not checked", self.where, i, ref)
            return "not checked"
        try:
            served = self._entries(i, bound)
        except (UnauthenticatedError, ForbiddenError):
            notes.append(
                f"ref {ref}: the entries after {i} could not be read without a token: whether it is the "
                "ref's latest change was not checked"
            )
            return "not checked"
        self._authenticate_suffix(i, bound, served)
        value, last = replay_ref(served, i, claim.namespace, ref, claim.subject)
        if value != claim.subject:
            raise RefRollbackError(
                f"{self.where} serves ref {ref} at {claim.subject} (audit entry {i}), but its signed log "
                f"records a later change, entry {last}, that left the ref "
                + (f"at {value}" if value is not None else "deleted")
                + ": the registry serves an outdated ref (rollback)",
                hint="do not use what it serves for this ref and tell its operators",
                remote=self.name,
                ref=ref,
                index=i,
                later_index=last,
                later_value=value,
            )
        if last != i:
            self._remember(ref, last, claim.subject)
        return "proven"

    def _entries(self, start: int, end: int) -> list[bytes]:
        """Entries ``[start, end)`` as served, page by page (``end - start <= MAX_LATEST_SCAN + 1``)."""
        out: list[bytes] = []
        while start + len(out) < end:
            page = self.client.log_entries(start + len(out), end)
            if not page.entries:
                raise LogInconsistentError(
                    f"{self.where} does not serve audit entry {start + len(out)} of its signed log of {end}",
                    remote=self.name,
                )
            out.extend(e.entry for e in page.entries)
        return out[: end - start]

    def _authenticate_suffix(self, i: int, size: int, served: list[bytes]) -> None:
        """Check that ``served`` are entries ``[i, size)`` of the log signed in ``self.first``: entry
        ``i``'s inclusion proof verifies against the signed root and each of its right-hand
        siblings is the hash of the served entries it covers."""
        assert self.first is not None and self.first.size == size and len(served) == size - i
        proof = self.client.log_inclusion_proof(i, size)
        problem = suffix_problem(i, size, served, proof.hashes, self.first.root)
        if problem is not None:
            raise LogInconsistentError(
                f"{self.where}: the audit entries {i}..{size - 1} it serves are not those of its signed log "
                f"of {size} entries: the entries were edited, withheld or reordered ({problem})",
                hint="the registry serves entries its signed log does not hold; tell its operators",
                remote=self.name,
                index=i,
            )

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
                t = rfc3339()
                state = RemoteLogState(
                    self.name, url, self.verifier, t, "first-contact", self.note, self.current, t
                )
                self.store.write(state.with_refs(self.refs))
                return
            if stored.verifier != self.verifier:
                log.warning(
                    "the log key of %s was re-pinned meanwhile; not storing this checkpoint", self.where
                )
                return
            theirs = stored.checkpoint
            state = stored.with_refs(self.refs)
            if theirs == self.current:
                if state.refs != stored.refs:
                    self.store.write(state)
                return
            if theirs is not None and theirs != self.previous:
                # Another process stored a checkpoint this one never compared with: prove them consistent.
                if theirs.size > self.current.size:
                    self._advance(self.current, theirs)
                    if state.refs != stored.refs:
                        self.store.write(state)
                    return
                self._advance(theirs, self.current)
            self.store.write(state.with_checkpoint(self.note, self.current, url))

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
            "signed_at": self.timestamp,
            "max_checkpoint_age": self.max_age,
            "checkpoint": self.note,
            "state_file": str(self.state_path),
        }


def _configured_max_age(home: Home, name: str) -> int:
    try:
        return RemoteConfig(home).get(name).max_checkpoint_age
    except NotFoundError:
        return DEFAULT_MAX_CHECKPOINT_AGE


@contextlib.contextmanager
def contact(home: Home, name: str, **client_options: Any) -> Iterator[tuple[RegistryClient, RemoteLog]]:
    """A client for the remote ``name`` and its :class:`RemoteLog`; the checkpoint is saved only when
    the block finishes without an exception (the block calls ``check`` or ``prove``)."""
    with connect(home, name, **client_options) as client:
        audit = RemoteLog(home, name, client)
        yield client, audit
        audit.save()
