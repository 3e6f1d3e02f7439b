"""The core every resource of the registry client shares: base URL, transport, answers, server info.

``ApiCore`` holds the registry's root URL (``/api/v1`` is added), the transport
(``kvreg.remote.session.HttpSession``: the bearer token, retries, error answers
mapped to typed ``KvregError`` subclasses by ``kvreg.remote.errors``), builds
endpoint URLs, parses JSON answers strictly and caches ``GET /api/v1/`` (the
server's version and limits). The parsers of answer fields (audit log indexes,
base64 hashes, sizes) are here so that every resource checks them alike.

It knows no endpoint beyond the server's root, ``whoami`` and the namespace list:
objects, envelopes and refs, search and routing, and the audit log are in the
sibling modules, which ``kvreg.remote.http.RegistryClient`` combines. Nothing here prints.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import httpx

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, RemoteError
from kvreg.core.names import validate_namespace
from kvreg.remote.remotes import API_PREFIX, normalize_url, validate_token
from kvreg.remote.session import HttpSession, Reply

log = logging.getLogger(__name__)

__all__ = [
    "MAX_LOG_INDEX",
    "ApiCore",
    "jsonable_digests",
    "parse_b64_hash",
    "parse_log_index",
    "parse_size",
]

MAX_LOG_INDEX = 2**53


def parse_log_index(value: Any, what: str) -> int | None:
    """An audit entry index from an answer: None when absent, else a non-negative integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOG_INDEX:
        raise RemoteError(f"the registry sent an invalid audit log index for {what}: {value!r}")
    return value


def parse_b64_hash(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise RemoteError(f"the registry's {what} is not a base64 string")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise RemoteError(f"the registry's {what} is not base64") from e
    if len(raw) != 32:
        raise RemoteError(f"the registry's {what} is {len(raw)} bytes, not 32")
    return raw


def parse_size(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOG_INDEX:
        raise RemoteError(f"the registry sent an invalid {what}: {value!r}")
    return value


def _segment(value: str) -> str:
    return quote(value, safe=":")


def jsonable_digests(digests: Iterable[Digest | str]) -> list[str]:
    return [str(Digest(d)) for d in digests]


class ApiCore:
    """A registry at ``base_url`` (its root; ``/api/v1`` is added), optionally with a bearer token.

    Thread-safe: one client serves every worker of a push or pull.
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

    def _digest_list(self, value: Any, what: str) -> list[Digest]:
        if not isinstance(value, list):
            raise RemoteError(f"the registry's list of {what} is malformed")
        return [self._digest(v, what) for v in value]

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
