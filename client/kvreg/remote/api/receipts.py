"""Graft receipts on a registry: ``POST`` and ``GET /api/v1/namespaces/{ns}/receipts``.

The receipt is built and signed by the caller (``kvreg.remote.receipts``); this
module sends its exact bytes, checks the answer's shape and that the registry
stored the receipt sent (by digest), and lists a namespace's receipts. Sending the
same receipt twice stores it once, so the transport's retries are safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, RemoteError
from kvreg.remote.api.core import ApiCore

__all__ = ["ReceiptsApi", "SentReceipt"]


@dataclass(frozen=True, slots=True)
class SentReceipt:
    """The registry's answer: the receipt's id there, its digest, whether it was new, its entry."""

    id: int
    receipt_digest: str
    created: bool
    log_index: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "receipt_digest": self.receipt_digest,
            "created": self.created,
            "log_index": self.log_index,
        }


class ReceiptsApi(ApiCore):
    """The receipt endpoints of :class:`kvreg.remote.http.RegistryClient`."""

    def post_receipt(self, namespace: str, signed: bytes, payload_digest: Digest) -> SentReceipt:
        """Send the signed receipt ``signed`` (exact bytes) to ``namespace``; the registry must answer
        that it stored the receipt whose payload digest is ``payload_digest``."""
        reply = self._call(
            "POST",
            self._ns_url(namespace, "receipts"),
            expect=(200, 201),
            content=lambda: bytes(signed),
            headers={"Content-Type": "application/json"},
        )
        doc = self._json(reply, "POST receipt")
        rid: Any = doc.get("id")
        stated: Any = doc.get("receipt_digest")  # checked by Digest below
        index: Any = doc.get("log_index")
        if isinstance(rid, bool) or not isinstance(rid, int):
            raise RemoteError("the registry's answer to a receipt has no id")
        try:
            digest = str(Digest(stated))
        except KvregError as e:
            raise RemoteError("the registry's answer to a receipt has no receipt digest") from e
        if digest != str(payload_digest):
            raise RemoteError(f"the registry stored receipt {digest}, not the one sent")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise RemoteError("the registry's answer to a receipt has a malformed log index")
        return SentReceipt(rid, digest, reply.status == 201, index)

    def list_receipts(
        self, namespace: str, *, digest: str | None = None, limit: int = 50, offset: int = 0
    ) -> dict[str, Any]:
        """``GET /namespaces/{ns}/receipts``: where and when an artifact (or any of the namespace's) was
        grafted, newest first. The answer as the registry sent it (``receipts``, ``total``)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if digest is not None:
            params["digest"] = str(Digest(digest))
        doc = self._json(
            self._call("GET", self._ns_url(namespace, "receipts"), params=params),
            f"GET receipts of {namespace}",
        )
        if not isinstance(doc.get("receipts"), list):
            raise RemoteError(f"the registry's receipt list of {namespace} is malformed")
        return doc
