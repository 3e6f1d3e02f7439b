"""``OciClient``: the whole client of one OCI registry, and :func:`connect_oci` for a named remote.

The endpoints are in ``blobs`` and ``manifests``; the mechanics (authentication,
retries, errors) in ``transport``. Credentials for a named remote come from
``kvreg login`` (``credentials.json``), else from Docker's and Podman's files and
credential helpers (``kvreg.remote.oci.dockerconfig``), else none (anonymous).
"""

from __future__ import annotations

from typing import Any

from kvreg.remote.oci.dockerconfig import find_credentials
from kvreg.remote.oci.manifests import ManifestsApi
from kvreg.remote.remotes import BasicCredentials, Credentials, Remote, RemoteConfig
from kvreg.store.home import Home

__all__ = ["OciClient", "connect_oci", "credentials_for"]


class OciClient(ManifestsApi):
    """An OCI registry: blobs, manifests, referrers, tags. Thread-safe; a context manager."""

    def __enter__(self) -> OciClient:
        return self


def credentials_for(home: Home, remote: Remote) -> BasicCredentials | None:
    """What to authenticate to the OCI remote with: ``kvreg login``'s, else Docker's or Podman's."""
    stored = Credentials(home).stored_basic(remote.name)
    if stored is not None:
        return stored
    return find_credentials(remote.oci.host)


def connect_oci(home: Home, name: str, **options: Any) -> OciClient:
    """An ``OciClient`` for the OCI remote ``name`` with its credentials (the caller closes it)."""
    remote = RemoteConfig(home).get(name)
    return OciClient(remote.oci, credentials_for(home, remote), remote_name=name, **options)
