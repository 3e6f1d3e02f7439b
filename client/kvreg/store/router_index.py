"""The router's local index: block keys → (manifest digest, block index), for ``kvreg route``.

A block key (``kvreg.core.blockkey``) names "the KV this model computes, under this
config, for this token prefix up to block i". The index maps every block key of
every artifact in the local store (``manifest.chunks[i].block_key``) to the
manifest that holds it and the block's index and range, so that the router finds
the longest block-aligned prefix of a prompt by computing the prompt's own block
keys and looking them up: no tokens are stored in the index and none are needed to
look blocks up. Besides the blocks it keeps one row per manifest with what the
router filters on (fingerprints, block size, token count, the prompt's token
count, the recorded verification verdict, the creation time).

The file is ``$KVREG_HOME/cache/route-index.sqlite3``: a SQLite database in WAL mode,
so every change is one transaction (a crash leaves the old or the new state) and
several processes may read and write it at once (writers wait on SQLite's lock).
It is a **cache**: everything in it is derived from the store, it is never
trusted for security (the router re-opens every candidate through the signature
check and compares tokens one by one before a graft), and it can be deleted at
any time. :meth:`RouteIndex.sync` brings it up to date with the envelopes in the
store (adding artifacts it lacks, dropping those that are gone); the router calls
it before every lookup, so artifacts written by any path (deposit, pull, a copy of
a store) are found even if the hooks that index them as they are written did not
run. :meth:`RouteIndex.rebuild` (``kvreg route --reindex``) starts from nothing.

This module reads manifests but does not verify signatures or trust, and never
changes the store itself.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, StoreError
from kvreg.core.manifest import Manifest

if TYPE_CHECKING:
    from kvreg.store.home import Home

log = logging.getLogger(__name__)

INDEX_NAME = "route-index.sqlite3"
SCHEMA_VERSION = 1
_BUSY_TIMEOUT_MS = 30_000
_LOOKUP_BATCH = 500

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS manifests (
        digest TEXT PRIMARY KEY,
        model_fp TEXT NOT NULL,
        tokenizer_fp TEXT NOT NULL,
        config_fp TEXT NOT NULL,
        block_size INTEGER NOT NULL CHECK (block_size > 0),
        token_count INTEGER NOT NULL CHECK (token_count > 0),
        prompt_tokens INTEGER,
        verdict TEXT,
        created TEXT
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS blocks (
        block_key TEXT NOT NULL,
        digest TEXT NOT NULL REFERENCES manifests(digest) ON DELETE CASCADE,
        idx INTEGER NOT NULL CHECK (idx >= 0),
        start INTEGER NOT NULL,
        "end" INTEGER NOT NULL,
        PRIMARY KEY (block_key, digest)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS blocks_by_digest ON blocks(digest, idx)",
    "CREATE INDEX IF NOT EXISTS manifests_by_fp ON manifests(model_fp, tokenizer_fp, config_fp)",
)


@dataclass(frozen=True, slots=True)
class BlockHit:
    """One indexed block whose key was looked up: block ``index`` of manifest ``digest``."""

    block_key: Digest
    digest: Digest
    index: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class IndexedManifest:
    """What the index knows about one artifact (read from its manifest, not verified)."""

    digest: Digest
    model_fp: Digest
    tokenizer_fp: Digest
    config_fp: Digest
    block_size: int
    token_count: int
    prompt_tokens: int | None
    verdict: str | None
    created: str | None


@dataclass(frozen=True, slots=True)
class SyncReport:
    added: int
    removed: int
    skipped: int  # envelopes whose manifest is missing or does not parse
    manifests: int
    blocks: int

    def to_dict(self) -> dict[str, int]:
        return {
            "added": self.added,
            "removed": self.removed,
            "skipped": self.skipped,
            "manifests": self.manifests,
            "blocks": self.blocks,
        }


def index_path(home: Home) -> Path:
    return home.cache_dir / INDEX_NAME


class RouteIndex:
    """The route index of one store. Use as a context manager, or call :meth:`close`."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.path = index_path(home)
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> RouteIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- connection -----------------------------------------------------------

    def _connect(self, target: Path | str) -> sqlite3.Connection:
        try:
            if isinstance(target, Path):
                target.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(target, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the route index {target}: {exc}", damaged=False) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                # A cache of another layout: start again (the next sync refills it).
                with _transaction(conn):
                    conn.execute("DROP TABLE IF EXISTS blocks")
                    conn.execute("DROP TABLE IF EXISTS manifests")
                    conn.execute("PRAGMA user_version = 0")
            with _transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.OperationalError as exc:  # locked for too long, read-only, disk full
            conn.close()
            raise StoreError(f"cannot use the route index {target}: {exc}", damaged=False) from exc
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
            conn.close()
            raise StoreError(f"the route index {target} is damaged: {exc}", damaged=True) from exc
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = self._connect(self.path)
            except StoreError as exc:
                if exc.details.get("damaged"):
                    # It is only a cache: remove it and start again.
                    log.warning("route index %s is damaged; rebuilding it", self.path)
                    for suffix in ("", "-wal", "-shm"):
                        with contextlib.suppress(OSError):
                            Path(str(self.path) + suffix).unlink()
                try:
                    self._conn = self._connect(self.path)
                except StoreError as again:
                    # A read-only store, say: route from a temporary index in memory.
                    log.warning("%s; using a temporary route index in memory", again.message)
                    self._conn = self._connect(":memory:")
        return self._conn

    # --- writing --------------------------------------------------------------

    def add(self, manifest: Manifest) -> bool:
        """Index one manifest (idempotent); True if it was new here."""
        digest = str(manifest.digest)
        verification = manifest.verification
        with _transaction(self.conn) as conn:
            if conn.execute("SELECT 1 FROM manifests WHERE digest = ?", (digest,)).fetchone():
                return False
            conn.execute(
                "INSERT INTO manifests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    digest,
                    str(manifest.model.fingerprint),
                    str(manifest.tokenizer.fingerprint),
                    str(manifest.config.fingerprint),
                    manifest.block_size,
                    manifest.token_count,
                    manifest.prompt.token_count if manifest.prompt is not None else None,
                    verification.verdict if verification is not None else None,
                    manifest.created,
                ),
            )
            conn.executemany(
                'INSERT OR IGNORE INTO blocks (block_key, digest, idx, start, "end") VALUES (?, ?, ?, ?, ?)',
                [(str(c.block_key), digest, c.index, c.start, c.end) for c in manifest.chunks],
            )
        return True

    def remove(self, digest: Digest) -> bool:
        with _transaction(self.conn) as conn:
            conn.execute("DELETE FROM blocks WHERE digest = ?", (str(digest),))
            return conn.execute("DELETE FROM manifests WHERE digest = ?", (str(digest),)).rowcount > 0

    def sync(self) -> SyncReport:
        """Make the index hold exactly the artifacts (envelope + manifest) of the store."""
        stored = set(self.home.envelopes.iter_manifest_digests())
        indexed = {Digest(row[0]) for row in self.conn.execute("SELECT digest FROM manifests")}
        added = removed = skipped = 0
        for digest in sorted(indexed - stored):
            removed += int(self.remove(digest))
        for digest in sorted(stored - indexed):
            manifest = self._read_manifest(digest)
            if manifest is None:
                skipped += 1
                continue
            added += int(self.add(manifest))
        if added or removed:
            log.info("route index: %d artifacts added, %d removed", added, removed)
        return self._report(added, removed, skipped)

    def rebuild(self) -> SyncReport:
        """Forget everything and index the store again."""
        with _transaction(self.conn) as conn:
            conn.execute("DELETE FROM blocks")
            conn.execute("DELETE FROM manifests")
        return self.sync()

    def _read_manifest(self, digest: Digest) -> Manifest | None:
        try:
            return Manifest.from_bytes(self.home.objects.read(digest, verify=True))
        except KvregError as exc:
            log.warning("route index: skipping manifest %s: %s", digest, exc.message)
            return None

    def _report(self, added: int, removed: int, skipped: int) -> SyncReport:
        manifests = self.conn.execute("SELECT count(*) FROM manifests").fetchone()[0]
        blocks = self.conn.execute("SELECT count(*) FROM blocks").fetchone()[0]
        return SyncReport(added, removed, skipped, manifests, blocks)

    # --- reading --------------------------------------------------------------

    def lookup(self, keys: Iterable[Digest]) -> list[BlockHit]:
        """Every indexed block whose key is one of ``keys``."""
        wanted = [str(k) for k in keys]
        hits: list[BlockHit] = []
        for i in range(0, len(wanted), _LOOKUP_BATCH):
            batch = wanted[i : i + _LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self.conn.execute(
                f'SELECT block_key, digest, idx, start, "end" FROM blocks WHERE block_key IN ({marks})',  # noqa: S608 (placeholders only)
                batch,
            )
            hits.extend(BlockHit(Digest(k), Digest(d), idx, s, e) for k, d, idx, s, e in rows)
        hits.sort(key=lambda h: (h.index, str(h.digest)))
        return hits

    def manifest(self, digest: Digest) -> IndexedManifest | None:
        row = self.conn.execute("SELECT * FROM manifests WHERE digest = ?", (str(digest),)).fetchone()
        return None if row is None else _indexed(row)

    def manifests(
        self, *, model_fp: Digest, tokenizer_fp: Digest, config_fp: Digest
    ) -> list[IndexedManifest]:
        """Every indexed artifact made with these fingerprints."""
        rows = self.conn.execute(
            "SELECT * FROM manifests WHERE model_fp = ? AND tokenizer_fp = ? AND config_fp = ? "
            "ORDER BY digest",
            (str(model_fp), str(tokenizer_fp), str(config_fp)),
        )
        return [_indexed(r) for r in rows]

    def all(self) -> list[IndexedManifest]:
        return [_indexed(r) for r in self.conn.execute("SELECT * FROM manifests ORDER BY digest")]


def _indexed(row: tuple[object, ...]) -> IndexedManifest:
    digest, model_fp, tokenizer_fp, config_fp, block_size, count, prompt_tokens, verdict, created = row
    return IndexedManifest(
        Digest(str(digest)),
        Digest(str(model_fp)),
        Digest(str(tokenizer_fp)),
        Digest(str(config_fp)),
        int(block_size),  # type: ignore[call-overload]
        int(count),  # type: ignore[call-overload]
        None if prompt_tokens is None else int(prompt_tokens),  # type: ignore[call-overload]
        None if verdict is None else str(verdict),
        None if created is None else str(created),
    )


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def index_artifact(home: Home, manifest: Manifest) -> None:
    """Hook for the paths that store artifacts (deposit, pull): index it now, best effort.

    A failure is logged, never raised: the artifact is stored, and the next lookup's
    :meth:`RouteIndex.sync` indexes it anyway.
    """
    try:
        with RouteIndex(home) as index:
            index.add(manifest)
    except (KvregError, sqlite3.Error, OSError) as exc:
        log.warning("could not index %s for routing (the next route will): %s", manifest.digest, exc)
