"""The audit log as clients see it: signed checkpoints, entries, inclusion and consistency proofs.

Entries are appended by ``kvreg_registry.audit.append`` in the transaction of the
change they record; this module reads them. Roots and proofs are computed from the
stored perfect subtrees (``log_nodes``) with ``kvreg.core.logtree``: each reads
O(log² n) rows fetched in one query, never the whole log.

**Checkpoints.** :meth:`AuditLog.checkpoint` signs ``(origin, size, root)`` as a
C2SP signed note with the registry's log key. Before it signs a new size it checks
that the new tree is consistent with the last checkpoint it signed (a consistency
proof computed from the stored tree, verified against the stored root); a database
edited behind its back therefore makes it refuse (``IntegrityError``) instead of
signing a forked history. The first checkpoint signed at each size is stored, and a
size is never signed twice with different roots.

**Freshness.** Every note carries a ``timestamp <unix seconds>`` extension line
(``kvreg.core.checkpoint``) and is signed afresh on every request, also when the log
did not grow (the TUF "timestamp role": one Ed25519 signature, tens of microseconds).
A client refuses a checkpoint older than its remote's maximum age, so a registry, or
someone answering in its place, that keeps serving an old state is caught once the
age has passed. The stored note of a size keeps the time it was first signed.

**The key.** One Ed25519 key per registry, in ``settings.log_key_path`` (PEM, mode
0600), created on first start. Every process of a scaled-out registry must read
the same key file, or clients will refuse their checkpoints.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError as DbIntegrityError
from sqlalchemy.orm import Session

from kvreg.core import logtree, merkle
from kvreg.core.checkpoint import Checkpoint, NoteVerifier, sign_checkpoint
from kvreg.core.errors import IntegrityError, KeyFileError, MerkleProofError, RequestInvalidError
from kvreg.core.keys import SigningKey
from kvreg.fileio.faults import crash_point
from kvreg.fileio.keyfiles import load_signing_key, save_signing_key
from kvreg_registry.audit import read_nodes
from kvreg_registry.db.engine import Database
from kvreg_registry.db.models import AuditEntry, LogCheckpoint, LogHead

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ENTRIES_PER_PAGE = 1000


def load_or_create_key(path: Path) -> SigningKey:
    """The log key at ``path``; a new one is written (exclusively, mode 0600) if there is none."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            save_signing_key(SigningKey.generate(), path)
            log.warning("created a new audit-log signing key at %s; back it up", path)
        except KeyFileError:
            pass  # another process created it first
    return load_signing_key(path)


@dataclass(frozen=True)
class Proof:
    size: int
    root: bytes
    hashes: list[bytes]

    def hashes_b64(self) -> list[str]:
        return [base64.b64encode(h).decode("ascii") for h in self.hashes]


class AuditLog:
    """Read access to the log and the checkpoint signer of one registry."""

    def __init__(self, db: Database, key: SigningKey, origin: str | None = None) -> None:
        self.db = db
        self.key = key
        default = f"kvreg-log-{key.public_key.keyid.removeprefix('sha256:')[:16]}"
        self.verifier = NoteVerifier(origin or default, key.public_key)

    @property
    def origin(self) -> str:
        return self.verifier.name

    # --- reading the tree ----------------------------------------------------------------

    @staticmethod
    def size(session: Session) -> int:
        return int(session.execute(select(LogHead.size).where(LogHead.id == 1)).scalar_one())

    @staticmethod
    def _run(session: Session, compute: Callable[[logtree.NodeReader], T]) -> T:
        nodes = read_nodes(session, logtree.plan(compute))

        def node(level: int, idx: int) -> bytes:
            try:
                return nodes[(level, idx)]
            except KeyError:
                raise IntegrityError(f"the audit log's tree lacks node ({level}, {idx})") from None

        return compute(node)

    def root(self, session: Session, size: int) -> bytes:
        return bytes(self._run(session, lambda node: logtree.root(size, node)))

    def _check_size(self, session: Session, size: int | None) -> int:
        current = self.size(session)
        if size is None:
            return current
        if not 0 <= size <= current:
            raise RequestInvalidError(f"tree size {size} is outside the log (0..{current})")
        return size

    def inclusion(self, session: Session, index: int, size: int | None = None) -> Proof:
        n = self._check_size(session, size)
        if not 0 <= index < n:
            raise RequestInvalidError(f"entry {index} is not in a tree of size {n}")
        hashes = self._run(
            session, lambda node: merkle.inclusion_proof(index, n, logtree.stored_range_hash(node))
        )
        return Proof(n, self.root(session, n), hashes)

    def consistency(self, session: Session, first: int, second: int | None = None) -> Proof:
        n = self._check_size(session, second)
        if not 0 <= first <= n:
            raise RequestInvalidError(f"no consistency proof from size {first} to size {n}")
        hashes = self._run(
            session, lambda node: merkle.consistency_proof(first, n, logtree.stored_range_hash(node))
        )
        return Proof(n, self.root(session, n), hashes)

    @staticmethod
    def entries(session: Session, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        """``(seq, entry bytes, leaf hash)`` of entries ``[start, end)`` (at most a page); only the
        three columns are read (ORM objects cost four times as much per entry)."""
        if start < 0 or end < start:
            raise RequestInvalidError(f"invalid entry range [{start}, {end})")
        end = min(end, start + MAX_ENTRIES_PER_PAGE)
        rows = session.execute(
            select(AuditEntry.seq, AuditEntry.entry, AuditEntry.leaf_hash)
            .where(AuditEntry.seq >= start, AuditEntry.seq < end)
            .order_by(AuditEntry.seq)
        ).all()
        return [(int(seq), bytes(entry), bytes(leaf)) for seq, entry, leaf in rows]

    # --- checkpoints ---------------------------------------------------------------------

    def _sign(self, size: int, root: bytes) -> str:
        return sign_checkpoint(
            Checkpoint(self.origin, size, root), self.key, self.origin, timestamp=int(time.time())
        )

    def checkpoint(self) -> str:
        """A checkpoint of the log as it is now, signed now (dated: see the module docstring);
        the first one of each size is stored."""
        with self.db.read() as s:
            size = self.size(s)
            stored = s.get(LogCheckpoint, size)
            root = self.root(s, size)
            if stored is not None:
                if bytes(stored.root) != root:
                    raise IntegrityError(
                        f"the audit log's tree at size {size} no longer has the root it had when it was "
                        "signed: the database was altered; refusing to sign"
                    )
                return self._sign(size, root)
            previous = s.scalar(
                select(LogCheckpoint)
                .where(LogCheckpoint.size < size)
                .order_by(LogCheckpoint.size.desc())
                .limit(1)
            )
            if previous is not None and previous.size > 0:
                proof = self._run(
                    s,
                    lambda node: merkle.consistency_proof(
                        previous.size, size, logtree.stored_range_hash(node)
                    ),
                )
                try:
                    merkle.verify_consistency(previous.size, size, bytes(previous.root), root, proof)
                except MerkleProofError as e:
                    raise IntegrityError(
                        f"the audit log at size {size} is not consistent with the checkpoint signed at size "
                        f"{previous.size}: the database was altered; refusing to sign ({e.message})"
                    ) from e
        note = self._sign(size, root)
        crash_point("registry.checkpoint.before_store")
        try:
            with self.db.write() as s:
                s.add(LogCheckpoint(size=size, root=root, note=note))
        except DbIntegrityError:
            with self.db.read() as s:  # another process signed this size first: same root, or refuse
                stored = s.get(LogCheckpoint, size)
                if stored is None or bytes(stored.root) != root:
                    raise IntegrityError(f"two different roots for log size {size}") from None
        return note
