"""Incremental text decoding (``kvreg.app.serving.textstream``) against real tokenizers: the pieces
handed out make exactly the whole decode, the windows agree with it (no fallback to the whole
decode), for random token ids — partial UTF-8 bytes and special tokens included — and real text."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvreg.app.serving.textstream import TextStream

TEXTS = ["Héllo wörld, 世界! 🙂 naïve café — ünïcödé", "Count: one, two,  three\n\n\tfour 1234567 ", "a" * 50]


def _stream_all(tokenizer: Any, ids: list[int], stops: tuple[str, ...] = ()) -> tuple[TextStream, str]:
    def decode(chunk: Sequence[int]) -> str:
        return str(tokenizer.decode(list(chunk), skip_special_tokens=True))

    stream = TextStream(decode, len(ids) + 1, stops)
    pieces = []
    for t in ids:
        more = stream.feed(t)
        pieces.append(stream.delta())
        if not more:
            break
    stream.finish()
    pieces.append(stream.delta())
    return stream, "".join(pieces)


def _check(tokenizer: Any, caplog: pytest.LogCaptureFixture, seed: int) -> None:
    caplog.set_level(logging.WARNING, logger="kvreg.app.serving.textstream")
    rng = random.Random(seed)
    vocab = len(tokenizer)
    cases = [tokenizer.encode(t, add_special_tokens=False) for t in TEXTS]
    cases += [[rng.randrange(vocab) for _ in range(rng.randint(1, 80))] for _ in range(150)]
    for ids in cases:
        stream, sent = _stream_all(tokenizer, ids)
        whole = tokenizer.decode(ids, skip_special_tokens=True)
        assert stream.text == whole and sent == whole, ids
        stop = whole[len(whole) // 2 : len(whole) // 2 + 2]
        if stop.strip():  # a stop string found by the windows cuts where the whole decode would
            stream, sent = _stream_all(tokenizer, ids, (stop,))
            assert stream.text == sent == whole[: whole.index(stop)] and stream.finish_reason == "stop"
    assert not caplog.records  # the windows never spelled the text otherwise


def test_the_tiny_byte_level_tokenizer(caplog: pytest.LogCaptureFixture) -> None:
    from kvreg.engine.tiny import CHATML_TEMPLATE, build_tokenizer

    _check(build_tokenizer(chat_template=CHATML_TEMPLATE), caplog, seed=1)


@pytest.mark.slow
def test_the_smollm2_tokenizer(smollm2: Path, caplog: pytest.LogCaptureFixture) -> None:
    from transformers import AutoTokenizer

    _check(AutoTokenizer.from_pretrained(smollm2), caplog, seed=2)
