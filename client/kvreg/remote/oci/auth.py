"""What an OCI client sends as ``Authorization``: the registry's challenge, Basic credentials, tokens.

:class:`Authenticator` belongs to one registry (its origin). It keeps the challenge
that registry answered (``kvreg.remote.oci.challenges``) and, for a Bearer
challenge, one token per set of scopes from the token service
(``kvreg.remote.oci.tokens``):

- a token is used until a little before the end of the life its ``expires_in``
  stated (:func:`refresh_margin`), then asked for again;
- a token is asked for once however many workers need it at the same moment (one
  request per set of scopes in flight; the others wait for its answer);
- after a ``401`` (:meth:`Authenticator.refused`), the token that was refused is
  dropped, unless another worker has already replaced it; a new challenge from the
  registry replaces the old one. Only the registry's own answers teach it anything:
  a challenge from any other origin (the storage a download was redirected to, or
  anyone that host sends us to) raises ``RemoteError`` and changes nothing, so no
  other host can name the realm that receives the registry's credentials.

Secrets never reach a log line or a ``repr``. This module asks for tokens; it does not
send the registry's requests (``kvreg.remote.oci.transport`` does).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from kvreg.core.errors import RemoteError
from kvreg.remote.oci.challenges import Challenge, parse_challenge
from kvreg.remote.oci.tokens import fetch_token, refuse_plain_http
from kvreg.remote.redirects import same_origin
from kvreg.remote.remotes import BasicCredentials

log = logging.getLogger(__name__)

__all__ = ["Authenticator", "refresh_margin"]

_Key = tuple[str, str, tuple[str, ...]]


def refresh_margin(expires_in: float) -> float:
    """How long before the stated end of its life a token is replaced: a tenth of it, at most
    30 s (Docker Hub's 300 s tokens are replaced after 270 s)."""
    return min(30.0, expires_in / 10)


@dataclass(frozen=True, slots=True)
class _Token:
    header: str  # "Bearer <token>"
    renew_at: float  # on the authenticator's clock


class Authenticator:
    """What to send as ``Authorization`` to the registry at ``registry_url``; thread-safe."""

    def __init__(
        self,
        credentials: BasicCredentials | None,
        *,
        http: httpx.Client,
        registry_url: str,
        remote_name: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.credentials = credentials
        self._http = http
        self._registry_url = registry_url
        self._remote_name = remote_name
        self._clock = clock
        self._challenge: Challenge | None = None
        self._tokens: dict[_Key, _Token] = {}
        self._fetching: dict[_Key, threading.Lock] = {}
        self._lock = threading.Lock()
        self.fetched = 0  # tokens asked for (a test and debugging aid)

    def __repr__(self) -> str:
        scheme = self._challenge.scheme if self._challenge else None
        return f"Authenticator({self._registry_url!r}, scheme={scheme!r}, credentials={self.credentials!r})"

    @property
    def scheme(self) -> str | None:
        """``basic``, ``bearer``, or None while the registry has asked for nothing."""
        return None if self._challenge is None else self._challenge.scheme

    def _own(self, url: str) -> None:
        if not same_origin(url, self._registry_url):
            raise RemoteError(
                f"{urlsplit(url).hostname}, which is not the registry {self._registry_url}, asked for "
                "credentials; none were sent to it",
                hint="the registry redirected a request to a host that wants its own login: "
                "tell the registry's operator",
            )

    def learn(self, header: str | None, url: str) -> bool:
        """Take the challenge of the registry's ``401`` from ``url``; True if it is new (another
        scheme or token service). ``RemoteError`` if ``url`` is not the registry's."""
        self._own(url)
        challenge = parse_challenge(header)
        if challenge is None:
            return False
        with self._lock:
            if challenge.same_authority(self._challenge):
                return False
            self._challenge = challenge
            self._tokens.clear()
        log.debug("the registry asks for %s authentication", challenge.scheme)
        return True

    def refused(self, scopes: Sequence[str], sent: str | None, header: str | None, url: str) -> bool:
        """The registry answered ``401`` (challenge ``header``) from ``url`` to a request that
        carried ``sent`` as ``Authorization``: True if the request may succeed if sent again
        (the challenge is new, or the token it carried is gone or now replaced)."""
        if self.learn(header, url):
            return self.scheme == "bearer" or self._has_basic()
        if self.scheme != "bearer" or sent is None:
            return False
        key = self._key(tuple(sorted(scopes)))
        with self._lock:
            current = self._tokens.get(key)
            if current is not None and current.header == sent:
                del self._tokens[key]  # refused (expired early, or revoked): ask for a new one
            elif current is None and not sent.startswith("Bearer "):
                return False
        return True

    def _has_basic(self) -> bool:
        return self.credentials is not None and self.credentials.username is not None

    def _key(self, scopes: tuple[str, ...]) -> _Key:
        challenge = self._challenge
        assert challenge is not None
        return challenge.realm or "", challenge.service or "", scopes

    def header(self, scopes: Sequence[str]) -> str | None:
        """The ``Authorization`` value for a request needing ``scopes`` (None: send none)."""
        challenge = self._challenge
        if challenge is None:
            return None
        if challenge.scheme == "basic":
            creds = self.credentials
            if creds is None or creds.username is None:
                return None
            refuse_plain_http(self._registry_url)
            raw = f"{creds.username}:{creds.password}".encode()
            return "Basic " + base64.b64encode(raw).decode("ascii")
        key = self._key(tuple(sorted(scopes)))
        token = self._valid(key)
        if token is not None:
            return token
        with self._lock:
            fetching = self._fetching.setdefault(key, threading.Lock())
        with fetching:  # one request per set of scopes; the other workers wait for its token
            token = self._valid(key)
            if token is not None:
                return token
            asked = self._clock()
            grant = fetch_token(
                self._http, challenge, key[2], self.credentials, remote_name=self._remote_name
            )
            renew_at = asked + grant.expires_in - refresh_margin(grant.expires_in)
            with self._lock:
                self.fetched += 1
                self._tokens[key] = _Token(f"Bearer {grant.token}", renew_at)
            return f"Bearer {grant.token}"

    def _valid(self, key: _Key) -> str | None:
        with self._lock:
            token = self._tokens.get(key)
            if token is None:
                return None
            if self._clock() >= token.renew_at:
                del self._tokens[key]
                return None
            return token.header
