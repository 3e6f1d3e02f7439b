"""A bounded soak of a real registry: concurrent pushers, pullers, searchers, GC and web readers.

One run per backend, on loopback only, that stops by itself after ``--duration`` seconds:

1. **A real registry**: ``kvreg serve`` under uvicorn (one process) started by
   ``tests/integration/registry_server.py``'s ``running_registry``, the same plumbing the
   integration tests use: ``sqlite-folder`` (the embedded defaults) or ``postgres-s3``
   (a fresh PostgreSQL database and a fresh SeaweedFS bucket from the services that
   ``scripts/services.sh start`` runs; see ``tests/services.py``). Two public namespaces
   take the load (``main``); a third (``churn``) takes pushes that are deleted again.
2. **Synthetic artifacts**: small, real, signed artifacts (``tests/core/manifest_helpers``
   ``signed_artifact``: a tiny two-layer llama's manifest with real block keys, chunks of
   1-8 KiB of deterministic bytes, tokens, text and witness logits, signed with a fresh
   Ed25519 key the namespaces accept). Artifact ``i`` is rebuilt from ``(seed, i)`` when it
   is needed, so nothing is kept in memory but its number. Artifacts of one *family* share
   a two-block token prefix and its chunks (dedupe, and routes that match a prefix).
   They are not real KV tensors: the soak measures the registry, not the engine.
3. **Workers** (threads, ``--workers``; each role at least once), each through the
   client library (``kvreg.remote.http.RegistryClient``, with retries off so that no
   5xx/429 is hidden) or httpx for the web pages:

   - ``push``: open an upload session, upload the missing objects, store the signed
     envelope, create the artifact's own ref, then move the family's shared ``hot``
     ref by compare-and-swap (several pushers race on it: the expected 409s);
   - ``pull``: a random artifact pushed earlier: its envelope verified against the
     namespace's key, every object downloaded (hashed by the client) and compared
     byte for byte with the rebuilt original;
   - ``search`` and ``route``: ``GET /artifacts`` for an artifact's unique word (exactly
     one hit), a family's word (at least as many hits as pushes of the family finished
     before the query), and ``POST /route`` with an artifact's block keys (it must come
     back with every block matched);
   - ``web``: a browser session signed in through the ``/signin`` form (CSRF token):
     the library, a namespace page, an artifact page (which must name the digest),
     the audit page and an audit entry page;
   - ``gc``: ``POST /gc`` with grace 0 (the harshest setting: anything not held by an
     envelope or an open upload session goes at once), paced by ``--gc-interval``;
   - ``audit``: a client ``RemoteLog`` that takes fresh signed checkpoints and proves each
     consistent with the previous one, paced by ``--audit-interval``;
   - ``churn``: pushes into ``churn``, then deletes the ref and the envelope (their
     objects become garbage), and abandons upload sessions with objects no envelope
     will name (garbage too).

   A sampler reads the server's RSS (``VmRSS`` of ``/proc/PID/status``) every second.
4. **At the end** (after the workers stopped): a last GC (grace 0); then every artifact
   pushed into ``main`` is pulled and compared byte for byte; every artifact's own ref
   points at it; search totals equal the envelopes pushed (none lost, none twice);
   before the last GC the storage held exactly the objects the live envelopes name plus
   known garbage, and after it exactly the live objects (the listing holds no digest
   twice; the database's ``objects`` rows are the stored objects; no upload session is
   left open); the whole audit log is downloaded and verified by the client
   (``kvreg.remote.auditexport.verify_remote_log``: consecutive sequence numbers, every
   entry hashing to its leaf, the root equal to a signed checkpoint's), and its entry
   counts by type equal what the workers did (envelopes stored and deleted, refs created,
   moved and deleted, GC runs, upload sessions opened).

Errors are counted by HTTP status and error code; the only ones expected are ``409
REF_CONFLICT`` of the ``hot`` refs' compare-and-swaps. Any other error, any mismatch, or
RSS at the end above twice its value after warm-up (the first fifth of the run) fails the
run (exit 1). No timing threshold: the figures (throughput, p50/p99 per operation) are
reported, not judged; on a small shared host they are noisy.

This script does not start or stop PostgreSQL or SeaweedFS, reach anything but
127.0.0.1 and those services, or keep anything after the run (the database and bucket
are dropped; the data folder is under ``--out`` and removed unless ``--keep``).

Usage::

    .venv/bin/python bench/soak.py [--backend sqlite-folder|postgres-s3|both] [--duration 600]
        [--workers 8] [--seed 0] [--json FILE] [--out bench/out] [--keep]

The last line of stdout is the whole report as JSON (also written to ``--json FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from core.manifest_helpers import CONFIG_FP, MODEL_FP, TOKENIZER_FP, Built, signed_artifact  # noqa: E402
from integration.registry_server import BACKENDS, Registry, running_registry  # noqa: E402
from kvreg.core.blockkey import block_keys  # noqa: E402
from kvreg.core.digest import Digest  # noqa: E402
from kvreg.core.envelope import Envelope, verify_envelope  # noqa: E402
from kvreg.core.errors import KvregError, RefConflictError  # noqa: E402
from kvreg.core.keys import SigningKey  # noqa: E402
from kvreg.core.logverify import parse_entry  # noqa: E402
from kvreg.core.trust import TrustPolicy  # noqa: E402
from kvreg.remote.auditexport import verify_remote_log  # noqa: E402
from kvreg.remote.auditlog import RemoteLog  # noqa: E402
from kvreg.remote.http import RegistryClient  # noqa: E402
from kvreg.store.home import Home  # noqa: E402

BLOCK = 4
FAMILIES = 8
PREFIX_TOKENS = 2 * BLOCK
CSRF_INPUT = re.compile(r'name="csrf" value="([^"]+)"')
#: Errors that are part of the workload: a compare-and-swap on a ref another pusher moved.
EXPECTED_ERRORS = frozenset({"409 REF_CONFLICT"})
ROLES = ("push", "pull", "search", "web", "gc", "audit", "churn")
EXTRA_ROLES = ("push", "pull", "search", "web")


# --- artifacts ---------------------------------------------------------------------------------


def _rng(*parts: object) -> random.Random:
    return random.Random(hashlib.sha256(repr(parts).encode()).digest())


def family_of(index: int) -> int:
    return index % FAMILIES


def family_word(family: int) -> str:
    return f"soakfamily{family:02d}z"


def artifact_word(index: int) -> str:
    return f"soakart{index:07d}q"


def tokens_of(seed: int, index: int) -> list[int]:
    family = family_of(index)
    prefix = [_rng(seed, "prefix", family).randrange(1, 32000) for _ in range(PREFIX_TOKENS)]
    r = _rng(seed, "suffix", index)
    return prefix + [r.randrange(1, 32000) for _ in range(BLOCK * r.randint(1, 4))]


def _chunk_bytes(key: Digest) -> bytes:
    """Deterministic bytes for the chunk whose block key is ``key`` (1-8 KiB): equal keys, equal chunks."""
    seed = hashlib.sha256(str(key).encode()).digest()
    size = 1024 + int.from_bytes(seed[:2], "big") % (7 * 1024)
    return hashlib.shake_256(seed).digest(size)


class Artifacts:
    """Artifact ``i`` of a run, rebuilt on demand from ``(seed, i)`` and signed with the run's key."""

    def __init__(self, seed: int, key: SigningKey) -> None:
        self.seed = seed
        self.key = key
        self._cache: dict[int, Built] = {}
        self._lock = threading.Lock()

    def build(self, index: int) -> Built:
        with self._lock:
            hit = self._cache.get(index)
        if hit is not None:
            return hit
        tokens = tokens_of(self.seed, index)
        keys = block_keys(MODEL_FP, TOKENIZER_FP, CONFIG_FP, tokens, BLOCK)
        text = f"soak artifact {artifact_word(index)} of {family_word(family_of(index))}".encode()
        built = signed_artifact(
            self.key,
            tokens,
            [_chunk_bytes(k) for k in keys],
            text=text,
            logits=hashlib.shake_256(f"logits {self.seed} {index}".encode()).digest(128),
            block_size=BLOCK,
            verdict="pass" if index % 3 else "fail",
            annotations={"title": f"soak {index}"},
        )
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[index] = built
        return built

    def block_keys(self, index: int) -> list[Digest]:
        return block_keys(MODEL_FP, TOKENIZER_FP, CONFIG_FP, tokens_of(self.seed, index), BLOCK)


# --- measurements ------------------------------------------------------------------------------


class Mismatch(Exception):
    """A check of the soak failed: a lost, wrong or duplicated object, ref, hit or log entry."""


@dataclass
class Stats:
    """Latencies per operation, errors by ``STATUS CODE``, counts of what was done, mismatches."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    done: Counter[str] = field(default_factory=Counter)
    mismatches: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, op: str, seconds: float) -> None:
        with self.lock:
            self.latencies.setdefault(op, []).append(seconds)

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.done[what] += n

    def error(self, op: str, exc: BaseException) -> None:
        key = error_key(exc)
        with self.lock:
            self.errors[key] += 1
            if key not in EXPECTED_ERRORS and len(self.error_samples) < 20:
                self.error_samples.append(f"{op}: {key}: {exc}"[:2000])

    def mismatch(self, text: str) -> None:
        with self.lock:
            if len(self.mismatches) < 50:
                self.mismatches.append(text)
            self.done["mismatches"] += 1

    def unexpected_errors(self) -> int:
        return sum(n for k, n in self.errors.items() if k not in EXPECTED_ERRORS)


def error_key(exc: BaseException) -> str:
    if isinstance(exc, KvregError):
        return f"{exc.details.get('http_status', '-')} {exc.code}"
    if isinstance(exc, HttpStatusError):
        return f"{exc.status} {exc.code}"
    if isinstance(exc, Mismatch):
        return "MISMATCH"
    return f"- {type(exc).__name__}"


class HttpStatusError(Exception):
    """A web page answered an unexpected status."""

    def __init__(self, status: int, code: str, url: str) -> None:
        super().__init__(f"HTTP {status} ({code}) for {url}")
        self.status = status
        self.code = code


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the workers did that the end checks compare with the registry (under ``lock``)."""

    next_index: int = 0
    pushed: dict[int, tuple[str, str]] = field(default_factory=dict)  # index -> (namespace, digest)
    family_done: Counter[tuple[str, int]] = field(default_factory=Counter)
    churn_live: dict[int, str] = field(default_factory=dict)  # index -> digest, pushed and not deleted
    garbage: set[str] = field(default_factory=set)  # digests of abandoned uploads and deleted envelopes
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_index(self) -> int:
        with self.lock:
            self.next_index += 1
            return self.next_index - 1


class Soak:
    """One soak against one running registry (see the module docstring)."""

    def __init__(self, registry: Registry, *, duration: float, workers: int, seed: int) -> None:
        self.registry = registry
        self.duration = duration
        self.workers = max(workers, len(ROLES))
        self.seed = seed
        self.stats = Stats()
        self.ledger = Ledger()
        self.stop = threading.Event()
        self.key = SigningKey.generate()
        self.artifacts = Artifacts(seed, self.key)
        self.policy = TrustPolicy()
        self.rss: list[tuple[float, int]] = []
        self.main: list[str] = []
        self.churn = ""
        self.writer = ""
        self.temp = Path(tempfile.mkdtemp(prefix="kvreg-soak-"))

    # --- setup -----------------------------------------------------------------------------

    def setup(self) -> None:
        reg = self.registry
        self.main = [reg.namespace(public=True), reg.namespace(public=True)]
        self.churn = reg.namespace(public=True)
        for ns in [*self.main, self.churn]:
            reg.register_key(ns, self.key.public_key.to_text())
            self.policy.allow(ns, self.key.public_key)
        self.writer = reg.user({ns: "write" for ns in [*self.main, self.churn]})

    def client(self, token: str | None = None) -> RegistryClient:
        # retries=0: a 5xx or 429 must show up as an error, not be retried away.
        return RegistryClient(self.registry.url, token, retries=0, timeout=120)

    # --- the loop ------------------------------------------------------------------------

    def _loop(
        self, op: str, body: Callable[[random.Random], None], pause: float = 0.0
    ) -> Callable[[int], None]:
        def run(worker: int) -> None:
            rng = _rng(self.seed, op, worker)
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    body(rng)
                except Mismatch as e:
                    self.stats.mismatch(f"{op}: {e}")
                except Exception as e:  # every error is counted; the unexpected fail the run
                    self.stats.error(op, e)
                    if not isinstance(e, KvregError | HttpStatusError):
                        self.stats.error_samples.append(traceback.format_exc()[-2000:])
                finally:
                    self.stats.record(f"{op}_loop", time.perf_counter() - started)
                if pause:
                    self.stop.wait(pause)

        return run

    def _timed(self, op: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            out = fn()
        except RefConflictError:
            self.stats.record(op, time.perf_counter() - started)
            raise
        self.stats.record(op, time.perf_counter() - started)
        return out

    def run(self) -> dict[str, Any]:
        self.setup()
        roles = list(ROLES) + [EXTRA_ROLES[i % len(EXTRA_ROLES)] for i in range(self.workers - len(ROLES))]
        clients = {"writer": self.client(self.writer), "admin": self.client(self.registry.admin_token)}
        bodies: dict[str, Callable[[int], None]] = {
            "push": self._loop("push", lambda r: self.push_one(clients["writer"], r)),
            "pull": self._loop("pull", lambda r: self.pull_one(clients["writer"], r)),
            "search": self._loop("search", lambda r: self.search_one(clients["writer"], r)),
            "gc": self._loop("gc", lambda r: self.gc_one(clients["admin"]), pause=self.gc_interval),
            "churn": self._loop("churn", lambda r: self.churn_one(clients["writer"], clients["admin"], r)),
        }
        threads: list[threading.Thread] = []
        for i, role in enumerate(roles):
            if role == "web":
                target: Callable[[], None] = self._web_worker(i)
            elif role == "audit":
                target = self._audit_worker(clients["admin"])
            else:
                target = self._bind(bodies[role], i)
            threads.append(threading.Thread(target=target, name=f"soak-{role}-{i}", daemon=True))
        sampler = threading.Thread(target=self._sample_rss, name="soak-rss", daemon=True)
        started = time.monotonic()
        sampler.start()
        for t in threads:
            t.start()
        self.stop.wait(self.duration)
        self.stop.set()
        for t in threads:
            t.join(timeout=300)
        elapsed = time.monotonic() - started
        sampler.join(timeout=10)
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            self.stats.mismatch(f"workers still running 300 s after the stop: {stuck}")
        checks = self.final_checks(clients["writer"], clients["admin"])
        for c in clients.values():
            c.close()
        return self.report(roles, elapsed, checks)

    gc_interval = 1.0
    audit_interval = 0.5

    @staticmethod
    def _bind(fn: Callable[[int], None], worker: int) -> Callable[[], None]:
        return lambda: fn(worker)

    def _sample_rss(self) -> None:
        proc = self.registry.proc
        assert proc is not None
        start = time.monotonic()
        while True:
            value = rss_kib(proc.pid)
            if value is not None:
                self.rss.append((time.monotonic() - start, value))
            if self.stop.wait(1.0):
                value = rss_kib(proc.pid)
                if value is not None:
                    self.rss.append((time.monotonic() - start, value))
                return

    # --- operations ------------------------------------------------------------------------

    def _put(self, client: RegistryClient, ns: str, digest: Digest, data: bytes, upload: str) -> None:
        started = time.perf_counter()
        client.put_object(ns, digest, io.BytesIO(data), len(data), upload_id=upload)
        self.stats.record("put_object", time.perf_counter() - started)

    @contextlib.contextmanager
    def _session(self, client: RegistryClient, ns: str, built: Built) -> Iterator[None]:
        """An upload session with ``built``'s missing objects sent; closed after the block. If the
        block fails, the objects count as known garbage (held, but no envelope may name them)."""
        digests = built.manifest.object_digests()
        upload, missing = self._timed("open_upload", lambda: client.open_upload(ns, digests))
        self.stats.count("uploads_opened")
        finished = False
        try:
            for d in missing:
                data = built.objects[d]
                self._timed(
                    "put_object",
                    lambda d=d, data=data: client.put_object(
                        ns, d, io.BytesIO(data), len(data), upload_id=upload
                    ),
                )
                self.stats.count("objects_sent")
            yield
            finished = True
        finally:
            if not finished:
                with self.ledger.lock:
                    self.ledger.garbage.update(str(d) for d in [built.digest, *digests])
            self._timed("close_upload", lambda: client.close_upload(ns, upload))

    def _store_artifact(self, client: RegistryClient, ns: str, built: Built, ref: str) -> None:
        """Upload ``built``'s missing objects, store its envelope and create ``ref`` to it."""
        with self._session(client, ns, built):
            stored = self._timed(
                "put_envelope", lambda: client.store_envelope(ns, built.digest, built.envelope_bytes)
            )
            if stored.created:
                self.stats.count("envelopes_created")
            if self._timed("ref_create", lambda: client.put_ref(ns, ref, built.digest, None)):
                self.stats.count("refs_created")

    def push_one(self, client: RegistryClient, rng: random.Random) -> None:
        index = self.ledger.take_index()
        ns = self.main[index % len(self.main)]
        built = self.artifacts.build(index)
        started = time.perf_counter()
        self._store_artifact(client, ns, built, f"a{index}")
        self.stats.record("push", time.perf_counter() - started)
        with self.ledger.lock:
            self.ledger.pushed[index] = (ns, str(built.digest))
            self.ledger.family_done[ns, family_of(index)] += 1
        self.move_hot(client, ns, index, built.digest)

    def move_hot(self, client: RegistryClient, ns: str, index: int, digest: Digest) -> None:
        """Move the namespace's shared ref ``hot`` to ``digest`` by compare-and-swap, as a client
        that lost a race does: read it again and retry (at most 5 tries). Each lost race is a 409
        ``REF_CONFLICT``, the one expected error."""
        del index
        target = ns
        for _ in range(5):
            current = self._timed("ref_get", lambda: client.get_ref(target, "hot"))
            expected = None if current is None else current.digest
            try:
                created = self._timed("ref_cas", lambda e=expected: client.put_ref(target, "hot", digest, e))
            except RefConflictError as e:
                self.stats.error("ref_cas", e)
                self.stats.count("hot_conflicts")
                continue
            self.stats.count("refs_created" if created else "refs_moved")
            return
        self.stats.count("hot_gave_up")

    def _pick(self, rng: random.Random) -> tuple[int, str, str] | None:
        with self.ledger.lock:
            if not self.ledger.pushed:
                return None
            # Half the time one of the newest 50 (just pushed, racing GC), else any.
            keys = list(self.ledger.pushed) if rng.random() < 0.5 else sorted(self.ledger.pushed)[-50:]
            index = rng.choice(keys)
            ns, digest = self.ledger.pushed[index]
        return index, ns, digest

    def pull_artifact(self, client: RegistryClient, ns: str, index: int) -> int:
        """Pull artifact ``index`` from ``ns`` and compare every byte; returns the bytes compared."""
        built = self.artifacts.build(index)
        raw = client.get_envelope(ns, built.digest)
        manifest = verify_envelope(Envelope.from_json_bytes(raw), self.policy, ns)
        if manifest.digest != built.digest or raw != built.envelope_bytes:
            raise Mismatch(f"{ns} envelope {built.digest} is not the one pushed")
        compared = 0
        with tempfile.TemporaryDirectory(dir=self.temp) as tmp:
            for d in manifest.object_digests():
                dest = Path(tmp) / str(d).replace(":", "_")
                got = client.get_object_to(ns, d, dest)
                data = dest.read_bytes()
                if got.digest != d or data != built.objects[d]:
                    raise Mismatch(f"{ns} object {d} of artifact {index} differs from the bytes pushed")
                compared += len(data)
        return compared

    def pull_one(self, client: RegistryClient, rng: random.Random) -> None:
        picked = self._pick(rng)
        if picked is None:
            self.stop.wait(0.05)
            return
        index, ns, _ = picked
        size = self._timed("pull", lambda: self.pull_artifact(client, ns, index))
        self.stats.count("pulls")
        self.stats.count("pull_bytes", size)

    def search_one(self, client: RegistryClient, rng: random.Random) -> None:
        picked = self._pick(rng)
        if picked is None:
            self.stop.wait(0.05)
            return
        index, ns, digest = picked
        kind = rng.randrange(3)
        if kind == 0:
            doc = self._timed("search_word", lambda: client.search(q=artifact_word(index), limit=5))
            hits = [a.get("digest") for a in doc["artifacts"]]
            if doc["total"] != 1 or hits != [digest]:
                raise Mismatch(f"search for artifact {index}'s word: total {doc['total']}, hits {hits}")
        elif kind == 1:
            family = family_of(index)
            with self.ledger.lock:
                at_least = self.ledger.family_done[ns, family]
            doc = self._timed(
                "search_family", lambda: client.search(q=family_word(family), namespace=ns, limit=10)
            )
            if doc["total"] < at_least:
                raise Mismatch(f"search for family {family} in {ns}: {doc['total']} < {at_least} pushed")
        else:
            keys = self.artifacts.block_keys(index)
            found = self._timed(
                "route",
                lambda: client.route(
                    model_fingerprint=MODEL_FP,
                    tokenizer_fingerprint=TOKENIZER_FP,
                    config_fingerprint=CONFIG_FP,
                    block_size=BLOCK,
                    block_keys=keys,
                    namespaces=[ns],
                    limit=20,
                ),
            )
            full = {str(c.manifest_digest) for c in found if c.matched_blocks == len(keys)}
            if digest not in full:
                raise Mismatch(
                    f"route for artifact {index} in {ns}: not among the full matches {sorted(full)}"
                )
        self.stats.count("searches")

    def gc_one(self, admin: RegistryClient) -> None:
        del admin
        with self.registry.admin() as http:
            r = self._timed("gc", lambda: http.post("/gc", json={"grace_seconds": 0}, timeout=300))
        if r.status_code != 200:
            raise HttpStatusError(r.status_code, r.headers.get("x-kvreg-error-code", "-"), "/gc")
        self.stats.count("gc_runs")
        self.stats.count("gc_objects_removed", int(r.json()["objects_removed"]))

    def churn_one(self, writer: RegistryClient, admin: RegistryClient, rng: random.Random) -> None:
        ns = self.churn
        if rng.random() < 0.3:  # an abandoned upload: objects no envelope will ever name
            blobs = [rng.randbytes(rng.randint(512, 4096)) for _ in range(rng.randint(1, 3))]
            digests = [Digest.of_bytes(b) for b in blobs]
            with self.ledger.lock:
                self.ledger.garbage.update(str(d) for d in digests)
            upload, missing = self._timed("open_upload", lambda: writer.open_upload(ns, digests))
            self.stats.count("uploads_opened")
            try:
                for d, b in zip(digests, blobs, strict=True):
                    if d in missing:
                        self._timed(
                            "put_object",
                            lambda d=d, b=b: writer.put_object(
                                ns, d, io.BytesIO(b), len(b), upload_id=upload
                            ),
                        )
            finally:
                self._timed("close_upload", lambda: writer.close_upload(ns, upload))
            self.stats.count("abandoned_uploads")
            return
        index = self.ledger.take_index()
        built = self.artifacts.build(index)
        self._store_artifact(writer, ns, built, f"c{index}")
        with self.ledger.lock:
            self.ledger.churn_live[index] = str(built.digest)
        if rng.random() < 0.7:
            self._timed("ref_delete", lambda: admin.delete_ref(ns, f"c{index}", built.digest))
            self.stats.count("refs_deleted")
            with admin_http(self.registry) as http:
                r = self._timed(
                    "envelope_delete", lambda: http.delete(f"/namespaces/{ns}/envelopes/{built.digest}")
                )
            if r.status_code != 204:
                raise HttpStatusError(
                    r.status_code, r.headers.get("x-kvreg-error-code", "-"), "DELETE envelope"
                )
            self.stats.count("envelopes_deleted")
            with self.ledger.lock:
                del self.ledger.churn_live[index]
                self.ledger.garbage.update(str(d) for d in [built.digest, *built.manifest.object_digests()])

    def _web_worker(self, worker: int) -> Callable[[], None]:
        def run() -> None:
            rng = _rng(self.seed, "web", worker)
            with httpx.Client(base_url=self.registry.url, timeout=120, follow_redirects=False) as web:
                try:
                    self._sign_in(web)
                except Exception as e:
                    self.stats.error("web_signin", e)
                    return
                body = self._loop("web", lambda r: self.web_one(web, r))
                del rng
                body(worker)

        return run

    def _sign_in(self, web: httpx.Client) -> None:
        page = web.get("/signin")
        match = CSRF_INPUT.search(page.text)
        if page.status_code != 200 or match is None:
            raise HttpStatusError(page.status_code, "NO_FORM", "/signin")
        r = web.post(
            "/signin", data={"token": self.registry.admin_token, "csrf": match.group(1), "next": "/"}
        )
        if r.status_code != 303 or not web.cookies.get("kvreg_session"):
            raise HttpStatusError(r.status_code, "SIGNIN", "/signin")

    def _page(self, web: httpx.Client, op: str, url: str, must_contain: str | None = None) -> str:
        r = self._timed(op, lambda: web.get(url))
        if r.status_code != 200:
            raise HttpStatusError(r.status_code, r.headers.get("x-kvreg-error-code", "-"), url)
        if must_contain is not None and must_contain not in r.text:
            raise Mismatch(f"{url} does not show {must_contain}")
        self.stats.count("pages")
        return r.text

    def web_one(self, web: httpx.Client, rng: random.Random) -> None:
        picked = self._pick(rng)
        kind = rng.randrange(5)
        if kind == 0 or picked is None:
            self._page(web, "web_library", "/")
        elif kind == 1:
            self._page(web, "web_namespace", f"/ns/{picked[1]}")
        elif kind == 2:
            self._page(web, "web_artifact", f"/ns/{picked[1]}/artifacts/{picked[2]}", picked[2])
        elif kind == 3:
            self._page(web, "web_audit", "/audit")
        else:
            with self.registry.admin() as http:
                size = int(http.get("/log/checkpoint").text.splitlines()[1])
            self._page(web, "web_audit_entry", f"/audit/entries/{rng.randrange(size)}")

    def _audit_worker(self, admin: RegistryClient) -> Callable[[], None]:
        def run() -> None:
            audit = RemoteLog(Home(self.temp / "auditor"), "origin", admin)
            body = self._loop(
                "audit", lambda r: self._timed("log_check", audit.refresh), pause=self.audit_interval
            )
            body(0)

        return run

    # --- the end ---------------------------------------------------------------------------

    def final_checks(self, writer: RegistryClient, admin: RegistryClient) -> dict[str, Any]:
        checks: dict[str, Any] = {}
        led = self.ledger
        live = {d for _, d in led.pushed.values()} | set(led.churn_live.values())
        live_objects: set[str] = set(live)  # the registry stores each manifest as an object too
        for index in [*led.pushed, *led.churn_live]:
            live_objects.update(str(d) for d in self.artifacts.build(index).manifest.object_digests())

        before = self._stored()
        checks["storage_listing_no_duplicates_before_gc"] = before["duplicates"] == 0
        stored_before = set(before["digests"])
        checks["storage_before_gc_live_present"] = not (live_objects - stored_before)
        extra = stored_before - live_objects
        checks["storage_before_gc_extra_is_known_garbage"] = extra <= led.garbage
        checks["storage_before_gc_extra_objects"] = len(extra)

        with self.registry.admin() as http:
            r = http.post("/gc", json={"grace_seconds": 0}, timeout=600)
        checks["final_gc_ok"] = r.status_code == 200
        if r.status_code == 200:
            self.stats.count("gc_runs")
        after = self._stored()
        stored_after = set(after["digests"])
        checks["storage_listing_no_duplicates_after_gc"] = after["duplicates"] == 0
        checks["storage_after_gc_equals_live_objects"] = stored_after == live_objects
        checks["storage_after_gc_missing"] = sorted(live_objects - stored_after)[:10]
        checks["storage_after_gc_unexpected"] = sorted(stored_after - live_objects)[:10]
        rows, open_sessions = self._database_rows()
        checks["database_objects_equal_storage"] = rows == stored_after
        checks["no_upload_session_left_open"] = open_sessions == 0

        # Every artifact pushed into main: pullable, byte-identical, its own ref at it.
        pulled = lost = 0
        for index, (ns, digest) in sorted(led.pushed.items()):
            try:
                self.pull_artifact(writer, ns, index)
                ref = writer.get_ref(ns, f"a{index}")
                if ref is None or str(ref.digest) != digest:
                    raise Mismatch(f"ref {ns}/a{index} is {ref}, not {digest}")
                pulled += 1
            except (KvregError, Mismatch) as e:
                lost += 1
                self.stats.mismatch(f"final pull of artifact {index}: {e}")
        checks["artifacts_pushed"] = len(led.pushed)
        checks["artifacts_pulled_byte_identical"] = pulled
        checks["artifacts_lost"] = lost

        hots = [writer.get_ref(ns, "hot") for ns in self.main]
        checks["hot_refs_at_pushed_artifacts"] = all(h is not None and str(h.digest) in live for h in hots)
        per_ns = Counter(ns for ns, _ in led.pushed.values())
        per_ns[self.churn] = len(led.churn_live)
        totals = {ns: int(writer.search(namespace=ns, limit=1)["total"]) for ns in [*self.main, self.churn]}
        checks["search_totals_equal_envelopes"] = all(totals[ns] == per_ns[ns] for ns in totals)
        checks["search_totals"] = totals
        checks["envelopes_live"] = len(live)

        audit = verify_remote_log(RemoteLog(Home(self.temp / "verifier"), "origin", admin))
        types = Counter(parse_entry(e, i)["type"] for i, e in enumerate(audit.entries))
        done = self.stats.done
        expected_types = {
            "envelope.stored": done["envelopes_created"],
            "envelope.deleted": done["envelopes_deleted"],
            "ref.created": done["refs_created"],
            "ref.moved": done["refs_moved"],
            "ref.deleted": done["refs_deleted"],
            "gc.run": done["gc_runs"],
            "upload.opened": done["uploads_opened"],
        }
        checks["audit_log_verified_entries"] = audit.checkpoint.size
        checks["audit_log_counts_match"] = all(types[t] == n for t, n in expected_types.items())
        checks["audit_log_counts"] = {t: {"log": types[t], "done": n} for t, n in expected_types.items()}
        return checks

    def _stored(self) -> dict[str, Any]:
        listing = [str(o.digest) for o in self.registry.storage().iter_objects()]
        return {"digests": listing, "duplicates": len(listing) - len(set(listing))}

    def _database_rows(self) -> tuple[set[str], int]:
        from sqlalchemy import func, select

        from kvreg_registry.db.engine import Database
        from kvreg_registry.db.models import StoredObject, UploadSession
        from kvreg_registry.settings import Settings

        db = Database(Settings.from_env(self.registry.env).effective_database_url)
        try:
            with db.read() as s:
                rows = set(s.scalars(select(StoredObject.digest)))
                open_sessions = s.scalar(
                    select(func.count()).select_from(UploadSession).where(UploadSession.closed_at.is_(None))
                )
        finally:
            db.dispose()
        return rows, int(open_sessions or 0)

    def report(self, roles: list[str], elapsed: float, checks: dict[str, Any]) -> dict[str, Any]:
        ops = {}
        for op, values in sorted(self.stats.latencies.items()):
            if op.endswith("_loop"):
                continue
            ops[op] = {
                "count": len(values),
                "per_second": round(len(values) / elapsed, 2),
                "p50_ms": round(percentile(values, 0.50) * 1000, 2),
                "p99_ms": round(percentile(values, 0.99) * 1000, 2),
                "max_ms": round(max(values) * 1000, 2),
            }
        rss = [v for _, v in self.rss]
        warm = [v for t, v in self.rss if t >= self.duration / 5] or rss
        memory = {
            "samples": len(rss),
            "first_kib": rss[0] if rss else None,
            "after_warmup_kib": warm[0] if warm else None,
            "last_kib": rss[-1] if rss else None,
            "max_kib": max(rss) if rss else None,
            # One sample per tenth of the run: [seconds, KiB].
            "series": [[round(s), v] for s, v in self.rss[:: max(1, len(self.rss) // 10)]],
        }
        memory_flat = bool(rss) and rss[-1] <= 2 * warm[0]
        bool_checks = {k: v for k, v in checks.items() if isinstance(v, bool)}
        ok = (
            all(bool_checks.values())
            and checks.get("artifacts_lost") == 0
            and self.stats.unexpected_errors() == 0
            and not self.stats.mismatches
            and memory_flat
        )
        shutil.rmtree(self.temp, ignore_errors=True)
        return {
            "backend": self.registry.backend,
            "duration_s": self.duration,
            "elapsed_s": round(elapsed, 1),
            "seed": self.seed,
            "workers": dict(Counter(roles)),
            "ops": ops,
            "done": dict(self.stats.done),
            "errors": dict(self.stats.errors),
            "unexpected_errors": self.stats.unexpected_errors(),
            "error_samples": self.stats.error_samples,
            "mismatches": self.stats.mismatches,
            "memory": memory,
            "memory_flat": memory_flat,
            "checks": checks,
            "ok": ok,
        }


@contextlib.contextmanager
def admin_http(registry: Registry) -> Iterator[httpx.Client]:
    with registry.admin() as http:
        yield http


# --- entry points ------------------------------------------------------------------------------


def soak_backend(backend: str, root: Path, *, duration: float, workers: int, seed: int) -> dict[str, Any]:
    """Start a fresh registry on ``backend`` under ``root``, soak it, stop it; the report."""
    with running_registry(backend, root) as registry:
        report = Soak(registry, duration=duration, workers=workers, seed=seed).run()
        alive = registry.proc is not None and registry.proc.poll() is None
        report["server_alive_at_end"] = alive
        report["ok"] = report["ok"] and alive
        if not report["ok"]:
            report["server_log_tail"] = registry.log_tail(3000)
    return report


def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg_at_start": os.getloadavg(),
    }


def render(report: dict[str, Any]) -> str:
    lines = []
    for run in report["runs"]:
        lines.append(f"\n== {run['backend']}: {run['elapsed_s']} s, workers {run['workers']}, ok={run['ok']}")
        lines.append(f"{'operation':<18}{'count':>8}{'per s':>9}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
        for op, s in run["ops"].items():
            lines.append(
                f"{op:<18}{s['count']:>8}{s['per_second']:>9}{s['p50_ms']:>10}{s['p99_ms']:>10}{s['max_ms']:>10}"
            )
        m = run["memory"]
        lines.append(
            f"server RSS KiB: first {m['first_kib']}, after warm-up {m['after_warmup_kib']}, "
            f"last {m['last_kib']}, max {m['max_kib']} ({m['samples']} samples)"
        )
        lines.append(f"errors: {run['errors']} (unexpected: {run['unexpected_errors']})")
        for k, v in run["checks"].items():
            lines.append(f"  {k}: {v}")
        for text in run["mismatches"][:10] + run["error_samples"][:10]:
            lines.append(f"  ! {text}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load per backend")
    p.add_argument("--workers", type=int, default=8, help=f"worker threads (at least {len(ROLES)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the report here")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--keep", action="store_true", help="keep the registry's data folder")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = list(BACKENDS) if args.backend == "both" else [args.backend]
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "bench": "soak",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "runs": [],
    }
    for backend in backends:
        root = Path(tempfile.mkdtemp(prefix=f"soak-{backend}-", dir=args.out))
        try:
            run = soak_backend(backend, root, duration=args.duration, workers=args.workers, seed=args.seed)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        report["runs"].append(run)
        print(render({"runs": [run]}), flush=True)
    report["ok"] = all(r["ok"] for r in report["runs"])
    text = json.dumps(report, sort_keys=True)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
