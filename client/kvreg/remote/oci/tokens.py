"""The token service of the Docker token flow: one request for a token, bounded in size and time.

:func:`fetch_token` asks the service at a Bearer challenge's ``realm`` for a token
covering ``service`` and the scopes a request needs, as the Docker registry token
specification says: a ``GET`` with the Basic credentials (or none: an anonymous
token), or, with an identity token (what ``docker login`` keeps for OAuth2
registries), a ``POST`` of it as an OAuth2 refresh token. The answer's ``token`` or
``access_token`` is the token; ``expires_in`` its life in seconds (60 when absent,
as the specification says).

The answer is read in pieces and refused past :data:`MAX_TOKEN_ANSWER` bytes, and
the whole exchange past ``deadline`` seconds, so a slow or endless answer cannot
hold a transfer. Credentials are not sent over plain HTTP to a host that is not
loopback. Secrets never reach a log line or an error message.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from kvreg.core.errors import RemoteError, UnauthenticatedError
from kvreg.core.loopback import is_loopback
from kvreg.remote.oci.challenges import Challenge
from kvreg.remote.remotes import BasicCredentials

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_EXPIRES_IN", "MAX_TOKEN_ANSWER", "Grant", "fetch_token", "refuse_plain_http"]

#: The largest token answer read (a JWT with many scopes is a few KiB).
MAX_TOKEN_ANSWER = 1024 * 1024
#: Seconds one token request may take, answer included.
TOKEN_DEADLINE = 30.0
#: A token's life when the answer states none (the token specification's default).
DEFAULT_EXPIRES_IN = 60.0
_MAX_EXPIRES_IN = 366 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Grant:
    """A token and the seconds it lasts from when it was asked for."""

    token: str
    expires_in: float

    def __repr__(self) -> str:
        return f"Grant(token=***, expires_in={self.expires_in})"


def refuse_plain_http(url: str) -> None:
    """``UnauthenticatedError`` if credentials would go over plain HTTP to a host off loopback."""
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise UnauthenticatedError(
            f"refusing to send credentials over plain HTTP to {parts.hostname}",
            hint="use an https:// registry and token service",
        )


def _basic(creds: BasicCredentials) -> str:
    raw = f"{creds.username}:{creds.password}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


def _read_bounded(response: httpx.Response, netloc: str, deadline: float) -> bytes:
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece
        if len(body) > MAX_TOKEN_ANSWER:
            raise RemoteError(f"the token service {netloc} sent more than {MAX_TOKEN_ANSWER} bytes")
        if time.monotonic() > deadline:
            raise RemoteError(f"the token service {netloc} took longer than {TOKEN_DEADLINE:.0f} s to answer")
    return bytes(body)


def fetch_token(
    http: httpx.Client,
    challenge: Challenge,
    scopes: Sequence[str],
    creds: BasicCredentials | None,
    *,
    remote_name: str | None,
) -> Grant:
    """A token for ``scopes`` from the token service ``challenge`` names (see the module docstring)."""
    realm = challenge.realm
    if not realm or urlsplit(realm).scheme not in ("http", "https") or not urlsplit(realm).hostname:
        raise RemoteError(f"the registry's Bearer challenge names no usable token service ({realm!r})")
    netloc = urlsplit(realm).netloc
    service = challenge.service
    deadline = time.monotonic() + TOKEN_DEADLINE
    if creds is not None:
        refuse_plain_http(realm)
    if creds is not None and creds.username is None:  # an identity (refresh) token
        form = {"grant_type": "refresh_token", "refresh_token": creds.password, "client_id": "kvreg"}
        if service:
            form["service"] = service
        if scopes:
            form["scope"] = " ".join(scopes)
        request = http.build_request("POST", realm, data=form)
    else:
        params: dict[str, str | list[str]] = {"service": service} if service else {}
        if scopes:
            params["scope"] = list(scopes)
        headers = {"Authorization": _basic(creds)} if creds is not None else {}
        request = http.build_request("GET", realm, params=params, headers=headers)
    try:
        response = http.send(request, stream=True)
        try:
            body = _read_bounded(response, netloc, deadline)
        finally:
            response.close()
    except httpx.HTTPError as e:
        raise RemoteError(f"the token service {netloc} did not answer: {type(e).__name__}") from e
    if response.status_code in (401, 403):
        who = remote_name or "NAME"
        raise UnauthenticatedError(
            f"the token service {netloc} refused the "
            + ("anonymous request" if creds is None else f"credentials from {creds.source}")
            + f" (HTTP {response.status_code})",
            hint=f"log in: kvreg login {who} --username USER --password-stdin (or docker login)",
        )
    if response.status_code != 200:
        raise RemoteError(f"the token service {netloc} answered HTTP {response.status_code}")
    grant = _grant_of(body, netloc)
    log.debug("got a registry token for %s (%.0f s)", " ".join(scopes) or "no scope", grant.expires_in)
    return grant


def _grant_of(body: bytes, netloc: str) -> Grant:
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RemoteError(f"the token service {netloc}'s answer is not JSON") from e
    token = None
    if isinstance(doc, Mapping):
        token = doc.get("token") or doc.get("access_token")
    if not isinstance(token, str) or not token or any(c.isspace() or not c.isprintable() for c in token):
        raise RemoteError(f"the token service {netloc}'s answer holds no token")
    raw = doc.get("expires_in")
    expires_in = DEFAULT_EXPIRES_IN
    if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw) and raw > 0:
        expires_in = min(float(raw), _MAX_EXPIRES_IN)
    elif raw is not None:
        log.debug("the token service %s stated an unusable expires_in %r", netloc, raw)
    return Grant(token, expires_in)
