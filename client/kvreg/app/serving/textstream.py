"""Completion tokens to text as they come: end ids, stop strings, held-back partial characters.

:class:`TextStream` is fed one token at a time (in the model's worker thread). It
decodes incrementally: each token decodes only a short window (the tokens since the
last piece of text before it, for the spacing, and the new ones), so a long completion
costs linear, not quadratic, decoding; a piece ending in a partial UTF-8 character waits
for the next token. Once finished, the whole completion is decoded once and, should the
windows have spelled it differently (a tokenizer whose clean-up looks further back), the
whole decode is the text. It knows nothing about HTTP or the model beyond a decode
function (which skips special tokens or not, as the request asked).

The stop rules, vLLM's:

- the completion ends (``finish_reason`` ``stop``) at a token of ``eos`` (the model's
  end-of-turn ids; none with ``ignore_eos``) or of ``stop_ids`` (the request's), whose text
  is left out unless ``include_stop`` (vLLM's ``include_stop_str_in_output``);
- or at the first stop string: the text is cut where it begins (where it ends with
  ``include_stop``); only what can no longer change is handed out, so text that could still
  become a stop string is held back until the next token decides;
- neither can end it before it holds ``min_tokens`` tokens: an end id among them is text
  like any token, and a stop string counts only if it ends in the text of a later token;
- else ``length`` at ``max_tokens`` tokens.
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
    eos: frozenset[int] = frozenset()  # the model's end-of-turn ids (they end it unless ignore_eos)
    stop_ids: frozenset[int] = frozenset()  # the request's stop token ids (they always end it)
    ignore_eos: bool = False
    min_tokens: int = 0  # no end id or stop string ends the completion before it holds this many
    include_stop: bool = False  # the stop string or stop token's text stays in the text
    tokens: list[int] = field(default_factory=list)
    text: str = ""  # the final text so far (cut at a stop string once one is found)
    sent: int = 0  # characters of ``text`` handed out
    finish_reason: str | None = None  # "stop" (an end id or a stop string) or "length"
    raw: str = ""  # the decoded completion so far, before any stop string cut
    window: int = 0  # tokens[window:read] decode to the end of ``raw`` (spacing context)
    read: int = 0  # tokens[:read] are in ``raw``; the rest wait for a whole character
    guard: int = 0  # a stop string must end after raw[:guard] (the text of the first min_tokens tokens)
    shown: int | None = None  # tokens[:shown] make the text (None: all; one less after a hidden end id)
    whole: bool = False  # ``raw`` is the whole decode of ``tokens`` (checked once finished)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # fed and read by two threads

    @property
    def ends(self) -> frozenset[int]:
        """The token ids that end the completion (once it holds ``min_tokens`` tokens)."""
        return self.stop_ids if self.ignore_eos else self.eos | self.stop_ids

    @property
    def unwanted_early(self) -> frozenset[int]:
        """The ids the sampler keeps out before ``min_tokens`` (every end id, as vLLM masks them,
        ``ignore_eos`` or not)."""
        return self.eos | self.stop_ids

    def feed(self, token: int) -> bool:
        """Take one token; False once the completion is finished (the decoding should stop)."""
        with self.lock:
            return self._feed(token)

    def _feed(self, token: int) -> bool:
        if self.finish_reason is not None:
            return False
        self.tokens.append(token)
        early = len(self.tokens) <= self.min_tokens
        if not early and token in self.ends:
            self.finish_reason = "stop"
            if not self.include_stop:
                self.shown = len(self.tokens) - 1  # the end id is counted, not shown
        if self.shown is None:
            before = len(self.raw)
            self._decode_new()
            if early:
                self.guard = len(self.raw)
            self._cut(before)
        if self.finish_reason is None and len(self.tokens) >= self.max_tokens:
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
        """Cut the text at the first stop string (searching only where a new one can end: after
        ``before`` and after the ``guard``)."""
        after = max(before, self.guard)
        found = [(i, s) for s in self.stops if (i := self.raw.find(s, max(0, after - len(s) + 1))) >= 0]
        if found:
            at, stop = min(found)
            self.text, self.finish_reason = self.raw[: at + len(stop) if self.include_stop else at], "stop"
        else:
            self.text = self.raw

    def _settle(self) -> None:
        """Once finished: the whole decode, once, is the text (the windows agree with it but for a
        tail still waiting for a whole character)."""
        if self.whole:
            return
        self.whole = True
        shown = self.tokens if self.shown is None else self.tokens[: self.shown]
        full = self.decode(shown)
        if full == self.raw:
            return
        if not (full.startswith(self.raw) and self.read < len(shown)):
            log.warning("serve: incremental decoding spelled the text otherwise; the whole decode is used")
        reason, self.finish_reason = self.finish_reason, None
        self.raw = full
        if self.guard:  # the first min_tokens tokens' text, in the whole decode
            self.guard = len(self.decode(shown[: self.min_tokens]))
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
            if not self.include_stop:  # keep back a tail that may be the start of a stop string
                for stop in self.stops:
                    for k in range(min(len(stop) - 1, end - self.sent), 0, -1):
                        if self.text[end - k : end] == stop[:k]:
                            end -= k
                            break
        out = self.text[self.sent : end]
        self.sent = max(self.sent, end)
        return out
