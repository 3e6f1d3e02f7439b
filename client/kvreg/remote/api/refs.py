"""Envelopes and refs of a registry namespace: signed envelopes by manifest digest, ref reads,
compare-and-swap changes and listings, with the audit entry the registry names for each.

The envelope bytes are not verified here (``kvreg.remote.pushing`` and ``kvreg.remote.pulling`` do) and the
audit entries are not checked (``kvreg.remote.auditlog`` does).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvreg.core.digest import Digest
from kvreg.core.envelope import MAX_ENVELOPE_BYTES
from kvreg.core.errors import KvregError, NotFoundError, RefConflictError, RemoteError
from kvreg.core.names import RefName, validate_name
from kvreg.remote.api.core import ApiCore, parse_log_index

log = logging.getLogger(__name__)

__all__ = [
    "LOG_INDEX_HEADER",
    "EnvelopeStored",
    "RefUpdate",
    "RefValue",
    "RefsApi",
    "RemoteRef",
    "RemoteRefEntry",
]

LOG_INDEX_HEADER = "X-Kvreg-Log-Index"


class RefValue(NamedTuple):
    """What a remote ref points at: the manifest digest and whether the ref is a tag."""

    digest: Digest
    tag: bool


@dataclass(frozen=True, slots=True)
class RemoteRefEntry:
    """One ref of a registry namespace."""

    ref: RefName
    digest: Digest
    tag: bool
    updated_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": str(self.ref),
            "digest": str(self.digest),
            "tag": self.tag,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class RemoteRef:
    """One ref as ``GET .../refs/{name}`` answers it, with the audit entry of its latest change."""

    digest: Digest
    tag: bool
    log_index: int | None

    @property
    def value(self) -> RefValue:
        return RefValue(self.digest, self.tag)


@dataclass(frozen=True, slots=True)
class EnvelopeStored:
    """The answer to an envelope upload: ``created`` (new to the namespace) and its audit entry."""

    created: bool
    log_index: int | None


@dataclass(frozen=True, slots=True)
class RefUpdate:
    """The answer to a ref change: ``created`` and the audit entry of the change (None: not told)."""

    created: bool
    log_index: int | None


class RefsApi(ApiCore):
    """The envelope and ref endpoints of :class:`kvreg.remote.http.RegistryClient`."""

    # --- envelopes -----------------------------------------------------------------------

    def put_envelope(self, namespace: str, manifest_digest: Digest, envelope_bytes: bytes) -> bool:
        """Upload a signed envelope (exact bytes); True if it was new to the namespace."""
        return self.store_envelope(namespace, manifest_digest, envelope_bytes).created

    def store_envelope(
        self, namespace: str, manifest_digest: Digest, envelope_bytes: bytes
    ) -> EnvelopeStored:
        """Upload a signed envelope (exact bytes); whether it was new, and the audit entry that logged it."""
        digest = Digest(manifest_digest)
        reply = self._call(
            "PUT",
            self._ns_url(namespace, "envelopes", digest),
            expect=(200, 201),
            content=lambda: bytes(envelope_bytes),
            headers={"Content-Type": "application/json"},
        )
        index = None
        if reply.body.strip():
            index = parse_log_index(
                self._json(reply, f"PUT envelope {digest}").get("log_index"), "an envelope"
            )
        return EnvelopeStored(reply.status == 201, index)

    def get_envelope(self, namespace: str, manifest_digest: Digest) -> bytes:
        """The exact envelope bytes the registry holds (not verified here)."""
        return self.get_envelope_logged(namespace, manifest_digest)[0]

    def get_envelope_logged(self, namespace: str, manifest_digest: Digest) -> tuple[bytes, int | None]:
        """The exact envelope bytes and the audit entry that logged them (``X-Kvreg-Log-Index``)."""
        reply = self._call(
            "GET", self._ns_url(namespace, "envelopes", Digest(manifest_digest)), limit=MAX_ENVELOPE_BYTES
        )
        header = reply.headers.get(LOG_INDEX_HEADER)
        index = None
        if header is not None:
            if not header.strip().isdigit():
                raise RemoteError(f"the registry sent an invalid {LOG_INDEX_HEADER} header: {header[:40]!r}")
            index = parse_log_index(int(header.strip()), "an envelope")
        return reply.body, index

    # --- refs ----------------------------------------------------------------------------

    def get_ref(self, namespace: str, name: str) -> RefValue | None:
        """What ``namespace/name`` points at, or None if the ref does not exist."""
        ref = self.get_ref_logged(namespace, name)
        return None if ref is None else ref.value

    def get_ref_logged(self, namespace: str, name: str) -> RemoteRef | None:
        """``get_ref`` with the audit entry of the ref's latest change (None: the registry names none)."""
        try:
            reply = self._call("GET", self._ns_url(namespace, "refs", validate_name(name)))
        except NotFoundError as e:
            if e.code == "REF_UNKNOWN":
                return None
            raise
        what = f"ref {namespace}/{name}"
        doc = self._json(reply, f"GET {what}")
        return RemoteRef(
            self._digest(doc.get("digest"), what),
            doc.get("tag") is True,
            parse_log_index(doc.get("log_index"), what),
        )

    def put_ref(
        self, namespace: str, name: str, digest: Digest, expected: Digest | None, *, tag: bool = False
    ) -> bool:
        """Move ``namespace/name`` to ``digest`` by compare-and-swap; True if the ref was created.

        See :meth:`update_ref`, which also answers the audit entry of the change.
        """
        return self.update_ref(namespace, name, digest, expected, tag=tag).created

    def update_ref(
        self, namespace: str, name: str, digest: Digest, expected: Digest | None, *, tag: bool = False
    ) -> RefUpdate:
        """Move ``namespace/name`` to ``digest`` by compare-and-swap: created?, and the change's audit entry.

        ``expected=None`` creates it (``If-None-Match: *``); a digest moves it only
        if it is there now (``If-Match``). ``RefConflictError`` when it is not,
        ``TagImmutableError`` for a tag. A conflict answered to a *retried* request
        is checked: if the ref now is exactly what was asked, the first attempt
        succeeded and its answer was lost, and that is success.
        """
        digest = Digest(digest)
        url = self._ns_url(namespace, "refs", validate_name(name))
        headers = {"If-None-Match": "*"} if expected is None else {"If-Match": f'"{Digest(expected)}"'}
        retried = [False]

        def mark() -> None:
            retried[0] = True

        try:
            reply = self._call(
                "PUT",
                url,
                expect=(200, 201),
                json_body={"digest": str(digest), "tag": tag},
                headers=headers,
                on_retry=mark,
            )
        except RefConflictError:  # TagImmutableError too
            if retried[0]:
                now = self.get_ref(namespace, name)
                if now is not None and now.digest == digest and (now.tag or not tag):
                    log.info("ref %s/%s is at %s after a retried update: done", namespace, name, digest)
                    return RefUpdate(expected is None, None)
            raise
        index = None
        if reply.body.strip():
            what = f"ref {namespace}/{name}"
            index = parse_log_index(self._json(reply, f"PUT {what}").get("log_index"), what)
        return RefUpdate(reply.status == 201, index)

    def delete_ref(self, namespace: str, name: str, expected: Digest) -> None:
        """Delete ``namespace/name`` if it points at ``expected`` (namespace admin; tags cannot go)."""
        url = self._ns_url(namespace, "refs", validate_name(name))
        retried = [False]

        def mark() -> None:
            retried[0] = True

        try:
            self._call(
                "DELETE", url, expect=(200, 204), headers={"If-Match": f'"{Digest(expected)}"'}, on_retry=mark
            )
        except NotFoundError as e:
            if not (retried[0] and e.code == "REF_UNKNOWN"):
                raise

    def list_refs(self, namespace: str) -> list[RemoteRefEntry]:
        """Every ref of ``namespace``, sorted by name."""
        doc = self._json(self._call("GET", self._ns_url(namespace, "refs")), f"GET refs of {namespace}")
        items = doc.get("refs")
        if not isinstance(items, list):
            raise RemoteError(f"the registry's ref list of {namespace} is malformed")
        out: list[RemoteRefEntry] = []
        for item in items:
            if not isinstance(item, dict):
                raise RemoteError(f"the registry's ref list of {namespace} is malformed")
            name = item.get("name")
            try:
                ref = RefName(namespace, name)  # type: ignore[arg-type]
            except KvregError as e:
                raise RemoteError(f"the registry listed an invalid ref name {name!r}") from e
            updated = item.get("updated_at")
            out.append(
                RemoteRefEntry(
                    ref,
                    self._digest(item.get("digest"), f"ref {ref}"),
                    item.get("tag") is True,
                    updated if isinstance(updated, str) else None,
                )
            )
        out.sort(key=lambda e: e.ref.name)
        return out
