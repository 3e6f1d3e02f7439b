"""``kvreg ls-remote``: the refs of a named remote, in one namespace or every one the caller can read.

The registry's audit-log checkpoint is verified first (and saved when the
listing succeeds). An OCI remote lists the tags of its repositories that hold
kvreg artifacts (``kvreg.remote.oci.listing``; it has no audit log). Nothing here renders or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.core.names import validate_namespace
from kvreg.remote.auditlog import contact
from kvreg.remote.oci.client import connect_oci
from kvreg.remote.oci.listing import list_namespaces, list_refs
from kvreg.remote.remotes import RemoteConfig
from kvreg.store.home import Home


@dataclass(frozen=True)
class RemoteRefs:
    """The refs listed (each as the registry's ref entry's ``to_dict``)."""

    remote: str
    namespaces: list[str]
    refs: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"remote": self.remote, "namespaces": self.namespaces, "refs": self.refs}


def list_remote_refs(home: Home, name: str, namespace: str | None = None) -> RemoteRefs:
    """The refs of the remote ``name`` in ``namespace`` (None: every namespace it lists)."""
    if RemoteConfig(home).get(name).is_oci:
        with connect_oci(home, name) as oci:
            names = [validate_namespace(namespace)] if namespace is not None else list_namespaces(oci)
            rows = [row for ns in names for row in list_refs(oci, ns)]
        return RemoteRefs(remote=name, namespaces=names, refs=rows)
    with contact(home, name) as (client, audit):
        audit.check()
        namespaces = [validate_namespace(namespace)] if namespace is not None else client.list_namespaces()
        entries = [e for ns in namespaces for e in client.list_refs(ns)]
    return RemoteRefs(remote=name, namespaces=namespaces, refs=[e.to_dict() for e in entries])
