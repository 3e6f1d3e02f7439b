"""The kvreg refs an OCI registry holds: tags of ``<prefix>/<namespace>`` repositories whose
manifest is a kvreg artifact (``kvreg ls-remote``), and :class:`RefListings`, the listings a
long-running process (``kvreg engine serve``) keeps instead of listing again per request.

Without a namespace, the namespaces are the repositories under the prefix that the
registry's catalog (``GET /v2/_catalog``) lists; registries that keep no catalog
(GHCR, ECR, ...) need the namespace named. The referrers tags (``sha256-<hex>``),
tags that are not kvreg ref names and manifests that are not kvreg artifacts are
left out. Nothing here is verified beyond the manifest's digest: listing trusts no
signature (a pull verifies).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kvreg.core.errors import KvregError, ManifestInvalidError, UsageError
from kvreg.core.names import validate_name, validate_namespace
from kvreg.core.oci import ANNOTATION_CREATED, parse_artifact_manifest, tag_for
from kvreg.remote.oci.client import OciClient

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_LISTING_TTL", "MISS_REFRESH_AFTER", "RefListings", "list_namespaces", "list_refs"]

#: How long a namespace's listing is used before it is listed again.
DEFAULT_LISTING_TTL = 60.0
#: A listing at least this old is listed again when a request found nothing in it.
MISS_REFRESH_AFTER = 5.0


def list_namespaces(client: OciClient) -> list[str]:
    """The namespaces whose repositories the registry's catalog lists under the prefix."""
    try:
        repositories = client.list_repositories()
    except KvregError as e:
        raise UsageError(
            f"the registry at {client.location.host} does not list its repositories ({e.message})",
            hint="name the namespace: kvreg ls-remote NAME NAMESPACE",
        ) from e
    prefix = client.location.prefix
    lead = f"{prefix}/" if prefix else ""
    out = []
    for repo in repositories:
        rest = repo[len(lead) :] if repo.startswith(lead) else None
        if rest and "/" not in rest:
            try:
                out.append(validate_namespace(rest))
            except UsageError:
                continue
    return sorted(set(out))


def list_refs(client: OciClient, namespace: str) -> list[dict[str, Any]]:
    """Rows ``{"ref", "digest" (the kvreg manifest), "tag" (immutable), "updated_at", "oci_digest"}``."""
    repository = client.repository(namespace)
    rows = []
    for tag in sorted(client.list_tags(repository)):
        try:
            tag_for(validate_name(tag))
        except UsageError:
            continue
        raw = client.get_manifest(repository, tag)
        if raw is None:
            continue
        try:
            art = parse_artifact_manifest(raw)
        except ManifestInvalidError:
            log.debug("%s:%s is not a kvreg artifact", repository, tag)
            continue
        rows.append(
            {
                "ref": f"{namespace}/{tag}",
                "digest": str(art.kvreg_manifest),
                "tag": art.immutable,
                "updated_at": art.annotations.get(ANNOTATION_CREATED),
                "oci_digest": str(art.digest),
            }
        )
    return rows


class RefListings:
    """The kvreg refs of each namespace of one OCI registry, listed once and used for ``ttl``
    seconds: listing a namespace reads every tag's manifest, one request each, which a server
    must not pay for every prompt. A request that finds nothing usable may ask for a fresh
    listing (:meth:`refs` with ``after_miss``), which is granted when the one kept is at least
    ``miss_after`` seconds old, so that a burst of unseen prompts lists once. Thread-safe."""

    def __init__(
        self,
        ttl: float = DEFAULT_LISTING_TTL,
        *,
        miss_after: float = MISS_REFRESH_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self.miss_after, self._clock = ttl, miss_after, clock
        self._kept: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._lock = threading.Lock()
        self.listed = 0  # listings read from the registry (a figure for tests and operators)

    def refs(self, client: OciClient, namespace: str, *, after_miss: bool = False) -> list[dict[str, Any]]:
        """The rows :func:`list_refs` gives for ``namespace``: kept ones while fresh, else listed now."""
        now = self._clock()
        with self._lock:
            kept = self._kept.get(namespace)
        if kept is not None:
            age = now - kept[0]
            if age < (self.miss_after if after_miss else self.ttl):
                return list(kept[1])
        rows = list_refs(client, namespace)
        with self._lock:
            self._kept[namespace] = (now, rows)
            self.listed += 1
        log.debug("listed %d kvreg ref(s) of %s", len(rows), namespace)
        return list(rows)

    def refresh_after_miss(self, namespace: str) -> bool:
        """Whether a request that found nothing would have ``namespace`` listed again."""
        with self._lock:
            kept = self._kept.get(namespace)
        return kept is None or self._clock() - kept[0] >= self.miss_after
