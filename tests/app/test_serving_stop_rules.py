"""``kvreg.app.serving.textstream``'s stop rules (vLLM's): the model's end ids and the request's stop
ids, ``ignore_eos``, ``min_tokens`` for ids and stop strings, ``include_stop_str_in_output``, and
the pieces handed out always adding up to the final text."""

from __future__ import annotations

from collections.abc import Sequence

from kvreg.app.serving.textstream import TextStream

# 7 and 8 are special tokens: their text is skipped (as the server decodes by default)
VOCAB = {1: "Hel", 2: "lo", 3: " wor", 4: "ld", 5: ".", 6: "!", 7: "", 8: ""}
EOS, EOT = 7, 8


def _decode(ids: Sequence[int]) -> str:
    return "".join(VOCAB[i] for i in ids)


def _run(tokens: list[int], **kw: object) -> tuple[TextStream, list[str]]:
    stream = TextStream(_decode, int(kw.pop("max_tokens", 10)), eos=frozenset({EOS, EOT}), **kw)  # type: ignore[arg-type]
    pieces = []
    for t in tokens:
        more = stream.feed(t)
        pieces.append(stream.delta())
        if not more:
            break
    stream.finish()
    pieces.append(stream.delta())
    assert "".join(pieces) == stream.text
    return stream, pieces


def test_every_end_id_of_the_model_ends_the_turn() -> None:
    for end in (EOS, EOT):
        stream, _ = _run([1, 2, end, 3])
        assert stream.text == "Hello" and stream.finish_reason == "stop" and stream.tokens == [1, 2, end]


def test_a_stop_token_id_ends_it_and_its_text_is_left_out_unless_asked() -> None:
    stream, _ = _run([1, 2, 5, 3], stop_ids=frozenset({5}))
    assert stream.text == "Hello" and stream.finish_reason == "stop" and len(stream.tokens) == 3
    kept, _ = _run([1, 2, 5, 3], stop_ids=frozenset({5}), include_stop=True)
    assert kept.text == "Hello." and kept.finish_reason == "stop"


def test_ignore_eos_goes_past_the_end_ids_but_not_the_stop_ids() -> None:
    stream, _ = _run([1, EOS, 2, EOT, 3, 4], ignore_eos=True, max_tokens=6)
    assert stream.text == "Hello world" and stream.finish_reason == "length"
    stopped, _ = _run([1, EOS, 2, 6, 3], ignore_eos=True, stop_ids=frozenset({6}))
    assert stopped.text == "Hello" and stopped.finish_reason == "stop"
    assert stream.unwanted_early == {EOS, EOT}  # the sampler keeps them out before min_tokens anyway


def test_no_end_id_or_stop_id_ends_it_before_min_tokens() -> None:
    # forced tokens (a verified answer in knowledge mode) may hold an end id early: it is text
    stream, _ = _run([1, EOS, 2, EOS, 3], min_tokens=3)
    assert stream.text == "Hello" and stream.finish_reason == "stop" and len(stream.tokens) == 4
    ids, _ = _run([5, 1, 5, 2], stop_ids=frozenset({5}), min_tokens=1)
    assert ids.text == ".Hel" and len(ids.tokens) == 3


def test_a_stop_string_counts_only_if_it_ends_after_min_tokens() -> None:
    inside, _ = _run([1, 2, 3, 4], stops=("lo",), min_tokens=2)  # "lo" ends in token 2's text
    assert inside.text == "Hello world" and inside.finish_reason == "length"
    across, _ = _run([1, 2, 3, 4], stops=("o w",), min_tokens=2)  # begins in token 2, ends in 3
    assert across.text == "Hell" and across.finish_reason == "stop"
    after, _ = _run([1, 2, 3, 4, 1, 2], stops=("lo",), min_tokens=2)
    assert after.text == "Hello worldHel" and after.finish_reason == "stop"


def test_include_stop_str_in_output_keeps_the_stop_string_and_holds_nothing_back() -> None:
    stream, pieces = _run([1, 2, 3, 4], stops=("o w",), include_stop=True)
    assert stream.text == "Hello w" and stream.finish_reason == "stop"
    assert pieces[:2] == ["Hel", "lo"]  # "o" is sent at once: the stop string would be kept anyway
    without, pieces = _run([1, 2, 3, 4], stops=("o w",))
    assert without.text == "Hell" and pieces[:2] == ["Hel", "l"]


def test_skipping_special_tokens_is_the_decoders_choice() -> None:
    shown = {**VOCAB, 7: "</s>"}
    stream = TextStream(
        lambda ids: "".join(shown[i] for i in ids), 10, eos=frozenset({EOS}), include_stop=True
    )
    for t in (1, 2, EOS):
        stream.feed(t)
    assert stream.text == "Hello</s>" and stream.finish_reason == "stop"
