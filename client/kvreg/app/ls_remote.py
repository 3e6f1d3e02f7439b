"""``kvreg ls-remote``: the refs of a named remote, in one namespace or every one the caller can read.

The registry's audit-log checkpoint is verified first (and saved when the
listing succeeds). Nothing here renders or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.core.names import validate_namespace
from kvreg.remote.auditlog import contact
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
    with contact(home, name) as (client, audit):
        audit.check()
        namespaces = [validate_namespace(namespace)] if namespace is not None else client.list_namespaces()
        entries = [e for ns in namespaces for e in client.list_refs(ns)]
    return RemoteRefs(remote=name, namespaces=namespaces, refs=[e.to_dict() for e in entries])
