"""The audit log at scale: append rate, proofs from stored subtrees, offline verification.

One run, one process, through the registry's real code path:

1. **A real database**: a fresh SQLite file under ``--out`` (the embedded default),
   or, with ``--database-url postgresql+psycopg://...``, a scratch database created
   on that server for the run and dropped afterwards. The schema is made by
   ``kvreg_registry.db.upgrade`` (the alembic migrations).
2. **Appends** with ``kvreg_registry.audit.append`` inside ``Database.write()``
   transactions, in stages up to ``--entries`` (1,000, 10,000, 100,000 by
   default). Most entries go ``--batch`` per transaction (the append rate the log
   itself sustains); the last ``--single`` entries go one per transaction, as a
   registry writes them (one state change, one transaction, one entry). Entries
   look like the registry's own (upload sessions, object holds, envelopes, ref
   moves; digests, namespaces, actors, details).
3. **At each stage** (log of ``n`` entries): ``--samples`` inclusion proofs
   (``AuditLog.inclusion``) of random entries and consistency proofs
   (``AuditLog.consistency``) from random older sizes, each in its own read
   transaction, as the HTTP route runs it. For each: its size in hashes, its time,
   the SQL statements it ran, and the stored nodes it read (``kvreg.core.logtree.plan``
   of the proof and of the root: exactly the rows ``read_nodes`` fetches). Every
   proof is verified with ``kvreg.core.merkle`` against roots recomputed here from
   the entries' bytes (not from the stored tree). Then ``AuditLog.checkpoint`` signs
   the log (it checks consistency with the previous checkpoint first); the note's
   signature is checked with the pinned verifier key and its root against the
   recomputed one.
4. **Side by side**: once the log is complete, proofs for trees of every stage size
   (``size=`` / ``second=``) are timed interleaved in the same database, so that the
   growth of proof time from 1,000 to 100,000 entries is not blurred by the host's
   load drifting between stages.
5. **Offline verification of the whole log**: every entry is read back in pages of
   1,000 (``AuditLog.entries``, as ``GET /log/entries`` serves them); then, timed
   against plain ``hashlib.sha256`` over the same entry bytes (interleaved rounds,
   medians): the signed checkpoint is verified with the verifier key, every entry's
   RFC 6962 leaf hash is computed, the root is rebuilt
   (``kvreg.core.merkle.root_from_leaf_hashes``) and compared with the checkpoint's,
   and ``--verify-proofs`` inclusion proofs are checked against it. Two variants
   are shown beside it, with no goal: a streaming root (O(log n) memory, for logs
   larger than memory) and the same verification parsing every entry's JSON and
   checking its ``seq``.

Correctness checks (a failure exits 1): sequence numbers dense; stored leaf hashes
and stored subtrees equal to those recomputed from the entries; every proof
verifies; inclusion proofs at most ceil(log2 n) hashes and consistency proofs at
most ceil(log2 n) + 1 (RFC 9162's bounds); stored rows read per proof at most
ceil(log2 n)**2; every checkpoint's signature and root. Goals from the issue (a
missed goal is reported, not an error): proofs of at most 17 hashes at 100,000
entries; proof time flat from 1,000 to 100,000 entries (here: the median at the
largest size at most 1.5x the median at 1,000); whole-log verification within 3x
of plain hashing of its leaves.

Usage::

    .venv/bin/python bench/audit_log.py [--entries 100000] [--samples 200] [--batch 1000]
        [--single 2000] [--database-url URL] [--out bench/out] [--keep] [--quick]

``--quick`` (5,000 entries) is the smoke test's run; its timings mean nothing.
The last line of stdout is the whole report as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import logging
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import event, select, text

from kvreg.core import logtree, merkle
from kvreg.core.checkpoint import NoteVerifier, verify_signed_checkpoint
from kvreg.core.errors import IntegrityError, MerkleProofError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg_registry import audit
from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.db.models import AuditEntry, LogNode
from kvreg_registry.services.log import MAX_ENTRIES_PER_PAGE, AuditLog

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "out"
STAGES = (1_000, 10_000, 100_000)
GOALS = {
    "max_proof_hashes": 17,  # at 100,000 entries: ceil(log2(100000))
    "proof_time_growth": 1.5,  # median at the largest size / median at 1,000
    "verify_over_plain_sha256": 3.0,
}
_sha256 = hashlib.sha256


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ceil_log2(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 0 else 0


# --- the database ------------------------------------------------------------------------


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """A fresh database for the run: yields (SQLAlchemy URL, kind)."""
    url = args.database_url
    if url is None:
        folder = args.out / ("audit-log-quick" if args.quick else "audit-log")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "registry.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        yield f"sqlite:///{path}", "sqlite"
        return
    if not url.startswith("postgresql"):
        raise SystemExit("--database-url must be a postgresql+psycopg:// URL (SQLite is the default)")
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    server = make_url(url)
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"kvreg_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    log(f"scratch database {name} on {server.host}:{server.port}")
    try:
        yield server.set(database=name).render_as_string(hide_password=False), "postgresql"
    finally:
        if args.keep:
            log(f"kept database {name}")
        else:
            with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def storage_bytes(db: Database, url: str) -> dict[str, int]:
    """Bytes the log takes: the SQLite file (after a WAL checkpoint), or the PostgreSQL tables."""
    if db.dialect == "sqlite":
        with db.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        path = Path(url.removeprefix("sqlite:///"))
        return {"database_file": path.stat().st_size}
    out: dict[str, int] = {}
    with db.engine.connect() as conn:
        for table in ("audit_entries", "log_nodes"):
            out[table] = int(conn.execute(text(f"SELECT pg_total_relation_size('{table}')")).scalar_one())
    return out


class StatementCounter:
    """Counts the SQL statements an engine sends (BEGIN included on SQLite)."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        event.listen(db.engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1


# --- entries like the registry's ----------------------------------------------------------


def digest_of(i: int, salt: bytes = b"") -> str:
    return "sha256:" + _sha256(salt + i.to_bytes(8, "little", signed=True)).hexdigest()


def entry_args(i: int) -> tuple[str, dict[str, Any]]:
    """The type and fields of entry ``i``: a cycle of what a push logs."""
    ns, actor, kind = f"team{i % 7}", f"user{i % 13}", i % 6
    upload = str(uuid.UUID(bytes=_sha256(b"upload" + (i // 6).to_bytes(8, "little")).digest()[:16]))
    if kind == 0:
        return "upload.opened", {
            "actor": actor,
            "namespace": ns,
            "details": {"upload": upload, "digests": 34, "missing": 3},
        }
    if kind in (1, 2):
        return "object.held", {
            "actor": actor,
            "namespace": ns,
            "subjects": [digest_of(i)],
            "details": {"size": 16_777_216},
        }
    if kind == 3:
        return "envelope.stored", {
            "actor": actor,
            "namespace": ns,
            "subjects": [digest_of(i)],
            "new": {"signer": digest_of(i % 13, b"key"), "merkle_root": digest_of(i, b"root"), "objects": 34},
        }
    if kind == 4:
        return "ref.moved", {
            "actor": actor,
            "namespace": ns,
            "subjects": [digest_of(i - 1)],
            "old": digest_of(i - 7),
            "new": digest_of(i - 1),
            "details": {"ref": f"{ns}/problem-{i % 97:02d}"},
        }
    return "upload.closed", {"actor": actor, "namespace": ns, "details": {"upload": upload}}


def append_range(db: Database, start: int, stop: int, batch: int) -> tuple[list[float], bool]:
    """Append entries ``[start, stop)``, ``batch`` per transaction: (seconds per transaction, dense)."""
    times: list[float] = []
    dense = True
    i = start
    while i < stop:
        j = min(stop, i + batch)
        t0 = time.perf_counter()
        with db.write() as s:
            for k in range(i, j):
                type_, fields = entry_args(k)
                dense &= audit.append(s, type_, **fields) == k
        times.append(time.perf_counter() - t0)
        i = j
    return times, dense


# --- what the checks compare with: the leaves, recomputed from the entries' bytes -------------


class Mirror:
    """The entries read back from the database, their leaf hashes recomputed, and roots from them."""

    def __init__(self) -> None:
        self.entries: list[bytes] = []
        self.leaves: list[bytes] = []
        self.stored_leaves_equal = True
        self.seqs_dense = True

    def catch_up(self, db: Database) -> None:
        with db.read() as s:
            rows = s.execute(
                select(AuditEntry.seq, AuditEntry.entry, AuditEntry.leaf_hash)
                .where(AuditEntry.seq >= len(self.entries))
                .order_by(AuditEntry.seq)
            ).all()
        for seq, entry, stored in rows:
            entry = bytes(entry)
            self.seqs_dense &= seq == len(self.entries) and json.loads(entry)["seq"] == seq
            leaf = merkle.leaf_hash(entry)
            self.stored_leaves_equal &= leaf == bytes(stored)
            self.entries.append(entry)
            self.leaves.append(leaf)

    def roots(self, sizes: set[int]) -> dict[int, bytes]:
        """RFC 6962 roots of the first ``m`` leaves for every ``m`` in ``sizes``, in one pass."""
        return streaming_roots(self.leaves, sizes)


def streaming_roots(leaves: list[bytes], sizes: set[int]) -> dict[int, bytes]:
    """Roots at the given sizes, folding a stack of perfect subtrees (O(log n) memory).

    Written here, apart from ``kvreg.core.logtree``, so that the checks do not trust the
    code they check."""
    out: dict[int, bytes] = {}
    if 0 in sizes:
        out[0] = merkle.empty_root()
    stack: list[bytes] = []
    node = merkle.node_hash
    for i, h in enumerate(leaves):
        j = i
        while j & 1:
            h = node(stack.pop(), h)
            j >>= 1
        stack.append(h)
        if i + 1 in sizes:
            acc = stack[-1]
            for left in reversed(stack[:-1]):
                acc = node(left, acc)
            out[i + 1] = acc
    return out


# --- proofs --------------------------------------------------------------------------------


def sample_indices(rng: random.Random, n: int, k: int) -> list[int]:
    fixed = [0, n - 1, n // 2]
    return fixed + [rng.randrange(n) for _ in range(max(0, k - len(fixed)))]


def sample_old_sizes(rng: random.Random, n: int, k: int) -> list[int]:
    # 3: an odd old size whose last leaf sits at full depth (the longest proofs).
    fixed = [m for m in (1, 3, n // 2, n - 1) if 1 <= m < n]
    return fixed + [rng.randrange(1, n) for _ in range(max(0, k - len(fixed)))]


def measure_proof(
    db: Database, counter: StatementCounter, compute: Callable[[Any], Any]
) -> tuple[float, int, Any]:
    """Time one proof in its own read transaction: (seconds, SQL statements, proof)."""
    before = counter.count
    t0 = time.perf_counter()
    with db.read() as s:
        proof = compute(s)
    return time.perf_counter() - t0, counter.count - before, proof


def prove_inclusion(
    db: Database, alog: AuditLog, counter: StatementCounter, index: int, n: int, mirror: Mirror, root: bytes
) -> dict[str, Any]:
    seconds, statements, proof = measure_proof(db, counter, lambda s: alog.inclusion(s, index, n))
    rows = len(
        logtree.plan(lambda nd: merkle.inclusion_proof(index, n, logtree.stored_range_hash(nd)))
    ) + len(logtree.plan(lambda nd: logtree.root(n, nd)))
    ok = proof.root == root and proof.size == n
    try:
        merkle.verify_inclusion(mirror.leaves[index], index, n, proof.hashes, root)
    except MerkleProofError:
        ok = False
    return {"seconds": seconds, "statements": statements, "hashes": len(proof.hashes), "rows": rows, "ok": ok}


def prove_consistency(
    db: Database,
    alog: AuditLog,
    counter: StatementCounter,
    m: int,
    n: int,
    roots: dict[int, bytes],
) -> dict[str, Any]:
    seconds, statements, proof = measure_proof(db, counter, lambda s: alog.consistency(s, m, n))
    rows = len(logtree.plan(lambda nd: merkle.consistency_proof(m, n, logtree.stored_range_hash(nd)))) + len(
        logtree.plan(lambda nd: logtree.root(n, nd))
    )
    ok = proof.root == roots[n] and proof.size == n
    try:
        merkle.verify_consistency(m, n, roots[m], roots[n], proof.hashes)
    except MerkleProofError:
        ok = False
    return {"seconds": seconds, "statements": statements, "hashes": len(proof.hashes), "rows": rows, "ok": ok}


def summarize(results: list[dict[str, Any]], n: int, extra_hash: int) -> dict[str, Any]:
    bound = ceil_log2(n) + extra_hash
    return {
        "count": len(results),
        "median_seconds": median([r["seconds"] for r in results]),
        "p90_seconds": sorted(r["seconds"] for r in results)[int(0.9 * (len(results) - 1))],
        "max_hashes": max(r["hashes"] for r in results),
        "median_hashes": median([r["hashes"] for r in results]),
        "hash_bound": bound,
        "median_rows": median([r["rows"] for r in results]),
        "max_rows": max(r["rows"] for r in results),
        "statements": sorted({r["statements"] for r in results}),
        "all_verified": all(r["ok"] for r in results),
        "within_hash_bound": all(r["hashes"] <= bound for r in results),
        "rows_within_log2_squared": all(r["rows"] <= max(1, ceil_log2(n)) ** 2 for r in results),
    }


def longest_proofs(n: int) -> dict[str, Any]:
    """The longest proofs of a tree of size ``n`` over every index and old size (shapes only)."""
    blank = b"\x00" * 32

    def reader(_level: int, _index: int) -> bytes:
        return blank

    inclusion = max(len(merkle.inclusion_proof(i, n, logtree.stored_range_hash(reader))) for i in range(n))
    lengths = [len(merkle.consistency_proof(m, n, logtree.stored_range_hash(reader))) for m in range(1, n)]
    consistency = max(lengths, default=0)
    return {
        "size": n,
        "inclusion_max_hashes": inclusion,
        "consistency_max_hashes": consistency,
        "old_sizes_with_consistency_over_ceil_log2": sum(1 for x in lengths if x > ceil_log2(n)),
        "old_sizes": len(lengths),
    }


# --- offline verification of the whole log --------------------------------------------------


def read_all_entries(db: Database, n: int) -> tuple[float, list[bytes]]:
    """Every entry, in pages as ``GET /log/entries`` serves them (one read transaction a page)."""
    out: list[bytes] = []
    t0 = time.perf_counter()
    while len(out) < n:
        with db.read() as s:
            page = AuditLog.entries(s, len(out), min(n, len(out) + MAX_ENTRIES_PER_PAGE))
        if not page:
            break
        out.extend(entry for _seq, entry, _leaf in page)
    return time.perf_counter() - t0, out


def plain_sha256(entries: list[bytes]) -> list[bytes]:
    sha = _sha256
    return [sha(e).digest() for e in entries]


def verify_log(
    entries: list[bytes], note: str, verifier: NoteVerifier, proofs: list[tuple[int, list[bytes]]]
) -> bytes:
    """Verify the whole log against its signed checkpoint; raise on any failure."""
    checkpoint = verify_signed_checkpoint(note, verifier)
    if checkpoint.size != len(entries):
        raise IntegrityError(f"the checkpoint is for {checkpoint.size} entries, the log has {len(entries)}")
    leaf = merkle.leaf_hash
    leaves = [leaf(e) for e in entries]
    root = merkle.root_from_leaf_hashes(leaves)
    if root != checkpoint.root:
        raise MerkleProofError("the entries do not hash to the checkpoint's root")
    for index, hashes in proofs:
        merkle.verify_inclusion(leaves[index], index, checkpoint.size, hashes, checkpoint.root)
    return root


def verify_log_streaming(entries: list[bytes], note: str, verifier: NoteVerifier) -> bytes:
    """The same root check, folding perfect subtrees as entries arrive (O(log n) memory)."""
    checkpoint = verify_signed_checkpoint(note, verifier)
    leaf, node = merkle.leaf_hash, merkle.node_hash
    stack: list[bytes] = []
    for i, e in enumerate(entries):
        h = leaf(e)
        j = i
        while j & 1:
            h = node(stack.pop(), h)
            j >>= 1
        stack.append(h)
    root = stack[-1] if stack else merkle.empty_root()
    for left in reversed(stack[:-1]):
        root = node(left, root)
    if checkpoint.size != len(entries) or root != checkpoint.root:
        raise MerkleProofError("the entries do not hash to the checkpoint's root")
    return root


def verify_log_parsing(
    entries: list[bytes], note: str, verifier: NoteVerifier, proofs: list[tuple[int, list[bytes]]]
) -> bytes:
    """``verify_log`` plus a JSON parse of every entry and a check of its ``seq``."""
    loads = json.loads
    for i, e in enumerate(entries):
        if loads(e)["seq"] != i:
            raise IntegrityError(f"entry {i} says it is entry {loads(e)['seq']}")
    return verify_log(entries, note, verifier, proofs)


def measure_verification(
    entries: list[bytes],
    note: str,
    verifier: NoteVerifier,
    proofs: list[tuple[int, list[bytes]]],
    expected_root: bytes,
    rounds: int,
) -> dict[str, Any]:
    jobs: dict[str, Callable[[], Any]] = {
        "plain_sha256": lambda: plain_sha256(entries),
        "verify": lambda: verify_log(entries, note, verifier, proofs),
        "verify_streaming": lambda: verify_log_streaming(entries, note, verifier),
        "verify_parsing": lambda: verify_log_parsing(entries, note, verifier, proofs),
    }
    times: dict[str, list[float]] = {name: [] for name in jobs}
    results: dict[str, Any] = {}
    ok = True
    for r in range(rounds):
        names = list(jobs)
        if r % 2:
            names.reverse()  # no job always runs first, on a cold cache, or last
        for name in names:
            gc.collect()
            t0 = time.perf_counter()
            try:
                results[name] = jobs[name]()
            except IntegrityError as e:
                log(f"offline verification failed ({name}): {e}")
                ok = False
            times[name].append(time.perf_counter() - t0)
    # Inclusion proofs alone, to say what checking one costs.
    leaves = [merkle.leaf_hash(entries[i]) for i, _ in proofs]
    t0 = time.perf_counter()
    for leaf, (index, hashes) in zip(leaves, proofs, strict=True):
        merkle.verify_inclusion(leaf, index, len(entries), hashes, expected_root)
    per_proof = (time.perf_counter() - t0) / max(1, len(proofs))
    seconds = {name: median(values) for name, values in times.items()}
    plain = seconds["plain_sha256"]
    return {
        "entries": len(entries),
        "entry_bytes": sum(map(len, entries)),
        "rounds": rounds,
        "inclusion_proofs_checked": len(proofs),
        "seconds": seconds,
        "samples": times,
        "ratios": {name: seconds[name] / plain for name in seconds if name != "plain_sha256"},
        "inclusion_proof_verify_seconds": per_proof,
        "root_equals_checkpoint": ok
        and results.get("verify") == expected_root
        and results.get("verify_streaming") == expected_root
        and results.get("verify_parsing") == expected_root,
    }


# --- the run -------------------------------------------------------------------------------


def machine(kind: str, db: Database) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    import sqlalchemy

    with db.engine.connect() as conn:
        if kind == "sqlite":
            server = "SQLite " + str(conn.exec_driver_sql("select sqlite_version()").scalar_one())
        else:
            server = str(conn.exec_driver_sql("show server_version").scalar_one())
            server = "PostgreSQL " + server.split()[0]
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "sqlalchemy": sqlalchemy.__version__,
        "database": server,
    }


def command_line() -> str:
    """This run's command, with any database password masked."""
    from sqlalchemy.engine import make_url

    words = [Path(sys.executable).name, *sys.argv]
    for i, word in enumerate(words):
        if word.startswith("postgresql"):
            words[i] = make_url(word).render_as_string(hide_password=True)
        elif word.startswith("--database-url=postgresql"):
            words[i] = "--database-url=" + make_url(word.split("=", 1)[1]).render_as_string(
                hide_password=True
            )
    return " ".join(words)


def run(args: argparse.Namespace, url: str, kind: str) -> dict[str, Any]:
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    upgrade(url)
    migrate_seconds = time.perf_counter() - t0
    db = Database(url)
    counter = StatementCounter(db)
    key = SigningKey.from_seed(_sha256(b"kvreg bench audit log").digest())
    alog = AuditLog(db, key, "bench.kvreg.example/log")
    # What a client pins: the origin and public key that GET /log/key publishes, rebuilt
    # from their text, not the signer's own object.
    verifier = NoteVerifier(alog.origin, PublicKey.from_text(alog.verifier.public_key.to_text()))
    try:  # the C2SP verifier key text (NAME+KEYID+KEY) must parse back to the same key
        verifier_text_parses = NoteVerifier.from_text(alog.verifier.to_text()) == verifier
    except IntegrityError:
        verifier_text_parses = False
    rng = random.Random(0)
    n_final = args.entries
    stages = sorted({s for s in STAGES if s < n_final} | {n_final})
    single = min(args.single, n_final)
    mirror = Mirror()
    batched_times: list[float] = []
    batched_entries = 0
    single_times: list[float] = []
    dense = True
    checks: dict[str, bool] = {}
    stage_reports: list[dict[str, Any]] = []
    notes: dict[int, str] = {}
    final_inclusion: list[tuple[int, list[bytes]]] = []

    size = 0
    for n in stages:
        batched_stop = n - single if n == n_final else n
        log(f"appending {size:,} -> {n:,} ...")
        times, ok = append_range(db, size, batched_stop, args.batch)
        batched_times += times
        batched_entries += batched_stop - size
        dense &= ok
        if batched_stop < n:
            times, ok = append_range(db, batched_stop, n, 1)
            single_times += times
            dense &= ok
        size = n
        mirror.catch_up(db)

        log(f"proofs at {n:,} entries ...")
        indices = sample_indices(rng, n, args.samples)
        old_sizes = sample_old_sizes(rng, n, args.samples)
        roots = mirror.roots(set(old_sizes) | {n})
        inclusion = [prove_inclusion(db, alog, counter, i, n, mirror, roots[n]) for i in indices]
        consistency = [prove_consistency(db, alog, counter, m, n, roots) for m in old_sizes]
        if n == n_final:
            with db.read() as s:
                final_inclusion = [(i, alog.inclusion(s, i, n).hashes) for i in indices[: args.verify_proofs]]

        t0 = time.perf_counter()
        note = alog.checkpoint()
        checkpoint_seconds = time.perf_counter() - t0
        notes[n] = note
        try:
            cp = verify_signed_checkpoint(note, verifier)
            checkpoint_ok = cp.size == n and cp.root == roots[n] and cp.origin == alog.origin
        except IntegrityError:
            checkpoint_ok = False
        stage_reports.append(
            {
                "size": n,
                "inclusion": summarize(inclusion, n, 0),
                "consistency": summarize(consistency, n, 1),
                "checkpoint_seconds": checkpoint_seconds,
                "checkpoint_ok": checkpoint_ok,
            }
        )

    log("proofs for every stage size, interleaved, in the complete log ...")
    side: dict[int, dict[str, list[dict[str, Any]]]] = {
        n: {"inclusion": [], "consistency": []} for n in stages
    }
    plans: list[tuple[int, int, int]] = []
    for _ in range(args.samples):
        for n in stages:
            plans.append((n, rng.randrange(n), rng.randrange(1, n) if n > 1 else 1))
    roots = mirror.roots({m for _, _, m in plans} | set(stages))
    for n, index, m in plans:
        side[n]["inclusion"].append(prove_inclusion(db, alog, counter, index, n, mirror, roots[n]))
        side[n]["consistency"].append(prove_consistency(db, alog, counter, m, n, roots))
    side_reports = [
        {
            "size": n,
            "inclusion": summarize(side[n]["inclusion"], n, 0),
            "consistency": summarize(side[n]["consistency"], n, 1),
        }
        for n in stages
    ]

    log("longest proofs over every index and old size ...")
    shapes = longest_proofs(n_final)

    log("checking the stored tree against the entries ...")
    expected_nodes = logtree.from_leaves(mirror.leaves)
    with db.read() as s:
        stored = {
            (lv, ix): bytes(h) for lv, ix, h in s.execute(select(LogNode.level, LogNode.idx, LogNode.hash))
        }
    checks["stored_nodes_equal_recomputed"] = stored == expected_nodes

    log("offline verification of the whole log ...")
    read_seconds, entries = read_all_entries(db, n_final)
    checks["entries_read_back_equal"] = entries == mirror.entries
    final_root = mirror.roots({n_final})[n_final]
    verification = measure_verification(
        entries, notes[n_final], verifier, final_inclusion, final_root, args.rounds
    )
    verification["read_seconds"] = read_seconds
    checks["root_equals_checkpoint"] = verification["root_equals_checkpoint"]
    checks["mirror_root_equals_merkle_module"] = final_root == merkle.root_from_leaf_hashes(mirror.leaves)

    checks["seqs_dense"] = dense and mirror.seqs_dense and len(mirror.entries) == n_final
    checks["stored_leaf_hashes_equal_recomputed"] = mirror.stored_leaves_equal
    checks["checkpoints_signed_and_equal"] = all(r["checkpoint_ok"] for r in stage_reports)
    every = stage_reports + side_reports
    for what in ("inclusion", "consistency"):
        checks[f"{what}_proofs_verified"] = all(r[what]["all_verified"] for r in every)
        checks[f"{what}_within_hash_bound"] = all(r[what]["within_hash_bound"] for r in every)
        checks[f"{what}_rows_within_log2_squared"] = all(r[what]["rows_within_log2_squared"] for r in every)
    checks["longest_proofs_within_bounds"] = (
        shapes["inclusion_max_hashes"] <= ceil_log2(n_final)
        and shapes["consistency_max_hashes"] <= ceil_log2(n_final) + 1
    )

    first, last = side_reports[0], side_reports[-1]
    growth = {
        what: last[what]["median_seconds"] / first[what]["median_seconds"]
        for what in ("inclusion", "consistency")
    }
    staged_growth = {
        what: stage_reports[-1][what]["median_seconds"] / stage_reports[0][what]["median_seconds"]
        for what in ("inclusion", "consistency")
    }
    hash_goal = GOALS["max_proof_hashes"] if n_final == 100_000 else ceil_log2(n_final)
    goals_met = {
        "inclusion_max_hashes": max(r["inclusion"]["max_hashes"] for r in every) <= hash_goal
        and shapes["inclusion_max_hashes"] <= hash_goal,
        "consistency_max_hashes": shapes["consistency_max_hashes"] <= hash_goal,
        "proof_time_flat": max(growth.values()) <= GOALS["proof_time_growth"],
        "verify_over_plain_sha256": verification["ratios"]["verify"] <= GOALS["verify_over_plain_sha256"],
    }
    append_seconds = sum(batched_times)
    report = {
        "bench": "audit_log",
        "command": command_line(),
        "quick": args.quick,
        "database": kind,
        "entries": n_final,
        "stages": stages,
        "samples": args.samples,
        "machine": machine(kind, db),
        "migrate_seconds": migrate_seconds,
        "append": {
            "batched_entries": batched_entries,
            "batch": args.batch,
            "batched_seconds": append_seconds,
            "batched_per_second": batched_entries / append_seconds if append_seconds else None,
            "batched_transaction_median_seconds": median(batched_times),
            "single_entries": len(single_times),
            "single_seconds": sum(single_times),
            "single_per_second": len(single_times) / sum(single_times) if single_times else None,
            "single_transaction_median_seconds": median(single_times),
            "mean_entry_bytes": sum(map(len, mirror.entries)) / max(1, len(mirror.entries)),
            "storage_bytes": storage_bytes(db, url),
        },
        "proofs_by_stage": stage_reports,
        "proofs_side_by_side": side_reports,
        "proof_time_growth": growth,
        "proof_time_growth_staged": staged_growth,
        "longest_proofs": shapes,
        "verification": verification,
        "goals": {**GOALS, "max_proof_hashes": hash_goal},
        "goals_met": goals_met,
        "checks": checks,
        "ok": all(checks.values()),
        # Not a check of the log (kvreg.core.checkpoint's parser, reported to its owner):
        # NoteVerifier.from_text splits at every '+', and a base64 key holds one half the time.
        "verifier_key_text": alog.verifier.to_text(),
        "verifier_key_text_parses": verifier_text_parses,
        "load_average": [load_start, os.getloadavg()[0]],
    }
    db.dispose()
    report["wall_seconds"] = time.perf_counter() - started
    return report


# --- the report --------------------------------------------------------------------------


def us(seconds: float) -> str:
    return f"{seconds * 1e6:8.0f} us"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.1f} ms"


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def render(report: dict[str, Any]) -> str:
    m, a, v = report["machine"], report["append"], report["verification"]
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu']}, python {m['python']}, SQLAlchemy {m['sqlalchemy']}, "
        f"{m['database']}",
        "load average (1 min) at start {:.2f}, at end {:.2f}".format(*report["load_average"]),
        f"{report['entries']:,} entries (mean {a['mean_entry_bytes']:.0f} bytes of canonical JSON), "
        f"stages {', '.join(f'{s:,}' for s in report['stages'])}; {report['samples']} proofs of each kind "
        "per size",
        "",
        "append (kvreg_registry.audit.append in Database.write())",
        f"  {a['batch']:,} entries per transaction   {a['batched_per_second']:10,.0f} entries/s "
        f"({a['batched_entries']:,} entries in {a['batched_seconds']:.1f} s; "
        f"{a['batched_transaction_median_seconds'] * 1e3:.0f} ms per transaction)",
    ]
    if a["single_entries"]:
        lines.append(
            f"  1 entry per transaction       {a['single_per_second']:10,.0f} entries/s "
            f"(the last {a['single_entries']:,} entries; "
            f"{a['single_transaction_median_seconds'] * 1e3:.2f} ms per transaction)"
        )
    storage = ", ".join(f"{k} {val / 1e6:.1f} MB" for k, val in a["storage_bytes"].items())
    total = sum(a["storage_bytes"].values())
    lines.append(f"  storage: {storage} ({total / report['entries']:.0f} bytes per entry)")

    def table(title: str, rows: list[dict[str, Any]], checkpoint: bool) -> None:
        lines.extend(["", title])
        lines.append(
            "      size   kind         hashes max (bound)  median time   p90 time   rows med/max  SQL stmts"
        )
        for r in rows:
            for what in ("inclusion", "consistency"):
                p = r[what]
                lines.append(
                    f"  {r['size']:8,}   {what:<12} {p['max_hashes']:5d} ({p['hash_bound']:2d})      "
                    f"{us(p['median_seconds'])}  {us(p['p90_seconds'])}   "
                    f"{p['median_rows']:4.0f} / {p['max_rows']:3d}    {','.join(map(str, p['statements']))}"
                )
            if checkpoint:
                lines.append(
                    f"  {r['size']:8,}   checkpoint (checked against the last one, signed, stored) "
                    f"{ms(r['checkpoint_seconds'])}"
                )

    table(
        "proofs at each stage (AuditLog.inclusion / .consistency, one read transaction each)",
        report["proofs_by_stage"],
        True,
    )
    table(
        f"proofs for each size, interleaved in the complete log of {report['entries']:,}",
        report["proofs_side_by_side"],
        False,
    )
    g, gs = report["proof_time_growth"], report["proof_time_growth_staged"]
    lines.append(
        f"  median time at {report['stages'][-1]:,} / at {report['stages'][0]:,}: "
        f"inclusion {g['inclusion']:.2f}x, consistency {g['consistency']:.2f}x "
        f"(staged: {gs['inclusion']:.2f}x, {gs['consistency']:.2f}x)"
    )
    s = report["longest_proofs"]
    lines.append(
        f"  longest proofs over every index / old size at {s['size']:,}: "
        f"inclusion {s['inclusion_max_hashes']}, consistency {s['consistency_max_hashes']} "
        f"({s['old_sizes_with_consistency_over_ceil_log2']:,} of "
        f"{s['old_sizes']:,} old sizes need ceil(log2 n) + 1)"
    )

    sec, r = v["seconds"], v["ratios"]

    def row(label: str, seconds: float, ratio: float | None = None) -> str:
        return f"  {label:<62}{ms(seconds)}" + ("" if ratio is None else f"   {ratio:5.2f}x")

    lines += [
        "",
        f"offline verification of the whole log ({v['entries']:,} entries, {v['entry_bytes'] / 1e6:.1f} MB; "
        f"medians of {v['rounds']} interleaved rounds)",
        row(f"read every entry, pages of {MAX_ENTRIES_PER_PAGE:,} (not in the ratios)", v["read_seconds"]),
        row("plain SHA-256 of every entry", sec["plain_sha256"], 1.0),
        row(
            f"verify: signature, leaf hashes, root, {v['inclusion_proofs_checked']} inclusion proofs",
            sec["verify"],
            r["verify"],
        ),
        row("verify, streaming root (O(log n) memory)", sec["verify_streaming"], r["verify_streaming"]),
        row("verify + parse every entry's JSON, check its seq", sec["verify_parsing"], r["verify_parsing"]),
        f"  {'one inclusion proof checked':<62}{us(v['inclusion_proof_verify_seconds'])}",
        "",
        "goals",
    ]
    gm, goals = report["goals_met"], report["goals"]
    lines += [
        f"  inclusion proofs <= {goals['max_proof_hashes']} hashes at {report['entries']:,}        "
        f"{met(gm['inclusion_max_hashes'])} (longest {s['inclusion_max_hashes']})",
        f"  consistency proofs <= {goals['max_proof_hashes']} hashes at {report['entries']:,}      "
        f"{met(gm['consistency_max_hashes'])} (longest {s['consistency_max_hashes']}; RFC 9162 allows "
        "ceil(log2 n) + 1)",
        f"  proof time flat (<= {goals['proof_time_growth']}x from {report['stages'][0]:,} to "
        f"{report['stages'][-1]:,})  {met(gm['proof_time_flat'])} ({max(g.values()):.2f}x)",
        f"  verification <= {goals['verify_over_plain_sha256']}x plain SHA-256             "
        f"{met(gm['verify_over_plain_sha256'])} ({r['verify']:.2f}x)",
        "",
        checks_line(report["checks"]),
        f"(wall time {report['wall_seconds']:.0f} s)",
    ]
    return "\n".join(lines) + "\n"


def checks_line(checks: dict[str, bool]) -> str:
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        return f"checks: {len(failed)} of {len(checks)} FAILED: {', '.join(failed)}"
    return f"checks: all {len(checks)} passed"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--entries", type=int, default=None, help="entries in the log (default 100000, --quick 5000)"
    )
    p.add_argument("--samples", type=int, default=None, help="proofs of each kind per size (default 200)")
    p.add_argument("--batch", type=int, default=1000, help="entries per transaction when appending")
    p.add_argument("--single", type=int, default=None, help="last entries appended one per transaction")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the offline verification (default 7)")
    p.add_argument(
        "--verify-proofs", type=int, default=100, help="inclusion proofs the offline verification checks"
    )
    p.add_argument(
        "--database-url",
        default=None,
        help="a PostgreSQL server (postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB): the run creates "
        "a scratch database there and drops it; default: a fresh SQLite file under --out",
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="folder for the SQLite file (default bench/out)"
    )
    p.add_argument("--keep", action="store_true", help="keep the PostgreSQL scratch database")
    p.add_argument("--quick", action="store_true", help="5,000 entries: the smoke test")
    args = p.parse_args(argv)
    q = args.quick
    args.entries = args.entries or (5_000 if q else 100_000)
    args.samples = args.samples or (30 if q else 200)
    args.single = args.single if args.single is not None else (200 if q else 2_000)
    args.rounds = args.rounds or (3 if q else 7)
    if args.entries < 2:
        p.error("--entries must be at least 2")
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with database(args) as (url, kind):
        report = run(args, url, kind)
    print(render(report), end="")
    print(json.dumps(report, separators=(",", ":")))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
