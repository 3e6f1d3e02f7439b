"""Completion tokens to text as they come: stop strings, held-back partial characters.

:class:`TextStream` is fed one token at a time (in the model's worker thread). It
decodes incrementally: each token decodes only a short window (the tokens since the
last piece of text before it, for the spacing, and the new ones), so a long completion
costs linear, not quadratic, decoding; a piece ending in a partial UTF-8 character waits
for the next token. Once finished, the whole completion is decoded once and, should the
windows have spelled it differently (a tokenizer whose clean-up looks further back), the
whole decode is the text (special tokens skipped, as ``kvreg ask`` prints it). The text
is cut at the first stop string, and only what can no longer change is handed out: text
ending in a partial character, or that could still become a stop string, is held back
until the next token decides. It knows nothing about HTTP or the model beyond a decode
function.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

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
    raw: str = ""  # the decoded completion so far, before any stop string cut
    window: int = 0  # tokens[window:read] decode to the end of ``raw`` (spacing context)
    read: int = 0  # tokens[:read] are in ``raw``; the rest wait for a whole character
    whole: bool = False  # ``raw`` is the whole decode of ``tokens`` (checked once finished)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # fed and read by two threads

    def feed(self, token: int) -> bool:
        """Take one token; False once the completion is finished (the decoding should stop)."""
        with self.lock:
            return self._feed(token)

    def _feed(self, token: int) -> bool:
        if self.finish_reason is not None:
            return False
        self.tokens.append(token)
        before = len(self.raw)
        self._decode_new()
        self._cut(before)
        if self.finish_reason is None:
            if token == self.eos:
                self.finish_reason = "stop"
            elif len(self.tokens) >= self.max_tokens:
                self.finish_reason = "length"
        if self.finish_reason is not None:
            self._settle()
        return self.finish_reason is None

    def _decode_new(self) -> None:
        """Add the text of the tokens after ``read``, unless it ends in a partial character."""
        prev = self.decode(self.tokens[self.window : self.read])
        text = self.decode(self.tokens[self.window :])
        if len(text) > len(prev) and text.startswith(prev) and not text.endswith(REPLACEMENT):
            self.raw += text[len(prev) :]
            self.window, self.read = self.read, len(self.tokens)

    def _cut(self, before: int) -> None:
        """Cut the text at the first stop string (searching only where a new one can be)."""
        if self.finish_reason is not None:
            return
        longest = max((len(stop) for stop in self.stops), default=0)
        start = max(0, before - longest + 1)
        cut = min((i for i in (self.raw.find(s, start) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.finish_reason = self.raw[:cut], "stop"
        else:
            self.text = self.raw

    def _settle(self) -> None:
        """Once finished: the whole decode, once, is the text (the windows agree with it but for a
        tail still waiting for a whole character)."""
        if self.whole:
            return
        self.whole = True
        full = self.decode(self.tokens)
        if full == self.raw:
            return
        if not (full.startswith(self.raw) and self.read < len(self.tokens)):
            log.warning("serve: incremental decoding spelled the text otherwise; the whole decode is used")
        self.raw, reason, self.finish_reason = full, self.finish_reason, None
        self._cut(0)
        self.finish_reason = self.finish_reason or reason

    def finish(self) -> None:
        """The decoding ended without saying why (its own step limit): that is the length."""
        with self.lock:
            if self.finish_reason is None:
                self.finish_reason = "length"
            self._settle()

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
