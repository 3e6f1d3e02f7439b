"""``OciClient``: the whole client of one OCI registry, and :func:`connect_oci` for a named remote.

The endpoints are in ``blobs`` and ``manifests``; the mechanics (authentication,
retries, errors) in ``transport``. Credentials for a named remote come from
``kvreg login`` (``credentials.json``), else from Docker's and Podman's files and
credential helpers (``kvreg.remote.oci.dockerconfig``), else none (anonymous).
``$KVREG_OCI_CHUNK_MIB`` sets the chunked-upload threshold (:func:`chunk_threshold`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kvreg.core.errors import ConfigError
from kvreg.remote.oci.dockerconfig import find_credentials
from kvreg.remote.oci.manifests import ManifestsApi
from kvreg.remote.oci.transport import DEFAULT_CHUNK_THRESHOLD
from kvreg.remote.remotes import BasicCredentials, Credentials, Remote, RemoteConfig
from kvreg.store.home import Home

__all__ = ["CHUNK_ENV_VAR", "OciClient", "chunk_threshold", "connect_oci", "credentials_for"]

CHUNK_ENV_VAR = "KVREG_OCI_CHUNK_MIB"


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


def chunk_threshold(environ: Mapping[str, str] | None = None) -> int:
    """Blobs above this many bytes are uploaded in chunks of this size: ``$KVREG_OCI_CHUNK_MIB``
    MiB (e.g. 10 for a registry whose upload parts are capped), else 64 MiB."""
    text = (os.environ if environ is None else environ).get(CHUNK_ENV_VAR, "").strip()
    if not text:
        return DEFAULT_CHUNK_THRESHOLD
    if not text.isdigit() or not 1 <= int(text) <= 4096:
        raise ConfigError(f"${CHUNK_ENV_VAR} must be a number of MiB from 1 to 4096, not {text!r}")
    return int(text) * 1024 * 1024


def connect_oci(home: Home, name: str, **options: Any) -> OciClient:
    """An ``OciClient`` for the OCI remote ``name`` with its credentials (the caller closes it)."""
    remote = RemoteConfig(home).get(name)
    options.setdefault("chunk_threshold", chunk_threshold())
    return OciClient(remote.oci, credentials_for(home, remote), remote_name=name, **options)
