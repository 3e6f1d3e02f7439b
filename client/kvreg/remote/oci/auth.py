"""Authentication with an OCI registry: ``WWW-Authenticate`` challenges, Basic credentials and
the Docker token flow.

A registry says how it wants to be authenticated in the ``WWW-Authenticate``
header of a ``401`` (RFC 7235): ``Basic realm="..."`` (send the user name and
password with every request) or ``Bearer realm="...",service="...",scope="..."``
(the Docker registry token specification: ask the token service at ``realm`` for a
token covering ``service`` and the scopes a request needs, with the Basic
credentials if there are any and anonymously otherwise, or by posting an identity
token as an OAuth2 refresh token; the answer's ``token`` or ``access_token`` is
sent as ``Authorization: Bearer``). :class:`Authenticator` keeps the challenge,
caches one token per set of scopes and forgets it when the registry refuses it,
so that the caller retries once (``kvreg.remote.oci.client``).

Secrets never reach a log line or a ``repr``. Credentials are not sent over plain
HTTP to a host that is not loopback. This module parses and asks for tokens; it
does not send the registry's requests.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from kvreg.core.errors import RemoteError, UnauthenticatedError
from kvreg.core.loopback import is_loopback
from kvreg.remote.remotes import BasicCredentials

log = logging.getLogger(__name__)

__all__ = ["Authenticator", "Challenge", "parse_challenge", "pull_scope", "push_scope"]

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?')
_MAX_TOKEN_ANSWER = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` challenge: ``scheme`` (lower case) and its parameters."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str | None:
        return self.params.get("realm")


def parse_challenge(header: str | None) -> Challenge | None:
    """The first challenge of a ``WWW-Authenticate`` value (``Basic`` or ``Bearer``), or None."""
    if not header:
        return None
    text = header.strip()
    scheme, _, rest = text.partition(" ")
    scheme = scheme.lower()
    if scheme not in ("basic", "bearer"):
        return None
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None or m.end() == pos:
            break
        value = m.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params.setdefault(m.group(1).lower(), value)
        pos = m.end()
    return Challenge(scheme, params)


def pull_scope(repository: str) -> str:
    return f"repository:{repository}:pull"


def push_scope(repository: str) -> str:
    return f"repository:{repository}:pull,push"


class Authenticator:
    """What to send as ``Authorization`` for a set of scopes; thread-safe."""

    def __init__(
        self,
        credentials: BasicCredentials | None,
        *,
        http: httpx.Client,
        registry_url: str,
        remote_name: str | None,
    ) -> None:
        self.credentials = credentials
        self._http = http
        self._registry_url = registry_url
        self._remote_name = remote_name
        self._challenge: Challenge | None = None
        self._tokens: dict[tuple[str, ...], str] = {}
        self._lock = threading.Lock()
        self._fetching = threading.Lock()

    def __repr__(self) -> str:
        scheme = self._challenge.scheme if self._challenge else None
        return f"Authenticator({self._registry_url!r}, scheme={scheme!r}, credentials={self.credentials!r})"

    @property
    def scheme(self) -> str | None:
        """``basic``, ``bearer``, or None while the registry has asked for nothing."""
        return None if self._challenge is None else self._challenge.scheme

    def learn(self, header: str | None, scopes: Sequence[str] = ()) -> bool:
        """Take the challenge of a ``401``; True if a retry may succeed (new scheme or a cached
        token dropped), False if the same request would be refused again."""
        challenge = parse_challenge(header)
        with self._lock:
            dropped = self._tokens.pop(tuple(sorted(scopes)), None) is not None
            if challenge is None:
                return dropped
            changed = self._challenge is None or self._challenge.scheme != challenge.scheme
            if challenge.scheme == "bearer" and self._challenge is not None:
                changed = changed or self._challenge.realm != challenge.realm
            self._challenge = Challenge(challenge.scheme, {**challenge.params})
        if challenge.scheme == "basic":
            return changed and self.credentials is not None and self.credentials.username is not None
        return changed or dropped

    def header(self, scopes: Sequence[str]) -> str | None:
        """The ``Authorization`` value for a request needing ``scopes`` (None: send none)."""
        challenge = self._challenge
        if challenge is None:
            return None
        if challenge.scheme == "basic":
            creds = self.credentials
            if creds is None or creds.username is None:
                return None
            self._refuse_plain_http(self._registry_url)
            raw = f"{creds.username}:{creds.password}".encode()
            return "Basic " + base64.b64encode(raw).decode("ascii")
        key = tuple(sorted(scopes))
        with self._lock:
            token = self._tokens.get(key)
        if token is None:
            with self._fetching:  # parallel workers wait for one token instead of asking each
                with self._lock:
                    token = self._tokens.get(key)
                if token is None:
                    token = self._fetch_token(challenge, key)
                    with self._lock:
                        self._tokens[key] = token
        return f"Bearer {token}"

    # --- the token service -------------------------------------------------------------

    def _refuse_plain_http(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
            raise UnauthenticatedError(
                f"refusing to send credentials over plain HTTP to {parts.hostname}",
                hint="use an https:// registry and token service",
            )

    def _fetch_token(self, challenge: Challenge, scopes: tuple[str, ...]) -> str:
        realm = challenge.realm
        if not realm or urlsplit(realm).scheme not in ("http", "https"):
            raise RemoteError(f"the registry's Bearer challenge names no usable token service ({realm!r})")
        service = challenge.params.get("service")
        creds = self.credentials
        try:
            if creds is not None and creds.username is None:  # an identity (refresh) token
                self._refuse_plain_http(realm)
                form = {"grant_type": "refresh_token", "refresh_token": creds.password, "client_id": "kvreg"}
                if service:
                    form["service"] = service
                if scopes:
                    form["scope"] = " ".join(scopes)
                response = self._http.post(realm, data=form)
            else:
                params: dict[str, str | list[str]] = {"service": service} if service else {}
                if scopes:
                    params["scope"] = list(scopes)
                headers: dict[str, str] = {}
                if creds is not None:
                    self._refuse_plain_http(realm)
                    raw = f"{creds.username}:{creds.password}".encode()
                    headers["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
                response = self._http.get(realm, params=params, headers=headers)
            body = response.read()[: _MAX_TOKEN_ANSWER + 1]
        except httpx.HTTPError as e:
            raise RemoteError(f"the token service {urlsplit(realm).netloc} did not answer: {e}") from e
        if response.status_code in (401, 403):
            who = self._remote_name or "NAME"
            raise UnauthenticatedError(
                f"the token service {urlsplit(realm).netloc} refused the "
                + ("anonymous request" if creds is None else f"credentials from {creds.source}")
                + f" (HTTP {response.status_code})",
                hint=f"log in: kvreg login {who} --username USER --password-stdin (or docker login)",
            )
        if response.status_code != 200 or len(body) > _MAX_TOKEN_ANSWER:
            raise RemoteError(
                f"the token service {urlsplit(realm).netloc} answered HTTP {response.status_code}"
            )
        token = _token_of(body)
        log.debug("got a registry token for %s", " ".join(scopes) or "no scope")
        return token


def _token_of(body: bytes) -> str:

    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RemoteError("the token service's answer is not JSON") from e
    token = None
    if isinstance(doc, Mapping):
        token = doc.get("token") or doc.get("access_token")
    if not isinstance(token, str) or not token or any(c.isspace() for c in token):
        raise RemoteError("the token service's answer holds no token")
    return token
