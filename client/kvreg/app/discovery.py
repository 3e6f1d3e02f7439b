"""Discovery, the registry half of an ask: which stored states a registry offers for a prompt.

With a :class:`RemoteSource` (an open registry client, from :func:`remote_source`),
:func:`discover` sends the prompt's block keys (``kvreg.core.blockkey``, under the local
engine's fingerprints and block size) to a kvreg registry's route endpoint — the tokens
never leave the host — and pulls each useful candidate that is not in the local store
yet *lazily* (``kvreg.remote.pulling.pull(lazy=True)``: its signature checked against the
local trust policy, only the manifest and the tokens object downloaded, verified), so
that the local router can compare tokens. An OCI registry has no route endpoint: the
candidates are the artifacts tagged in the namespaces the request names, from listings
the source keeps a while (``kvreg.remote.oci.listing.RefListings``), and listed again
after a request that found nothing (:func:`discover_again_after_miss`). A registry that
fails is a help lost, not an error: the report says so and routing stays local.

``kvreg.app.ask`` routes, fetches and grafts; nothing here touches the model.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvreg.app import keyring
from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.remote.auditlog import contact
from kvreg.remote.oci.client import OciClient, connect_oci
from kvreg.remote.oci.listing import RefListings
from kvreg.remote.oci.pulling import pull as oci_pull
from kvreg.remote.ondemand import ensure_objects
from kvreg.remote.pulling import PullReport, pull
from kvreg.remote.remotes import RemoteConfig
from kvreg.store.artifacts import open_artifact
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.core.keys import PublicKey
    from kvreg.engine.runtime import LoadedModel
    from kvreg.remote.api.search import RouteCandidate
    from kvreg.remote.auditlog import RemoteLog
    from kvreg.remote.http import RegistryClient
    from kvreg.remote.progress import Progress

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_PULLS",
    "RemoteReport",
    "RemoteSource",
    "discover",
    "discover_again_after_miss",
    "remote_source",
]

DEFAULT_CANDIDATES = 20  # asked of the registry
DEFAULT_PULLS = 3  # lazy pulls per request, at most
MAX_ROUTE_KEYS = 4096  # the registry's cap; a longer prompt is routed on its first blocks


@dataclass
class RemoteSource:
    """A registry to discover and fetch from: an open client, and how to use it."""

    client: RegistryClient | OciClient  # an OCI registry routes nothing: see _discover_oci
    audit: RemoteLog | None = None  # with it, every lazy pull proves the registry's log entries
    namespaces: Sequence[str] | None = None  # route only within these (default: all readable)
    known_keys: Sequence[PublicKey] = ()
    jobs: int = 4
    progress: Progress | None = None
    candidates: int = DEFAULT_CANDIDATES
    max_pulls: int = DEFAULT_PULLS
    listings: RefListings = field(default_factory=RefListings)  # an OCI registry's tags, kept a while


@dataclass
class RemoteReport:
    """What the registry offered, what was pulled lazily, and what was fetched for the graft."""

    candidates: int = 0
    pulled: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    fetched_objects: int = 0
    fetched_bytes: int = 0
    evicted: int = 0
    error: dict[str, Any] | None = None

    def merge(self, other: RemoteReport) -> None:
        """Add what a second discovery of the same request found (listed again after a miss)."""
        self.candidates = max(self.candidates, other.candidates)
        self.pulled += other.pulled
        self.skipped += other.skipped
        self.error = other.error or self.error

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": self.candidates,
            "pulled": self.pulled,
            "skipped": self.skipped,
            "fetched_objects": self.fetched_objects,
            "fetched_bytes": self.fetched_bytes,
            "evicted": self.evicted,
            "error": self.error,
        }


def _useful(c: RouteCandidate, tries: Sequence[str], prompt_len: int, full_blocks: int) -> bool:
    knowledge = (
        "knowledge" in tries
        and c.verdict == "pass"
        and c.token_count >= prompt_len
        and c.matched_blocks >= full_blocks
    )
    prefix = "prefix" in tries and c.matched_blocks >= 1
    return knowledge or prefix


def discover(
    home: Home,
    lm: LoadedModel,
    prompt: list[int],
    tries: Sequence[str],
    remote: RemoteSource,
    policy: TrustPolicy,
) -> RemoteReport:
    """Ask the registry for candidates by block key and pull the useful new ones lazily."""
    if isinstance(remote.client, OciClient):
        return _discover_oci(home, remote.client, remote, policy)
    report = RemoteReport()
    block = lm.config.block_size
    keys = block_keys(lm.model_fp, lm.tokenizer_fp, lm.config.fingerprint, prompt, block)
    try:
        candidates = remote.client.route(
            model_fingerprint=lm.model_fp,
            tokenizer_fingerprint=lm.tokenizer_fp,
            config_fingerprint=lm.config.fingerprint,
            block_size=block,
            block_keys=keys[:MAX_ROUTE_KEYS],
            namespaces=remote.namespaces,
            limit=remote.candidates,
        )
    except KvregError as exc:  # the registry is a help, not a requirement: route locally
        log.warning("ask: the registry's route endpoint failed: %s", exc.message)
        report.error = exc.to_dict()
        return report
    report.candidates = len(candidates)
    full_blocks = len(prompt) // block
    for c in candidates:
        if len(report.pulled) >= remote.max_pulls:
            break
        if not _useful(c, tries, len(prompt), full_blocks):
            continue
        if home.objects.has(c.manifest_digest):  # here already; its tokens may have been evicted
            _restore_tokens(home, c, remote, policy, report)
            continue
        if not c.refs:
            report.skipped.append(
                {"manifest_digest": str(c.manifest_digest), "reason": "no ref names it on the registry"}
            )
            continue
        ref = RefName(c.namespace, c.refs[0])
        _pull_lazily(
            report,
            ref,
            functools.partial(
                pull,
                home,
                remote.client,
                ref,
                lazy=True,
                trust=policy,
                known_keys=remote.known_keys,
                audit=remote.audit,
            ),
        )
    return report


def _pull_lazily(report: RemoteReport, ref: RefName, pull_it: Callable[[], PullReport]) -> None:
    """Run one lazy pull of a candidate; record it as pulled, or as skipped with the refusal."""
    try:
        pulled = pull_it()
    except KvregError as exc:
        log.info("ask: not pulling %s: %s", ref, exc.message)
        report.skipped.append({"ref": str(ref), "reason": exc.message, "code": exc.code})
        return
    report.pulled.append({"ref": str(ref), "manifest_digest": pulled.digest})


def _discover_oci(
    home: Home, client: OciClient, remote: RemoteSource, policy: TrustPolicy, *, after_miss: bool = False
) -> RemoteReport:
    """An OCI registry has no route endpoint: the candidates are the kvreg artifacts tagged in
    the namespaces the request names (none named: none; routing is then local only), from the
    listings the source keeps (``RefListings``: listed again after a while, or ``after_miss``,
    once a request found nothing, if the one kept is not brand new). Those not in the store
    yet are pulled lazily, verified as every OCI pull is."""
    report = RemoteReport()
    for ns in remote.namespaces or ():
        try:
            rows = remote.listings.refs(client, ns, after_miss=after_miss)
        except KvregError as exc:
            log.warning("ask: cannot list %s on the OCI registry: %s", ns, exc.message)
            report.error = exc.to_dict()
            continue
        report.candidates += len(rows)
        for row in rows:
            if len(report.pulled) >= remote.max_pulls:
                return report
            ref = RefName.parse(row["ref"])
            if home.objects.has(Digest(row["digest"])) and home.refs.get_or_none(ref) is not None:
                continue
            _pull_lazily(
                report,
                ref,
                functools.partial(
                    oci_pull, home, client, ref, lazy=True, trust=policy, known_keys=remote.known_keys
                ),
            )
    return report


def discover_again_after_miss(home: Home, remote: RemoteSource, policy: TrustPolicy) -> RemoteReport | None:
    """After a request found nothing: an OCI registry's namespaces listed again if their listings
    may be refreshed (new artifacts may have been tagged since); None when there is nothing to do."""
    client = remote.client
    if not isinstance(client, OciClient):
        return None  # a kvreg registry routes each request itself
    if not any(remote.listings.refresh_after_miss(ns) for ns in remote.namespaces or ()):
        return None
    return _discover_oci(home, client, remote, policy, after_miss=True)


def _restore_tokens(
    home: Home, c: RouteCandidate, remote: RemoteSource, policy: TrustPolicy, report: RemoteReport
) -> None:
    """Fetch the tokens object of a local artifact that eviction removed (the router compares them)."""
    for name in c.refs:
        ref = RefName(c.namespace, name)
        if home.refs.get_or_none(ref) != c.manifest_digest:
            continue
        try:
            manifest = open_artifact(home, str(ref), trust=policy).manifest
            if not home.objects.has(manifest.tokens.digest):
                got = ensure_objects(
                    home, remote.client, c.namespace, manifest, [manifest.tokens.digest], jobs=1, evict=False
                )
                report.fetched_objects += len(got.fetched)
                report.fetched_bytes += got.bytes_fetched
        except KvregError as exc:
            report.skipped.append({"ref": str(ref), "reason": exc.message, "code": exc.code})
        return


@contextlib.contextmanager
def remote_source(home: Home, name: str | None, namespaces: Sequence[str]) -> Iterator[RemoteSource | None]:
    if name is None:
        yield None
        return
    known = list(keyring.local_public_keys(home).values())
    if RemoteConfig(home).get(name).is_oci:
        with connect_oci(home, name) as oci:
            yield RemoteSource(client=oci, namespaces=list(namespaces) or None, known_keys=known)
        return
    with contact(home, name) as (client, audit):
        yield RemoteSource(client=client, audit=audit, namespaces=list(namespaces) or None, known_keys=known)
