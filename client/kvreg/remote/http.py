"""The registry client: one method per endpoint of the HTTP protocol (``docs/protocol.md``).

``RegistryClient`` is thread-safe (push and pull call it from a
``ThreadPoolExecutor``); its transport (``kvreg.remote.session``) sends the bearer
token to the registry only, never to the storage host of a ``307`` redirect,
retries what the protocol says to retry (every request here is idempotent:
objects are named by digest, envelopes by manifest digest, ref changes are
compare-and-swaps whose retries :meth:`RegistryClient.put_ref` checks), and turns
error answers into typed ``KvregError`` subclasses (``kvreg.remote.errors``).
Uploads and downloads stream; downloads resume with ``Range`` and are hashed.

Answers are validated as they are parsed (digests, names, list shapes): a
malformed answer is a ``RemoteError``, never a half-read value. This module
checks digests of downloads but does not decide what they mean: it verifies no
signatures or manifests and does not touch the local store
(``kvreg.remote.transfer`` does), and it fetches the audit log's key, signed
checkpoints, entries and proofs without verifying any of them
(``kvreg.remote.auditlog`` does). Nothing here prints.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple
from urllib.parse import quote

import httpx

from kvreg.core.digest import Digest
from kvreg.core.envelope import MAX_ENVELOPE_BYTES
from kvreg.core.errors import (
    KvregError,
    NotFoundError,
    RefConflictError,
    RemoteError,
    StoreError,
    UsageError,
)
from kvreg.core.keys import PublicKey
from kvreg.core.names import RefName, validate_name, validate_namespace
from kvreg.remote.errors import RETRY_STATUSES, error_from_response
from kvreg.remote.remotes import API_PREFIX, Credentials, RemoteConfig, normalize_url, validate_token
from kvreg.remote.session import Download, HttpSession, ProgressCallback, Reply, file_body
from kvreg.store.home import Home

log = logging.getLogger(__name__)

__all__ = [
    "API_PREFIX",
    "DEFAULT_MAX_MISSING_DIGESTS",
    "LOG_INDEX_HEADER",
    "MAX_CHECKPOINT_BYTES",
    "RETRY_STATUSES",
    "Download",
    "EnvelopeStored",
    "LogEntryBytes",
    "LogKey",
    "LogPage",
    "LogProof",
    "ProgressCallback",
    "RefUpdate",
    "RefValue",
    "RegistryClient",
    "RemoteRef",
    "RemoteRefEntry",
    "RouteCandidate",
    "StoredObject",
    "connect",
    "error_from_response",
]

UPLOAD_HEADER = "X-Kvreg-Upload"
LOG_INDEX_HEADER = "X-Kvreg-Log-Index"
DEFAULT_MAX_MISSING_DIGESTS = 1000
#: ``POST /route``: block keys per request and candidates per answer (the registry's limits).
MAX_ROUTE_KEYS = 4096
MAX_ROUTE_LIMIT = 100
#: A signed checkpoint is a few hundred bytes; anything over this is refused unread.
MAX_CHECKPOINT_BYTES = 64 * 1024
_MAX_LOG_INDEX = 2**53


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
class StoredObject:
    """The registry's answer to an object upload; ``stored``: the bytes were new to its storage."""

    digest: Digest
    size: int
    stored: bool


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
class RouteCandidate:
    """One artifact ``POST /route`` proposes for a prompt: what the registry says, not verified.

    ``refs`` are ref *names* within ``namespace`` that point at the artifact (``NAME``,
    not ``NS/NAME``). ``matched_blocks``: how many leading block keys of the prompt the
    artifact's manifest holds at the same index (0 when the request sent no keys).
    ``created_at`` is when the registry stored it (RFC 3339, UTC). The caller pulls
    the artifact, checks its signature against its trust policy and compares tokens
    before any graft.
    """

    namespace: str
    manifest_digest: Digest
    refs: list[str]
    matched_blocks: int
    token_count: int
    prompt_tokens: int | None
    block_size: int
    verdict: str | None
    verifier: str | None
    created_at: str | None


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


def _log_index(value: Any, what: str) -> int | None:
    """An audit entry index from an answer: None when absent, else a non-negative integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_LOG_INDEX:
        raise RemoteError(f"the registry sent an invalid audit log index for {what}: {value!r}")
    return value


def _b64_hash(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise RemoteError(f"the registry's {what} is not a base64 string")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise RemoteError(f"the registry's {what} is not base64") from e
    if len(raw) != 32:
        raise RemoteError(f"the registry's {what} is {len(raw)} bytes, not 32")
    return raw


def _size(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_LOG_INDEX:
        raise RemoteError(f"the registry sent an invalid {what}: {value!r}")
    return value


def _segment(value: str) -> str:
    return quote(value, safe=":")


def _jsonable_digests(digests: Iterable[Digest | str]) -> list[str]:
    return [str(Digest(d)) for d in digests]


class RegistryClient:
    """A registry at ``base_url`` (its root; ``/api/v1`` is added), optionally with a bearer token.

    Thread-safe: one client serves every worker of a push or pull. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        remote_name: str | None = None,
        max_connections: int = 32,
        verify: bool | str = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = normalize_url(base_url)
        self.api_url = self.base_url + API_PREFIX
        self.remote_name = remote_name
        self._has_token = token is not None
        self._session = HttpSession(
            self.base_url,
            None if token is None else validate_token(token),
            timeout=timeout,
            connect_timeout=connect_timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            remote_name=remote_name,
            max_connections=max_connections,
            verify=verify,
            transport=transport,
        )
        self._info: dict[str, Any] | None = None
        self._info_lock = threading.Lock()

    def __repr__(self) -> str:
        auth = ", token=***" if self._has_token else ""
        return f"RegistryClient({self.base_url!r}{auth})"

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._session.close()

    @property
    def retries(self) -> int:
        return self._session.retries

    # --- plumbing ------------------------------------------------------------------------

    def _url(self, *segments: str) -> str:
        return self.api_url + "/" + "/".join(_segment(s) for s in segments)

    def _ns_url(self, namespace: str, *segments: str) -> str:
        return self._url("namespaces", validate_namespace(namespace), *segments)

    def _call(self, method: str, url: str, **kwargs: Any) -> Reply:
        return self._session.call(method, url, **kwargs)

    @staticmethod
    def _json(reply: Reply, what: str) -> dict[str, Any]:
        try:
            doc = json.loads(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: [[[[...
            raise RemoteError(f"the registry's answer to {what} is not JSON") from e
        if not isinstance(doc, dict):
            raise RemoteError(f"the registry's answer to {what} is not a JSON object")
        return doc

    @staticmethod
    def _digest(value: Any, what: str) -> Digest:
        try:
            return Digest(value)
        except KvregError as e:
            raise RemoteError(f"the registry sent an invalid digest for {what}: {value!r}") from e

    # --- server --------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """``GET /api/v1/``: version, API level, storage kind and limits (cached after the first call)."""
        with self._info_lock:
            if self._info is None:
                doc = self._json(self._call("GET", self._url()), "GET /api/v1/")
                api = doc.get("api")
                if api is not None and api != 1:
                    raise RemoteError(
                        f"the registry speaks API version {api!r}; this client speaks 1",
                        hint="upgrade kvreg (or use a registry of the same version)",
                    )
                self._info = doc
            return self._info

    def limit(self, name: str, default: int) -> int:
        """A positive integer from ``info()["limits"]``, else ``default``."""
        limits = self.info().get("limits")
        value = limits.get(name) if isinstance(limits, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    def whoami(self) -> dict[str, Any]:
        """``GET /api/v1/whoami``: ``{"user": NAME|None, "admin": bool, "roles": {NS: ROLE}}``."""
        return self._json(self._call("GET", self._url("whoami")), "whoami")

    def list_namespaces(self) -> list[str]:
        """The names of the namespaces the caller can read.

        The registry answers ``{"namespaces": [...]}`` (docs/protocol.md); a bare JSON
        array, as early registries sent, is accepted too.
        """
        reply = self._call("GET", self._url("namespaces"))
        try:
            doc = json.loads(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: [[[[...
            raise RemoteError("the registry's answer to GET namespaces is not JSON") from e
        items = doc.get("namespaces") if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise RemoteError("the registry's namespace list is malformed")
        names: list[str] = []
        for item in items:
            name = item.get("name") if isinstance(item, dict) else item
            try:
                names.append(validate_namespace(str(name)))
            except KvregError:
                log.warning("the registry listed an invalid namespace name %r; ignoring it", name)
        return sorted(names)

    # --- objects -------------------------------------------------------------------------

    def open_upload(self, namespace: str, digests: Sequence[Digest]) -> tuple[str, list[Digest]]:
        """Open an upload session listing ``digests`` (at most ``max_missing_digests``).

        Returns ``(upload id, the digests the namespace does not hold)``. Until the
        session is closed or expires, the registry's GC keeps every listed object.
        """
        body = {"digests": _jsonable_digests(digests)}
        reply = self._call("POST", self._ns_url(namespace, "uploads"), expect=(200, 201), json_body=body)
        doc = self._json(reply, "open upload")
        upload = doc.get("upload")
        if not isinstance(upload, str | int) or isinstance(upload, bool) or str(upload) == "":
            raise RemoteError("the registry's upload session has no id")
        return str(upload), self._digest_list(doc.get("missing"), "the missing objects")

    def close_upload(self, namespace: str, upload_id: str) -> None:
        """Close an upload session (idempotent; an unknown session is fine; retried once only:
        a session left open expires on its own)."""
        try:
            self._call("DELETE", self._ns_url(namespace, "uploads", upload_id), expect=(200, 204), retries=1)
        except NotFoundError as e:
            if e.code != "UPLOAD_UNKNOWN":
                raise

    def _digest_list(self, value: Any, what: str) -> list[Digest]:
        if not isinstance(value, list):
            raise RemoteError(f"the registry's list of {what} is malformed")
        return [self._digest(v, what) for v in value]

    def missing(self, namespace: str, digests: Sequence[Digest]) -> list[Digest]:
        """The digests the namespace does not hold, asked in batches of ``max_missing_digests``."""
        batch = self.limit("max_missing_digests", DEFAULT_MAX_MISSING_DIGESTS)
        out: list[Digest] = []
        items = list(digests)
        for i in range(0, len(items), batch):
            body = {"digests": _jsonable_digests(items[i : i + batch])}
            reply = self._call("POST", self._ns_url(namespace, "objects", "missing"), json_body=body)
            out += self._digest_list(self._json(reply, "missing").get("missing"), "missing objects")
        return out

    def put_object(
        self,
        namespace: str,
        digest: Digest,
        source: str | os.PathLike[str] | BinaryIO,
        size: int,
        *,
        upload_id: str | None = None,
        progress_cb: ProgressCallback | None = None,
    ) -> StoredObject:
        """Upload an object, streamed from a file path or a seekable binary file.

        ``size`` bytes are sent with ``Content-Length``; the registry hashes them
        and refuses (``DigestMismatchError``, exit 3) bytes that are not ``digest``.
        A retry sends the whole object again (``progress_cb`` is then called with
        the negative count of bytes to send again).
        """
        digest = Digest(digest)
        if size < 0:
            raise StoreError(f"object {digest}: negative size {size}")
        body_source: Path | BinaryIO = Path(source) if isinstance(source, str | os.PathLike) else source
        origin = 0 if isinstance(body_source, Path) else body_source.tell()
        sent = [0]

        def body() -> Iterator[bytes]:
            return file_body(body_source, size, digest, sent, progress_cb, origin)

        def rewind() -> None:
            if progress_cb is not None and sent[0]:
                progress_cb(-sent[0])
            sent[0] = 0

        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if upload_id is not None:
            headers[UPLOAD_HEADER] = upload_id
        reply = self._call(
            "PUT",
            self._ns_url(namespace, "objects", digest),
            expect=(200, 201),
            content=body,
            headers=headers,
            on_retry=rewind,
        )
        doc = self._json(reply, f"PUT object {digest}") if reply.body.strip() else {}
        got = doc.get("digest", str(digest))
        if got != digest:
            raise RemoteError(f"the registry stored {got!r} when sent {digest}")
        stored = doc.get("stored")
        return StoredObject(digest, size, stored if isinstance(stored, bool) else reply.status == 201)

    def get_object_to(
        self,
        namespace: str,
        digest: Digest,
        dest: str | os.PathLike[str],
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
    ) -> Download:
        """Download an object into the file ``dest``, resuming after its first ``start`` bytes.

        With ``start > 0`` the first ``start`` bytes already in ``dest`` are kept
        (and hashed) and the rest is asked for with ``Range: bytes=start-``; a
        server that ignores the range starts the file over (``progress_cb`` then
        gets the negative count of bytes dropped). A connection broken in the
        middle resumes from the bytes received. A redirect to a presigned storage
        URL is followed without the token. The file is fsynced; the returned
        digest is the SHA-256 of the whole file, which the caller compares with
        ``digest`` (this method renames and deletes nothing). More than
        ``max_size`` bytes raise ``DigestMismatchError``: they cannot be the object.
        """
        digest = Digest(digest)
        url = self._ns_url(namespace, "objects", digest)
        return self._session.download(
            url, digest, Path(dest), start=start, max_size=max_size, progress_cb=progress_cb
        )

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
            index = _log_index(self._json(reply, f"PUT envelope {digest}").get("log_index"), "an envelope")
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
            index = _log_index(int(header.strip()), "an envelope")
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
            _log_index(doc.get("log_index"), what),
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
            index = _log_index(self._json(reply, f"PUT {what}").get("log_index"), what)
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

    # --- keys and search -----------------------------------------------------------------

    def list_keys(self, namespace: str) -> list[PublicKey]:
        """The public keys the registry has registered for ``namespace`` (revoked ones too).

        These are *not* trusted: pull uses them only to name the signer of a
        manifest that the local trust policy does not accept. Malformed entries
        are skipped with a warning.
        """
        doc = self._json(self._call("GET", self._ns_url(namespace, "keys")), f"GET keys of {namespace}")
        items = doc.get("keys")
        if not isinstance(items, list):
            raise RemoteError(f"the registry's key list of {namespace} is malformed")
        out: list[PublicKey] = []
        for item in items:
            text = item.get("public_key") if isinstance(item, dict) else None
            try:
                out.append(PublicKey.from_text(text))  # type: ignore[arg-type]
            except KvregError:
                log.warning("the registry listed a malformed key for %s; ignoring it", namespace)
        return out

    def search(
        self,
        *,
        namespace: str | None = None,
        model: str | None = None,
        verifier: str | None = None,
        verdict: str | None = None,
        q: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        """``GET /api/v1/artifacts``: ``{"artifacts": [...], "total": N}`` (see docs/protocol.md)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        for key, value in (
            ("namespace", namespace),
            ("model", model),
            ("verifier", verifier),
            ("verdict", verdict),
            ("q", q),
        ):
            if value is not None:
                params[key] = value
        doc = self._json(self._call("GET", self._url("artifacts"), params=params), "search")
        if not isinstance(doc.get("artifacts"), list):
            raise RemoteError("the registry's search answer is malformed")
        return doc

    # --- routing -------------------------------------------------------------------------

    def route(
        self,
        *,
        model_fingerprint: Digest,
        tokenizer_fingerprint: Digest,
        config_fingerprint: Digest,
        block_size: int,
        block_keys: Sequence[Digest],
        namespaces: Sequence[str] | None = None,
        limit: int = 20,
    ) -> list[RouteCandidate]:
        """``POST /api/v1/route``: the artifacts the caller can read that hold the longest prefix
        of ``block_keys`` (the prompt's keys, block 0 first: ``kvreg.core.blockkey.block_keys``),
        most matched blocks first, then verdict ``pass``, then newest. With no keys (a prompt
        shorter than one block): the artifacts made with these fingerprints and block size.

        Refused here, before any request (``UsageError``): more than ``MAX_ROUTE_KEYS`` keys
        (send the first ones), ``limit`` outside 1..``MAX_ROUTE_LIMIT``, a block size that is
        not a positive integer, or an invalid digest or namespace name. The answer is checked
        strictly (``RemoteError``): every field's type, digests, names, at most ``limit``
        candidates, each with this block size, ``matched_blocks`` within the keys sent and
        ordered as promised, namespaces among those asked for.
        """
        keys = [str(Digest(k)) for k in block_keys]
        if len(keys) > MAX_ROUTE_KEYS:
            raise UsageError(
                f"{len(keys)} block keys to route, more than the registry's limit of {MAX_ROUTE_KEYS}",
                hint=f"send the keys of the prompt's first {MAX_ROUTE_KEYS} blocks",
            )
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
            raise UsageError(f"block size must be a positive integer, got {block_size!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_ROUTE_LIMIT:
            raise UsageError(f"limit must be an integer from 1 to {MAX_ROUTE_LIMIT}, got {limit!r}")
        names = None if namespaces is None else [validate_namespace(n) for n in namespaces]
        body: dict[str, Any] = {
            "model_fingerprint": str(Digest(model_fingerprint)),
            "tokenizer_fingerprint": str(Digest(tokenizer_fingerprint)),
            "config_fingerprint": str(Digest(config_fingerprint)),
            "block_size": block_size,
            "block_keys": keys,
            "limit": limit,
        }
        if names is not None:
            body["namespaces"] = names
        doc = self._json(self._call("POST", self._url("route"), json_body=body), "route")
        items = doc.get("candidates")
        if not isinstance(items, list) or len(items) > limit:
            raise RemoteError("the registry's route answer is malformed (candidates)")
        out = [self._route_candidate(item, block_size, len(keys), names) for item in items]
        ranks = [-c.matched_blocks for c in out]
        if ranks != sorted(ranks):
            raise RemoteError("the registry's route candidates are not ordered by matched blocks")
        return out

    def _route_candidate(
        self, item: Any, block_size: int, key_count: int, names: list[str] | None
    ) -> RouteCandidate:
        if not isinstance(item, dict):
            raise RemoteError("the registry's route answer is malformed (a candidate is not an object)")
        try:
            namespace = validate_namespace(item.get("namespace"))  # type: ignore[arg-type]
        except KvregError as e:
            raise RemoteError(f"the registry routed to an invalid namespace {item.get('namespace')!r}") from e
        if names is not None and namespace not in names:
            raise RemoteError(f"the registry routed to namespace {namespace!r}, which was not asked for")
        digest = self._digest(item.get("manifest_digest"), "a route candidate")
        what = f"route candidate {namespace}@{digest.short()}"
        refs = item.get("refs")
        if not isinstance(refs, list):
            raise RemoteError(f"the registry's {what} has no ref list")
        try:
            ref_names = [validate_name(r) for r in refs]
        except KvregError as e:
            raise RemoteError(f"the registry's {what} lists an invalid ref name") from e
        matched = _size(item.get("matched_blocks"), f"matched block count of {what}")
        if matched > key_count:
            raise RemoteError(f"the registry's {what} matches {matched} blocks of the {key_count} sent")
        token_count = _size(item.get("token_count"), f"token count of {what}")
        prompt_tokens = item.get("prompt_tokens")
        if prompt_tokens is not None:
            prompt_tokens = _size(prompt_tokens, f"prompt token count of {what}")
        if item.get("block_size") != block_size or isinstance(item.get("block_size"), bool):
            raise RemoteError(
                f"the registry's {what} has block size {item.get('block_size')!r}, not {block_size}"
            )
        optional: dict[str, str | None] = {}
        for key in ("verdict", "verifier", "created_at"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                raise RemoteError(f"the registry's {what} has an invalid {key}: {value!r:.80}")
            optional[key] = value
        return RouteCandidate(
            namespace=namespace,
            manifest_digest=digest,
            refs=ref_names,
            matched_blocks=matched,
            token_count=token_count,
            prompt_tokens=prompt_tokens,
            block_size=block_size,
            verdict=optional["verdict"],
            verifier=optional["verifier"],
            created_at=optional["created_at"],
        )

    # --- audit log -----------------------------------------------------------------------

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
                LogEntryBytes(start + i, entry, _b64_hash(item.get("leaf_hash"), f"leaf hash {start + i}"))
            )
        return LogPage(out, _size(doc.get("size"), "log size"))

    def _log_proof(self, doc: dict[str, Any], what: str) -> LogProof:
        hashes = doc.get("hashes")
        if not isinstance(hashes, list) or len(hashes) > 128:
            raise RemoteError(f"the registry's {what} is malformed")
        return LogProof(
            _size(doc.get("size"), f"{what} size"),
            _b64_hash(doc.get("root"), f"{what} root"),
            [_b64_hash(h, f"{what} hash") for h in hashes],
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
            proof.size, proof.root, proof.hashes, index, _b64_hash(doc.get("leaf_hash"), f"{what} leaf hash")
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


def connect(home: Home, name: str, **client_options: Any) -> RegistryClient:
    """A ``RegistryClient`` for the remote ``name`` with its token (if any).

    ``client_options`` go to :class:`RegistryClient` (``timeout``, ``retries``, ...).
    The caller closes the client (it is a context manager).
    """
    remote = RemoteConfig(home).get(name)
    auth = Credentials(home).auth_for(name)
    return RegistryClient(
        remote.url, None if auth is None else auth.token, remote_name=name, **client_options
    )
