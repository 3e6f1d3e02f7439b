"""When a registry request is worth sending again, and how long to wait first.

A request is retried on a connection error and on ``429``/``502``/``503``/``504``
(``kvreg.remote.errors.RETRY_STATUSES``): an attempt raises :class:`Retry` with the
reason and the server's ``Retry-After``, and :meth:`RetryPolicy.run` waits with
exponential backoff and jitter (never less than ``Retry-After``, capped at a minute)
before the next one. After the last retry it raises ``UnavailableError``, which says
what failed how many times and that transfers resume where they stopped.

This module sends nothing itself (``kvreg.remote.session`` and
``kvreg.remote.downloads`` do).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from kvreg.core.errors import UnavailableError

log = logging.getLogger(__name__)

__all__ = ["Retry", "RetryPolicy", "retry_after", "transport_reason"]

T = TypeVar("T")
#: The longest wait a ``Retry-After`` may impose on one retry.
MAX_RETRY_AFTER = 60.0


class Retry(Exception):
    """This attempt failed in a way worth retrying."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def transport_reason(e: BaseException, where: str = "") -> str:
    """A broken connection, in words: the exception's type, ``where``, and its message."""
    text = f"{type(e).__name__}{where}"
    return f"{text}: {e}" if str(e) else text


def retry_after(headers: httpx.Headers) -> float | None:
    """The seconds a ``Retry-After`` header asks for (None: absent, a date, or malformed)."""
    try:
        seconds = float(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retries`` more attempts after the first, waits from ``backoff`` doubling up to
    ``max_backoff`` seconds; ``base_url`` names the registry in the final error."""

    base_url: str
    retries: int
    backoff: float
    max_backoff: float

    @classmethod
    def of(cls, base_url: str, retries: int, backoff: float, max_backoff: float) -> RetryPolicy:
        return cls(base_url, max(0, int(retries)), max(0.0, float(backoff)), max(0.0, float(max_backoff)))

    def sleep(self, attempt: int, reason: str, after: float | None) -> None:
        """Wait before retry number ``attempt + 1`` (``after``: the server's ``Retry-After``)."""
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        delay = delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 (jitter, not cryptography)
        if after is not None:
            delay = max(delay, min(after, MAX_RETRY_AFTER))
        log.info(
            "registry request failed (%s); retry %d/%d in %.2f s", reason, attempt + 1, self.retries, delay
        )
        time.sleep(delay)

    def unavailable(self, method: str, url: str, reason: str, attempts: int) -> UnavailableError:
        return UnavailableError(
            f"the registry at {self.base_url} is unavailable: {method} {url} failed "
            f"{attempts} time{'s' if attempts != 1 else ''} ({reason})",
            hint="check the URL (kvreg remote list) and the network, then run the command again; "
            "transfers resume where they stopped",
            url=url,
            attempts=attempts,
        )

    def run(
        self,
        method: str,
        url: str,
        attempt: Callable[[int], T],
        *,
        budget: int | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> T:
        """``attempt(n)`` for n = 0, 1, ... until it does not raise :class:`Retry`; after
        ``budget`` retries (default: the policy's), ``UnavailableError``. ``on_retry`` runs
        before each wait."""
        limit = self.retries if budget is None else max(0, budget)
        n = 0
        while True:
            try:
                return attempt(n)
            except Retry as r:
                if n >= limit:
                    raise self.unavailable(method, url, r.reason, n + 1) from r
                if on_retry is not None:
                    on_retry()
                self.sleep(n, r.reason, r.retry_after)
                n += 1
