"""The model's one thread, and what it has done, counted.

:class:`ModelWorker` is the single-thread executor every request queues for (tokenizing,
answering, the health check's forward pass): a :class:`~concurrent.futures.ThreadPoolExecutor`
of one worker that also knows how much work is submitted and not finished (``pending``; a
future cancelled while it waits leaves at once) and when the thread last made progress
(``last_progress``: an item started or ended, or a token was decoded). ``/health`` reads both
to judge a busy worker without queueing behind it.

:class:`RunCounters` tallies the answers (tokens, grafts by mode, witness probes run or
remembered, fallbacks by reason class, requests stopped by their client, receipts): plain
integers behind a lock, written by the worker and the receipt thread, read whole by
``/metrics``. Counters, not lists: a server that runs for months keeps constant memory.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from kvreg.app.ask import AskResult

P = ParamSpec("P")
T = TypeVar("T")


class ModelWorker(ThreadPoolExecutor):
    """One thread, in submission order, counting what waits and noting progress."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="kvreg-model")
        self._count_lock = threading.Lock()
        self._pending = 0
        self.last_progress = time.monotonic()

    @property
    def pending(self) -> int:
        """Items submitted and not finished (the one running included)."""
        return self._pending

    def progress(self) -> None:
        """Note that the thread moved on (called by the worker itself, e.g. per token)."""
        self.last_progress = time.monotonic()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        def run() -> T:
            self.progress()
            try:
                return fn(*args, **kwargs)
            finally:
                self.progress()

        with self._count_lock:
            self._pending += 1
        try:
            future = super().submit(run)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _: Future[T] | None) -> None:
        with self._count_lock:
            self._pending -= 1


def reason_class(result: AskResult) -> str:
    """Why a request that asked for the cache ran without it, as a short stable label: the
    refusal's error code in lower case (``key_untrusted``, ``digest_mismatch``, ``route_none``…)
    when an artifact was refused, ``no_match`` when nothing stored matched the prompt."""
    error = result.plan.error
    if error:
        return str(error.get("code") or "refused").lower()
    return "no_match"


@dataclass
class RunCounters:
    """What the model thread answered since the server started (monotonic counts)."""

    answered: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens restored from kvreg rather than computed
    prefilled_tokens: int = 0
    decoded_tokens: int = 0  # tokens the model decoded (a knowledge answer's copied tokens are not)
    completion_tokens: int = 0  # tokens answered (copied and decoded)
    grafts: Counter[str] = field(default_factory=Counter)  # by mode used: knowledge, prefix
    fallbacks: Counter[str] = field(default_factory=Counter)  # by reason class
    probes: Counter[str] = field(default_factory=Counter)  # run, remembered
    stopped: int = 0  # requests cut short on the model by their client leaving
    skipped: int = 0  # requests whose client left before the model reached them
    receipts: Counter[str] = field(default_factory=Counter)  # sent, failed
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def answer(self, result: AskResult, *, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one answer of the model."""
        with self._lock:
            self.answered += 1
            self.prompt_tokens += prompt_tokens
            self.cached_tokens += min(result.grafted_tokens, prompt_tokens)
            self.prefilled_tokens += result.prefilled_tokens
            self.decoded_tokens += result.decoded_tokens
            self.completion_tokens += completion_tokens
            used = result.used_mode
            if used != "off":
                self.grafts[used] += 1
            elif result.requested_mode != "off":
                self.fallbacks[reason_class(result)] += 1
            outcome = result.generation.outcome
            if outcome is not None and outcome.probe is not None:
                self.probes["run"] += 1
            elif outcome is not None and result.remembered_probe is not None:
                self.probes["remembered"] += 1

    def stop(self, *, started: bool) -> None:
        """One request whose client left: ``started`` on the model (stopped) or not (skipped)."""
        with self._lock:
            if started:
                self.stopped += 1
            else:
                self.skipped += 1

    def receipt(self, *, sent: bool) -> None:
        with self._lock:
            self.receipts["sent" if sent else "failed"] += 1

    def snapshot(self) -> RunCounters:
        """A copy of every count at one instant (safe to read from another thread)."""
        with self._lock:
            return replace(
                self,
                grafts=Counter(self.grafts),
                fallbacks=Counter(self.fallbacks),
                probes=Counter(self.probes),
                receipts=Counter(self.receipts),
                _lock=threading.Lock(),
            )
