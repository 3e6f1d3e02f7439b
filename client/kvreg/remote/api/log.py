"""The registry's audit log as served: its key, signed checkpoints, entries and proofs.

Answers are checked for shape only (consecutive entries, base64, 32-byte hashes,
bounded sizes); nothing here verifies a signature or a proof
(``kvreg.core.logverify`` and ``kvreg.remote.auditlog`` do).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from kvreg.core.errors import RemoteError, StoreError
from kvreg.remote.api.core import ApiCore, parse_b64_hash, parse_size

__all__ = ["MAX_CHECKPOINT_BYTES", "LogApi", "LogEntryBytes", "LogKey", "LogPage", "LogProof"]

#: A signed checkpoint is a few hundred bytes; anything over this is refused unread.
MAX_CHECKPOINT_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class LogKey:
    """``GET /log/key``: the log's name (``origin``) and its C2SP verifier key text (not verified here)."""

    origin: str
    verifier_key: str


@dataclass(frozen=True, slots=True)
class LogEntryBytes:
    """One audit entry as served: its position, its exact bytes, and the leaf hash the server states."""

    seq: int
    entry: bytes
    leaf_hash: bytes


@dataclass(frozen=True, slots=True)
class LogPage:
    """``GET /log/entries``: entries (consecutive, from the requested start) and the log's size."""

    entries: list[LogEntryBytes]
    size: int


@dataclass(frozen=True, slots=True)
class LogProof:
    """An inclusion or consistency proof as served (``index``/``leaf_hash`` only for inclusion).

    ``root`` is the server's claim; verifiers check proofs against the root of a
    *signed* checkpoint, never this one.
    """

    size: int
    root: bytes
    hashes: list[bytes]
    index: int | None = None
    leaf_hash: bytes | None = None


class LogApi(ApiCore):
    """The audit log endpoints of :class:`kvreg.remote.http.RegistryClient`."""

    def log_key(self) -> LogKey:
        """``GET /log/key``: the log's origin and verifier key text (the caller pins and verifies)."""
        doc = self._json(self._call("GET", self._url("log", "key")), "GET log key")
        origin, verifier = doc.get("origin"), doc.get("verifier_key")
        if not isinstance(origin, str) or not isinstance(verifier, str) or not origin or not verifier:
            raise RemoteError("the registry's log key answer is malformed")
        return LogKey(origin, verifier)

    def log_checkpoint(self) -> str:
        """``GET /log/checkpoint``: the latest signed checkpoint note, as text (not verified here)."""
        reply = self._call("GET", self._url("log", "checkpoint"), limit=MAX_CHECKPOINT_BYTES)
        try:
            return reply.body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RemoteError("the registry's checkpoint is not UTF-8 text") from e

    def log_entries(self, start: int, end: int) -> LogPage:
        """``GET /log/entries``: entries ``[start, end)`` (the registry sends at most 1000 per call).

        The answer is checked for shape only: consecutive sequence numbers from
        ``start``, base64 bytes, 32-byte leaf hashes. Whether the bytes hash to the
        leaves and the leaves to a signed root is the caller's job.
        """
        if not 0 <= start <= end:
            raise StoreError(f"invalid log entry range [{start}, {end})")
        doc = self._json(
            self._call("GET", self._url("log", "entries"), params={"start": start, "end": end}),
            "GET log entries",
        )
        items = doc.get("entries")
        if not isinstance(items, list) or len(items) > end - start:
            raise RemoteError("the registry's page of log entries is malformed")
        out: list[LogEntryBytes] = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or item.get("seq") != start + i:
                raise RemoteError(
                    f"the registry's log entries are not consecutive from {start} (at {start + i})"
                )
            raw = item.get("entry")
            try:
                entry = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
            except (binascii.Error, ValueError):
                entry = None
            if entry is None:
                raise RemoteError(f"log entry {start + i} is not base64")
            out.append(
                LogEntryBytes(
                    start + i, entry, parse_b64_hash(item.get("leaf_hash"), f"leaf hash {start + i}")
                )
            )
        return LogPage(out, parse_size(doc.get("size"), "log size"))

    def _log_proof(self, doc: dict[str, Any], what: str) -> LogProof:
        hashes = doc.get("hashes")
        if not isinstance(hashes, list) or len(hashes) > 128:
            raise RemoteError(f"the registry's {what} is malformed")
        return LogProof(
            parse_size(doc.get("size"), f"{what} size"),
            parse_b64_hash(doc.get("root"), f"{what} root"),
            [parse_b64_hash(h, f"{what} hash") for h in hashes],
        )

    def log_inclusion_proof(self, index: int, size: int) -> LogProof:
        """``GET /log/proof/inclusion``: the audit path of entry ``index`` in the tree of ``size`` leaves."""
        what = f"inclusion proof of entry {index} at size {size}"
        doc = self._json(
            self._call("GET", self._url("log", "proof", "inclusion"), params={"index": index, "size": size}),
            what,
        )
        proof = self._log_proof(doc, what)
        if doc.get("index") != index:
            raise RemoteError(f"the registry answered an {what} for entry {doc.get('index')!r}")
        return LogProof(
            proof.size,
            proof.root,
            proof.hashes,
            index,
            parse_b64_hash(doc.get("leaf_hash"), f"{what} leaf hash"),
        )

    def log_consistency_proof(self, first: int, second: int) -> LogProof:
        """``GET /log/proof/consistency``: the proof that the tree of ``first`` leaves is a prefix of
        the tree of ``second`` leaves (``second`` is always explicit: the log may grow meanwhile)."""
        what = f"consistency proof from size {first} to size {second}"
        doc = self._json(
            self._call(
                "GET", self._url("log", "proof", "consistency"), params={"first": first, "second": second}
            ),
            what,
        )
        return self._log_proof(doc, what)
