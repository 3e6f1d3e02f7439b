"""The requests of an OCI client: one registry, authenticated per scope, errors typed.

:class:`OciTransport` owns an :class:`~kvreg.remote.session.HttpSession` (retries on
connection errors and 429/5xx, capped answers, the fast bulk transport for blob
bodies, resumable hashed downloads) whose error mapping is the OCI one
(``kvreg.remote.oci.errors``), and an :class:`~kvreg.remote.oci.auth.Authenticator`.
:meth:`OciTransport.ping` asks ``GET /v2/`` how the registry authenticates; every
request then carries the ``Authorization`` for its scopes, and a ``401`` from the
registry is answered (a new challenge, or a refused token replaced, once for all the
workers that met it) up to :data:`AUTH_ATTEMPTS` times before it becomes
``UnauthenticatedError``. ``Authorization`` goes to the registry's own origin only
(never to the storage a blob download is redirected to, never to an upload
location on another host), and only the registry's own ``401`` is taken as a
challenge.

This module knows the mechanics; ``blobs`` and ``manifests`` know the endpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urljoin

import httpx

from kvreg.core.errors import KvregError, UnauthenticatedError
from kvreg.remote.bulk import origin_of
from kvreg.remote.oci.auth import Authenticator
from kvreg.remote.oci.errors import CHALLENGE_DETAIL, map_oci_error
from kvreg.remote.remotes import BasicCredentials, OciLocation
from kvreg.remote.session import MAX_JSON_BYTES, HttpSession, Reply

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CHUNK_THRESHOLD", "OciTransport"]

#: Blobs larger than this are uploaded in chunks (PATCH) of this size.
DEFAULT_CHUNK_THRESHOLD = 64 * 1024 * 1024
#: Times one request is sent under one scope when the registry keeps answering ``401``.
AUTH_ATTEMPTS = 3
T = TypeVar("T")


class _OciSession(HttpSession):
    """An ``HttpSession`` whose error answers are OCI error bodies."""

    def registry_error(self, status: int, headers: httpx.Headers, body: bytes, url: str) -> KvregError:
        return map_oci_error(status, headers, body, remote_name=self.remote_name, url=url)


class OciTransport:
    """Requests to one OCI registry; thread-safe. A context manager (closes its connections)."""

    def __init__(
        self,
        location: OciLocation,
        credentials: BasicCredentials | None = None,
        *,
        remote_name: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_connections: int = 16,
        verify: bool | str = True,
        chunk_threshold: int = DEFAULT_CHUNK_THRESHOLD,
    ) -> None:
        self.location = location
        self.base_url = location.base_url
        self.remote_name = remote_name
        self.chunk_threshold = max(1, int(chunk_threshold))
        self.session = _OciSession(
            self.base_url,
            None,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            remote_name=remote_name,
            max_connections=max_connections,
            verify=verify,
            transport=None,
        )
        token_transport, token_mounts = self.session.transports()
        self._token_http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            trust_env=False,
            transport=token_transport,
            mounts=token_mounts,
            follow_redirects=False,
        )
        self.auth = Authenticator(
            credentials, http=self._token_http, registry_url=self.base_url, remote_name=remote_name
        )
        self._origin = origin_of(self.base_url)
        self._pinged = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location.url!r}, auth={self.auth!r})"

    def __enter__(self) -> OciTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.session.close()
        self._token_http.close()

    # --- names -------------------------------------------------------------------------

    def repository(self, namespace: str) -> str:
        """The repository that holds kvreg namespace ``namespace`` on this registry."""
        return self.location.repository(namespace)

    def url(self, repository: str, *parts: str) -> str:
        return f"{self.base_url}/v2/{repository}/" + "/".join(parts)

    def absolute(self, location: str) -> str:
        """An upload ``Location`` (absolute, or relative to the registry) as an absolute URL."""
        return urljoin(self.base_url + "/", location)

    def limit(self, name: str, default: int) -> int:
        """A limit the registry states: OCI registries state none (``default``)."""
        return default

    # --- requests ------------------------------------------------------------------------

    def ping(self) -> None:
        """``GET /v2/``: learn how the registry authenticates (once; later calls do nothing)."""
        if self._pinged:
            return
        reply = self.session.call("GET", f"{self.base_url}/v2/", expect=(200, 401), limit=64 * 1024)
        if reply.status == 401:
            self.auth.learn(reply.headers.get("WWW-Authenticate"), reply.url or self.base_url)
        self._pinged = True

    def check_credentials(self) -> str | None:
        """``GET /v2/`` with the credentials (a token of no scope for a Bearer registry): the
        scheme the registry asked for (None: it asked for none). ``UnauthenticatedError`` if
        they are refused."""
        self.ping()
        url = f"{self.base_url}/v2/"
        self.call("GET", url, [], limit=64 * 1024)
        return self.auth.scheme

    def headers_for(
        self, url: str, scopes: Sequence[str], extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """``extra`` and, for the registry's own origin, the ``Authorization`` for ``scopes``."""
        headers = dict(extra or {})
        if origin_of(url) == self._origin:
            value = self.auth.header(scopes)
            if value is not None:
                headers["Authorization"] = value
        return headers

    def authorized(self, scopes: Sequence[str], send: Callable[[dict[str, str]], T], url: str) -> T:
        """``send(headers)`` with this scope's ``Authorization``; sent again after a ``401`` from
        the registry that a new challenge or a fresh token may satisfy (a token that expired
        while workers used it, replaced once for all of them), at most :data:`AUTH_ATTEMPTS`
        times in all."""
        self.ping()
        for attempt in range(AUTH_ATTEMPTS):
            headers = self.headers_for(url, scopes)
            try:
                return send(headers)
            except UnauthenticatedError as e:
                challenge = e.details.get(CHALLENGE_DETAIL)
                answered = e.details.get("url")
                if attempt + 1 >= AUTH_ATTEMPTS or not self.auth.refused(
                    scopes,
                    headers.get("Authorization"),
                    challenge if isinstance(challenge, str) else None,
                    answered if isinstance(answered, str) else url,
                ):
                    raise
                log.debug("401 from %s; sending it again with new credentials", url)
        raise AssertionError("unreachable")  # pragma: no cover

    def call(
        self,
        method: str,
        url: str,
        scopes: Sequence[str],
        *,
        expect: Sequence[int] = (200,),
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        limit: int = MAX_JSON_BYTES,
    ) -> Reply:
        """One request (with the session's retries) under ``scopes``."""
        body = content

        def send(auth: dict[str, str]) -> Reply:
            return self.session.call(
                method,
                url,
                expect=expect,
                headers={**(headers or {}), **auth},
                content=None if body is None else (lambda: body),
                params=params,
                limit=limit,
            )

        return self.authorized(scopes, send, url)
