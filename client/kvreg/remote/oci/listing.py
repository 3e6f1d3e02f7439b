"""The kvreg refs an OCI registry holds: tags of ``<prefix>/<namespace>`` repositories whose
manifest is a kvreg artifact (``kvreg ls-remote``).

Without a namespace, the namespaces are the repositories under the prefix that the
registry's catalog (``GET /v2/_catalog``) lists; registries that keep no catalog
(GHCR, ECR, ...) need the namespace named. The referrers tags (``sha256-<hex>``),
tags that are not kvreg ref names and manifests that are not kvreg artifacts are
left out. Nothing here is verified beyond the manifest's digest: listing trusts no
signature (a pull verifies).
"""

from __future__ import annotations

import logging
from typing import Any

from kvreg.core.errors import KvregError, ManifestInvalidError, UsageError
from kvreg.core.names import validate_name, validate_namespace
from kvreg.core.oci import ANNOTATION_CREATED, parse_artifact_manifest, tag_for
from kvreg.remote.oci.client import OciClient

log = logging.getLogger(__name__)

__all__ = ["list_namespaces", "list_refs"]


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
