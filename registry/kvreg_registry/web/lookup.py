"""Finding an artifact a visitor may read: its namespace, a ref's target, its manifest, title and URL.

Shared by the artifact page and the compare page (``web.views_artifact``,
``web.views_compare``); the access rules are the API's (``services.accounts``).
Reads no object from storage.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg.core.manifest import Manifest
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope as EnvelopeRow
from kvreg_registry.db.models import (
    Namespace,
)
from kvreg_registry.services import accounts, refs


def readable_namespace(session: Session, principal: Principal, name: str) -> Namespace:
    """The namespace if ``principal`` may read it, with the API's answers otherwise: a
    private (or missing) namespace is 401 to an anonymous visitor (the page sends them
    to sign in) and 404 to a signed-in user without a role in it."""
    return accounts.readable_namespace(session, principal, name)


def artifact_url(namespace: str, digest: str) -> str:
    return f"/ns/{namespace}/artifacts/{digest}"


def ref_digest(session: Session, ns: Namespace, name: str) -> Digest:
    """The digest the ref ``ns/name`` points at (``RefNotFoundError`` otherwise)."""
    return Digest(refs.get(session, ns, name).manifest_digest)


def parse_manifest(row: EnvelopeRow) -> tuple[Envelope, Manifest]:
    envelope = Envelope.from_json_bytes(bytes(row.envelope))
    return envelope, Manifest.from_bytes(envelope.payload)


def manifest_title(manifest: Manifest) -> str:
    title = manifest.annotations.get("title")
    return title.strip() if isinstance(title, str) else ""
