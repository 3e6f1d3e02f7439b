"""Objects on demand: make the objects a graft needs present, fetching missing ones from a remote.

With disk paging (``kvreg.store.eviction``) the local store may hold an artifact's
ref and manifest but not all of its objects: eviction removed them to keep the
store under ``store.max-bytes``. Before a graft of ``k`` blocks, a caller (``kvreg
ask``) asks for exactly the objects it will read (:func:`needed_for_graft`) and
:func:`ensured` fetches the missing ones from the registry, each verified as every
pull verifies it: downloaded into the pull staging folder
(``kvreg.remote.staging``), hashed while it streams, refused unless it hashes to
the digest the **signed** manifest names and, where the manifest states it, has
its size; then moved into the store. Nothing unverified becomes visible.

The manifest must come from :func:`kvreg.store.artifacts.open_artifact` (its
signature checked against the trust policy): only objects it names can be fetched.
While the block of :func:`ensured` runs, a lease (``leases.lease``) keeps eviction
off the needed objects; after fetching, the store is brought back under its budget
(``eviction.evict_if_over_budget``), evicting other objects, never the needed ones.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, UsageError
from kvreg.core.manifest import Manifest
from kvreg.remote.progress import Counter, NullProgress, Progress, run_parallel, validate_jobs
from kvreg.remote.staging import ObjectSource, Staging, fetch_units
from kvreg.store import access_log, eviction, leases
from kvreg.store.home import Home

log = logging.getLogger(__name__)

__all__ = ["EnsureReport", "ensure_objects", "ensured", "needed_for_graft"]


@dataclass(slots=True)
class EnsureReport:
    """What :func:`ensured` found present, fetched, and evicted to stay under budget."""

    needed: int = 0
    present: int = 0
    fetched: list[str] = field(default_factory=list)
    bytes_fetched: int = 0
    evicted: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "needed": self.needed,
            "present": self.present,
            "fetched": list(self.fetched),
            "bytes_fetched": self.bytes_fetched,
            "evicted": list(self.evicted),
        }


def needed_for_graft(manifest: Manifest, blocks: int, *, witness: bool = False) -> list[Digest]:
    """The objects a graft of the first ``blocks`` chunks reads: the manifest, the tokens,
    those chunks and, with ``witness``, the witness logits (a graft without the probe)."""
    if not 0 <= blocks <= len(manifest.chunks):
        raise UsageError(f"the artifact has {len(manifest.chunks)} chunks, not {blocks}")
    out = [manifest.digest, manifest.tokens.digest, *(c.digest for c in manifest.chunks[:blocks])]
    if witness:
        out.append(manifest.witness.logits_digest)
    return out


@contextlib.contextmanager
def ensured(
    home: Home,
    client: ObjectSource,
    namespace: str,
    manifest: Manifest,
    digests: Iterable[Digest],
    *,
    jobs: int = 4,
    progress: Progress | None = None,
    evict: bool = True,
) -> Iterator[EnsureReport]:
    """Make ``digests`` (objects ``manifest`` names, or the manifest itself) present and keep them
    leased for the block; see the module docstring. ``DigestMismatchError`` if the registry
    sends other bytes (nothing is stored then)."""
    validate_jobs(jobs)
    wanted = list(dict.fromkeys(Digest(d) for d in digests))
    named = {manifest.digest, *manifest.object_digests()}
    foreign = [d for d in wanted if d not in named]
    if foreign:
        raise UsageError(
            f"object {foreign[0]} is not named by manifest {manifest.digest}: only an artifact's own "
            "objects are fetched on demand"
        )
    report = EnsureReport(needed=len(wanted))
    with leases.lease(home, wanted):
        absent = [d for d in wanted if not home.objects.has(d)]
        report.present = len(wanted) - len(absent)
        if manifest.digest in absent:
            raise UsageError(
                f"manifest {manifest.digest} is not in the local store", hint="pull the artifact first"
            )
        if absent:
            sizes = manifest.stated_sizes()
            cap = client.limit("max_object_bytes", 0) or None
            stop = threading.Event()
            counter = Counter(progress or NullProgress(), stop)
            with Staging(home, manifest.digest) as staging:

                def fetch(unit: list[Digest]) -> None:
                    staging.fetch_unit(client, namespace, unit, sizes=sizes, cap=cap, counter=counter)

                try:
                    run_parallel(fetch_units(client, absent, sizes, jobs), fetch, jobs, stop)
                    staging.install(absent)
                except DigestMismatchError:
                    staging.discard()
                    raise
                staging.discard()
            report.fetched = [str(d) for d in absent]
            report.bytes_fetched = counter.bytes
            log.info(
                "fetched %d missing objects of %s (%d bytes)", len(absent), manifest.digest, counter.bytes
            )
        access_log.touch(home, wanted)
        if evict:
            evicted = eviction.evict_if_over_budget(home)
            if evicted is not None:
                report.evicted = list(evicted.evicted)
        yield report


def ensure_objects(
    home: Home,
    client: ObjectSource,
    namespace: str,
    manifest: Manifest,
    digests: Iterable[Digest],
    **options: Any,
) -> EnsureReport:
    """:func:`ensured` without holding the lease afterwards (the graft takes its own)."""
    with ensured(home, client, namespace, manifest, digests, **options) as report:
        return report
