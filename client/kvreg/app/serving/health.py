"""``GET /health``: whether the model answers, without waiting behind a long request.

The model has one thread (``.worker``). A health check that queued a forward pass behind a
ten-minute generation would time out and get a working server restarted; one that never
touched the model would call a wedged server healthy. So :class:`HealthCheck` looks at the
thread first:

- **idle** (nothing submitted): it runs a forward pass of one token (``ModelHost.health_probe``)
  in the thread and answers 200 when it returns a token of the vocabulary within ``timeout``
  seconds, 503 when it fails or times out. Concurrent checks share the pass in flight.
- **busy** (a request runs or waits): it does not queue. 200 when the thread made progress
  (started or ended an item, or decoded a token) within the last ``stall`` seconds, 503
  ``stalled`` otherwise. A long prefill shows no progress until its first token, so ``stall``
  is generous (default 300 s).

A pass that waits behind a request submitted just after the check saw the thread idle counts
as busy when ``timeout`` ends. Before the model is loaded, ``/health`` is answered 503
``loading`` by ``.loading``, not here.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvreg.app.serving.host import ModelHost

PROBE_TIMEOUT = 30.0  # seconds a one-token forward pass may take on an idle model
STALL_SECONDS = 300.0  # seconds a busy model may go without progress


@dataclass
class Verdict:
    ok: bool
    body: dict[str, Any]

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


@dataclass
class _Pass:
    future: Future[int] | None = None
    started_at: float | None = None  # time.monotonic() when the model thread took it up


class HealthCheck:
    """Judges the model as the module's docstring says."""

    def __init__(
        self, host: ModelHost, *, timeout: float = PROBE_TIMEOUT, stall: float = STALL_SECONDS
    ) -> None:
        self.host, self.timeout, self.stall = host, timeout, stall
        self._pass: _Pass | None = None

    async def check(self) -> Verdict:
        worker = self.host.executor
        if worker.pending:
            return self._by_progress()
        running = self._pass
        if running is None or running.future is None or running.future.done():
            running = self._pass = self._start()
        assert running.future is not None
        t0 = time.perf_counter()
        try:
            token = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(running.future)), self.timeout)
        except TimeoutError:
            if running.started_at is None:  # queued behind a request that came in meanwhile
                return self._by_progress()
            return self._slow_pass()
        except Exception as exc:
            return Verdict(
                False,
                {"status": "failing", "check": "forward_pass", "error": f"{type(exc).__name__}: {exc}"},
            )
        seconds = round(time.perf_counter() - t0, 6)
        return Verdict(True, {"status": "ok", "check": "forward_pass", "seconds": seconds, "token": token})

    def _start(self) -> _Pass:
        started = _Pass()

        def probe() -> int:
            started.started_at = time.monotonic()
            return self.host.health_probe()

        started.future = self.host.executor.submit(probe)
        return started

    def _slow_pass(self) -> Verdict:
        error = f"a one-token forward pass took more than {self.timeout:g} s"
        return Verdict(False, {"status": "failing", "check": "forward_pass", "error": error})

    def _by_progress(self) -> Verdict:
        worker = self.host.executor
        running = self._pass
        if running is not None and running.future is not None and not running.future.done():
            began = running.started_at
            if began is not None and time.monotonic() - began > self.timeout:  # a pass hangs
                return self._slow_pass()
        idle = round(time.monotonic() - worker.last_progress, 3)
        body: dict[str, Any] = {
            "check": "progress",
            "seconds_since_progress": idle,
            "pending": worker.pending,
        }
        if idle <= self.stall:
            return Verdict(True, {"status": "ok", **body})
        return Verdict(False, {"status": "stalled", **body, "error": f"no progress in {self.stall:g} s"})
