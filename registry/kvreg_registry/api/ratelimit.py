"""A small limiter of failed authentications: brute force of tokens, through the API or the sign-in form.

Every failed bearer-token authentication (``Authorization: Bearer ...`` that is
malformed, unknown, revoked, expired or of a disabled user) and every failed web
sign-in counts against two keys: the client's address (``request.client.host``)
and the presented token's prefix (its first :data:`PREFIX_CHARS` characters, held
only as a SHA-256, never in clear). Once either key has ``limit`` failures within
the last ``window_seconds``, further attempts on that key are answered
``429 RATE_LIMITED`` with ``Retry-After`` *before* the token is looked up, until
the oldest failure leaves the window. Successful authentications are never
counted, delayed or refused unless their key is already locked out.

What it is not: the table lives in this process's memory, so behind a load
balancer each process limits on its own, and a restart forgets it. It is bounded
(``max_keys`` keys of at most ``limit`` timestamps each; the least recently failed
key is dropped first), so an attacker spreading failures over more addresses than
``max_keys`` can make it forget. Behind a reverse proxy the address is the client's
only when the proxy is trusted (``KVREG_FORWARDED_ALLOW_IPS``, ``kvreg serve
--forwarded-allow-ips``; loopback by default): then ``request.client.host`` is the
address the proxy put in ``X-Forwarded-For`` (uvicorn's proxy-headers middleware,
installed by ``create_app``); from any other peer it is the peer's own address, whatever
the request claims. It limits failures only: it is not a general request-rate limiter
and it does no denial-of-service defence.

Every failed authentication and every refusal is also counted in the registry's metrics
(``kvreg_auth_failures_total``, ``kvreg_rate_limited_requests_total``), whether or not the
limiter is on.

Settings: ``KVREG_AUTH_FAILURE_LIMIT`` (0 turns it off),
``KVREG_AUTH_FAILURE_WINDOW_SECONDS``, ``KVREG_AUTH_FAILURE_KEYS`` (see
``kvreg_registry.settings``).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fastapi import Request

from kvreg.core.errors import AuthError, RateLimitedError
from kvreg_registry.api.metrics import metrics_of
from kvreg_registry.settings import Settings

#: How many leading characters of a presented token key it (``kvreg_`` and 8 random ones).
PREFIX_CHARS = 14

Clock = Callable[[], float]


def _prefix_key(token: str) -> str:
    return "token:" + hashlib.sha256(token[:PREFIX_CHARS].encode("utf-8")).hexdigest()[:32]


class AuthFailureLimiter:
    """Failures per key in a sliding window (thread-safe; see the module docstring)."""

    def __init__(
        self, *, limit: int, window_seconds: float, max_keys: int, clock: Clock = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = float(window_seconds)
        self.max_keys = max_keys
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> AuthFailureLimiter:
        return cls(
            limit=settings.auth_failure_limit,
            window_seconds=settings.auth_failure_window_seconds,
            max_keys=settings.auth_failure_keys,
        )

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def __len__(self) -> int:
        return len(self._failures)

    def keys_of(self, client: str | None, token: str | None) -> list[str]:
        keys = ["client:" + (client or "unknown")]
        if token:
            keys.append(_prefix_key(token))
        return keys

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def check(self, keys: list[str]) -> None:
        """Raise ``RateLimitedError`` when any of ``keys`` is locked out."""
        if not self.enabled:
            return
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key in keys:
                times = self._recent(key, now)
                if times is not None and len(times) >= self.limit:
                    wait = max(wait, times[0] + self.window - now)
        if wait > 0:
            retry_after = max(1, math.ceil(wait))
            raise RateLimitedError(
                f"too many failed authentications from this client or with this token; "
                f"try again in {retry_after} s",
                hint="check the token (kvreg login REMOTE --token TOKEN)",
                retry_after=retry_after,
            )

    def record_failure(self, keys: list[str]) -> None:
        if not self.enabled:
            return
        now = self.clock()
        with self._lock:
            for key in keys:
                times = self._recent(key, now)
                if times is None:
                    times = deque(maxlen=self.limit)
                    self._failures[key] = times
                times.append(now)
                self._failures.move_to_end(key)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)

    @contextmanager
    def attempt(self, client: str | None, token: str | None) -> Iterator[None]:
        """Guard one authentication: refuse it if locked out, count it if it raises an ``AuthError``."""
        keys = self.keys_of(client, token)
        self.check(keys)
        try:
            yield
        except AuthError:
            self.record_failure(keys)
            raise


_CREATE_LOCK = threading.Lock()


def limiter_of(request: Request) -> AuthFailureLimiter:
    """The app's limiter (made from its settings on first use; one per app, in memory)."""
    app_state = request.app.state
    existing: AuthFailureLimiter | None = getattr(app_state, "auth_failure_limiter", None)
    if existing is not None:
        return existing
    with _CREATE_LOCK:
        existing = getattr(app_state, "auth_failure_limiter", None)
        if existing is None:
            existing = AuthFailureLimiter.from_settings(app_state.registry.settings)
            app_state.auth_failure_limiter = existing
        return existing


def client_of(request: Request) -> str | None:
    return request.client.host if request.client is not None else None


@contextmanager
def auth_attempt(request: Request, token: str | None) -> Iterator[None]:
    """``limiter_of(request).attempt(...)`` for ``request``'s client, counted in the metrics."""
    try:
        with limiter_of(request).attempt(client_of(request), token):
            yield
    except RateLimitedError:
        metrics_of(request).rate_limited.inc()
        raise
    except AuthError:
        metrics_of(request).auth_failures.inc()
        raise
