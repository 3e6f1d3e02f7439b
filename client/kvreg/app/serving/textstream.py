"""Completion tokens to text as they come: stop strings, held-back partial characters.

:class:`TextStream` is fed one token at a time (in the model's worker thread). It
decodes the whole completion so far (special tokens skipped, as ``kvreg ask`` prints
it), cuts it at the first stop string, and hands out only what can no longer change:
text ending in a partial UTF-8 character, or that could still become a stop string,
is held back until the next token decides. It knows nothing about HTTP or the model
beyond a decode function.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

REPLACEMENT = "\ufffd"  # what a partial UTF-8 sequence decodes to


@dataclass
class TextStream:
    """The completion's text so far, cut at ``stops``, at most ``max_tokens`` tokens."""

    decode: Callable[[Sequence[int]], str]
    max_tokens: int
    stops: tuple[str, ...] = ()
    eos: int | None = None
    tokens: list[int] = field(default_factory=list)
    text: str = ""  # the final text so far (cut at a stop string once one is found)
    sent: int = 0  # characters of ``text`` handed out
    finish_reason: str | None = None  # "stop" (EOS or a stop string) or "length"
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # fed and read by two threads

    def feed(self, token: int) -> bool:
        """Take one token; False once the completion is finished (the decoding should stop)."""
        with self.lock:
            return self._feed(token)

    def _feed(self, token: int) -> bool:
        if self.finish_reason is not None:
            return False
        self.tokens.append(token)
        text = self.decode(self.tokens)
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.finish_reason = text[:cut], "stop"
        else:
            self.text = text
            if token == self.eos:
                self.finish_reason = "stop"
            elif len(self.tokens) >= self.max_tokens:
                self.finish_reason = "length"
        return self.finish_reason is None

    def finish(self) -> None:
        """The decoding ended without saying why (its own step limit): that is the length."""
        with self.lock:
            if self.finish_reason is None:
                self.finish_reason = "length"

    def delta(self) -> str:
        """The text that can no longer change and was not handed out yet; marks it handed out."""
        with self.lock:
            return self._delta()

    def _delta(self) -> str:
        end = len(self.text)
        if self.finish_reason is None:
            while end > self.sent and self.text[end - 1] == REPLACEMENT:
                end -= 1
            for stop in self.stops:  # keep back a tail that may be the start of a stop string
                for k in range(min(len(stop) - 1, end - self.sent), 0, -1):
                    if self.text[end - k : end] == stop[:k]:
                        end -= k
                        break
        out = self.text[self.sent : end]
        self.sent = max(self.sent, end)
        return out
