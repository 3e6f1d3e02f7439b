"""TLS of the registry clients: which certificates to trust, and a certificate that does not verify.

- :func:`tls_verify`: httpx's ``verify`` setting, except that the default honours
  ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` (users of a private certificate authority rely
  on them; nothing else of the environment is read);
- :class:`TlsOnFirstUse`: an ``https://`` transport built on its first request;
- :func:`cert_error` and :func:`untrusted`: a certificate error found under a transport
  error, and the ``RemoteError`` that names the setting to fix (never retried).

This module sends no request of its own.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from kvreg.core.errors import RemoteError

__all__ = ["TlsOnFirstUse", "cert_error", "tls_verify", "untrusted"]


def tls_verify(verify: bool | str) -> bool | str | ssl.SSLContext:
    """``verify`` as given, except that the default honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``."""
    if verify is not True:
        return verify
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        return True
    return ssl.create_default_context(cafile=cafile, capath=capath)


class TlsOnFirstUse(httpx.BaseTransport):
    """An ``https://`` transport built on its first request: loading a trust store costs tens of
    milliseconds of CPU (44 ms for certifi's bundle, 52 ms for the system one of ``SSL_CERT_FILE``
    on the benchmark host), which a session with a plain-http registry would pay for nothing on
    every command."""

    def __init__(self, build: Callable[[], httpx.BaseTransport]) -> None:
        self._build = build
        self._transport: httpx.BaseTransport | None = None
        self._lock = threading.Lock()

    def _get(self) -> httpx.BaseTransport:
        with self._lock:
            if self._transport is None:
                self._transport = self._build()
            return self._transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._get().handle_request(request)

    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()


def cert_error(e: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate error under a transport error (httpx wraps httpcore's, which wraps ssl's)."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None or isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def untrusted(url: str, e: ssl.SSLCertVerificationError) -> RemoteError:
    """A certificate that does not verify: a setting to fix, not a failure to retry."""
    return RemoteError(
        f"the TLS certificate of {urlsplit(url).hostname} is not trusted ({e.verify_message or e})",
        hint="if the registry uses a private certificate authority, point SSL_CERT_FILE at its certificate",
        url=url,
    )
