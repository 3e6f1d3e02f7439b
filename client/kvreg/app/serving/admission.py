"""How many requests for the model the server holds at once, and the 429 past that.

The model answers one request at a time (``.worker``), so every request beyond the one it
runs only waits: a queue that grows without bound turns an overload into timeouts for
everybody and memory for nothing. :class:`Admission` admits a request for the model (the
completions, ``/tokenize``, ``/detokenize``) as soon as its headers arrive, before its body
is read, and holds its place until the answer ends or the client leaves (mid-stream, while
its body was read, or while it waited for the model: the place is given back at once).
``max_queue`` places wait besides the one on the model: ``max_queue + 1`` requests are held
at most, and one more is refused with :class:`Overloaded` (429 with ``Retry-After``).

``Retry-After`` is the time a place takes to free, estimated from the requests just served:
with every place taken, a place frees about every ``hold / (max_queue + 1)`` seconds, where
``hold`` is the recent mean time a request held its place (an exponential average), rounded
up to whole seconds, between 1 and 60.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass

#: Places that wait besides the running request, per CPU this process may run on: a faster host
#: (more cores for the model) answers sooner, so it may hold more requests for the same wait.
QUEUE_PER_CPU = 4
MIN_DEFAULT_QUEUE = 4
_SMOOTHING = 0.2  # weight of the newest hold time in the running mean
_now = time.monotonic


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as containers set it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_max_queue() -> int:
    """``--max-queue``'s default: 4 waiting places per usable CPU, at least 4 (8 on 2 cores)."""
    return max(MIN_DEFAULT_QUEUE, QUEUE_PER_CPU * usable_cpus())


@dataclass
class Overloaded(Exception):
    """Every place is taken: answer 429 with ``Retry-After: retry_after``."""

    held: int
    max_queue: int
    retry_after: int

    def __str__(self) -> str:
        return (
            f"the server is at capacity: {self.held} requests are held (one on the model, up to "
            f"{self.max_queue} waiting); retry after {self.retry_after} s"
        )


class Ticket:
    """One admitted request's place; :meth:`release` (idempotent) gives it back."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._since = _now()
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._admission._release(_now() - self._since)


class Admission:
    """At most ``max_queue + 1`` requests held at once (one on the model, the rest waiting)."""

    def __init__(self, max_queue: int) -> None:
        if max_queue < 0:
            raise ValueError("max_queue must be 0 or more")
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self.held = 0
        self._hold_seconds: float | None = None  # the running mean, once a request was served

    @property
    def capacity(self) -> int:
        return self.max_queue + 1

    def admit(self) -> Ticket:
        """A place for one request, or :class:`Overloaded`."""
        with self._lock:
            if self.held >= self.capacity:
                raise Overloaded(self.held, self.max_queue, self._retry_after())
            self.held += 1
        return Ticket(self)

    def retry_after(self) -> int:
        with self._lock:
            return self._retry_after()

    def _retry_after(self) -> int:
        if self._hold_seconds is None:
            return 1
        return min(60, max(1, math.ceil(self._hold_seconds / self.capacity)))

    def _release(self, seconds: float) -> None:
        with self._lock:
            self.held -= 1
            mean = self._hold_seconds
            self._hold_seconds = seconds if mean is None else mean + _SMOOTHING * (seconds - mean)
