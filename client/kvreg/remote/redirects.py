"""Following a registry's redirects without carrying its credentials elsewhere.

Registries on object storage (GHCR, Docker Hub, ECR, GAR, Quay, Harbor, CNCF
distribution on S3, a kvreg registry with ``KVREG_S3_REDIRECT``) answer a blob ``GET``
or ``HEAD`` with a redirect to a presigned URL of the store. The clients follow
such redirects for ``GET`` and ``HEAD`` only, at most :data:`MAX_REDIRECTS` hops:

- :func:`redirect_target`: where a redirect points (relative ``Location`` resolved),
  refused when it is missing, not http(s), points back at itself, or leaves https
  for plain http off loopback;
- :func:`hop_headers`: the headers of the next hop; ``Authorization``, ``Cookie`` and
  ``Proxy-Authorization`` are dropped on a hop to another origin (scheme, host, port),
  and stay dropped; ``Range`` and the rest are kept;
- :func:`foreign_error`: the error an answer from a host the registry sent us to
  stands for. It is never ``UnauthenticatedError`` and never carries that host's
  ``WWW-Authenticate``: a storage host (or anyone it redirects to) cannot name a
  token realm for the registry's credentials.

This module sends nothing; ``kvreg.remote.session`` and ``kvreg.remote.downloads`` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urljoin, urlsplit

from kvreg.core.errors import KvregError, NotFoundError, RemoteError
from kvreg.core.loopback import is_loopback
from kvreg.remote.bulk import origin_of

__all__ = [
    "FOLLOWED_METHODS",
    "MAX_REDIRECTS",
    "REDIRECT_STATUSES",
    "foreign_error",
    "hop_headers",
    "redirect_target",
    "same_origin",
]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: The methods whose redirects are followed (a write is never sent on to another URL).
FOLLOWED_METHODS = frozenset({"GET", "HEAD"})
MAX_REDIRECTS = 5
_CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})


def same_origin(a: str, b: str) -> bool:
    """Whether two http(s) URLs share scheme, host and port (False if either is not http(s))."""
    try:
        return origin_of(a) == origin_of(b)
    except ValueError:
        return False


def redirect_target(url: str, status: int, headers: Mapping[str, str]) -> str:
    """The absolute URL a redirect answer from ``url`` points to; ``RemoteError`` if unusable."""
    location = headers.get("Location") or headers.get("location")
    if not location:
        raise RemoteError(f"GET {url} answered HTTP {status} without a Location to follow")
    try:
        target = urljoin(url, location.strip())
        parts = urlsplit(target)
    except ValueError as e:
        raise RemoteError(f"GET {url} was redirected to a location that is not a URL: {e}") from e
    if parts.scheme not in ("http", "https") or not parts.hostname or target == url:
        raise RemoteError(f"GET {url} was redirected to an unusable location")
    if urlsplit(url).scheme == "https" and parts.scheme == "http" and not is_loopback(parts.hostname):
        raise RemoteError(
            f"GET {url} was redirected from https to plain http ({parts.hostname}); not followed",
            hint="the registry or its storage is misconfigured: ask its operator to serve https",
        )
    return target


def hop_headers(headers: Mapping[str, str], source: str, target: str) -> dict[str, str]:
    """``headers`` for the hop from ``source`` to ``target``: credentials only within one origin."""
    if same_origin(source, target):
        return dict(headers)
    return {k: v for k, v in headers.items() if k.lower() not in _CREDENTIALS}


def foreign_error(status: int, url: str, *, registry: str) -> KvregError:
    """The error of an answer from ``url``, a host that the registry at ``registry`` redirected to."""
    host = urlsplit(url).hostname or url
    error: KvregError
    if status == 404:
        error = NotFoundError(
            f"the storage host {host} that {registry} redirected to has no such file (HTTP 404)",
            hint="the registry lists it but its storage lost it: tell the registry's operator",
        )
    else:
        error = RemoteError(
            f"the storage host {host} that {registry} redirected to answered HTTP {status}",
            hint="a presigned link may have expired or been refused; run the command again "
            "(transfers resume where they stopped)",
        )
    error.details = {"http_status": status, "redirected_to": host}
    return error
