"""``kvreg.app.serving.textstream``: stop strings cut the text, held-back pieces, finish reasons;
and the request checks of ``kvreg.app.serving.protocol``."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kvreg.app.serving.protocol import ApiError, ChatRequest, CompletionRequest
from kvreg.app.serving.textstream import TextStream

VOCAB = {1: "Hel", 2: "lo", 3: " wor", 4: "ld", 5: "\ufffd", 6: "é", 9: ""}


def _decode(ids: Sequence[int]) -> str:
    text = "".join(VOCAB[i] for i in ids)
    return text.replace("\ufffdé", "é")  # token 5 then 6: one character in two tokens


def _run(
    tokens: list[int], stops: tuple[str, ...] = (), max_tokens: int = 10
) -> tuple[TextStream, list[str]]:
    stream = TextStream(_decode, max_tokens, stops, eos=frozenset({9}))
    pieces = []
    for t in tokens:
        more = stream.feed(t)
        pieces.append(stream.delta())
        if not more:
            break
    stream.finish()
    pieces.append(stream.delta())
    return stream, pieces


def test_the_pieces_make_the_text_and_the_length_finishes_it() -> None:
    stream, pieces = _run([1, 2, 3, 4], max_tokens=4)
    assert "".join(pieces) == stream.text == "Hello world" and stream.finish_reason == "length"
    assert stream.tokens == [1, 2, 3, 4]


def test_eos_finishes_with_stop() -> None:
    stream, pieces = _run([1, 2, 9, 3])
    assert "".join(pieces) == "Hello" and stream.finish_reason == "stop" and len(stream.tokens) == 3


def test_a_stop_string_cuts_the_text_and_a_possible_start_is_held_back() -> None:
    stream, pieces = _run([1, 2, 3, 4], stops=("o w",))
    assert stream.text == "Hell" and stream.finish_reason == "stop"
    assert pieces[0] == "Hel" and pieces[1] == "l"  # "o" could begin "o w": held back
    assert "".join(pieces) == "Hell"


def test_a_partial_character_is_held_back_until_complete() -> None:
    stream, pieces = _run([1, 5, 6, 2])
    assert pieces[:3] == ["Hel", "", "é"]
    assert "".join(pieces) == stream.text == "Helélo"


def test_requests_refuse_what_the_server_does_not_do() -> None:
    with pytest.raises(ApiError) as n:
        CompletionRequest(model="m", prompt="x", n=3).check()
    assert n.value.param == "n" and n.value.status == 400
    with pytest.raises(ApiError):
        CompletionRequest(model="m", prompt=["a", "b"]).check()
    with pytest.raises(ApiError):
        CompletionRequest(model="m", prompt="x", stop=["a", "b", "c", "d", "e"]).check()
    chat = ChatRequest(
        model="m", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "u"}]
    )
    assert chat.conversation() == [{"role": "user", "content": "hi"}]
    with pytest.raises(ApiError):
        ChatRequest(model="m", messages=[{"role": "user", "content": [{"type": "image_url"}]}]).conversation()
    assert ChatRequest(model="m", messages=[], max_completion_tokens=5, max_tokens=9).limit(16) == 5
    assert CompletionRequest(model="m", prompt=[1, 2]).text_or_tokens() == [1, 2]


def test_decoding_is_incremental_linear_in_the_tokens() -> None:
    decoded: list[int] = []

    def counting(ids: Sequence[int]) -> str:
        decoded.append(len(ids))
        return _decode(ids)

    n = 600
    stream = TextStream(counting, n, ("xyz",))
    for i in range(n):
        stream.feed([1, 2, 3, 4][i % 4])
        stream.delta()
    assert stream.finish_reason == "length" and stream.text == "Hello world" * (n // 4)
    # each token decodes a window of a few tokens; the whole completion is decoded once, at the end
    assert sum(decoded) <= 5 * n
