"""Canonical JSON out (RFC 8785) and strict JSON in."""

from __future__ import annotations

import pytest

from kvreg.core.canonical import MAX_DEPTH, canonical_json, parse_json_object
from kvreg.core.errors import EnvelopeInvalidError, ManifestInvalidError, UsageError


def test_canonical_json_golden() -> None:
    obj = {"b": [1, 2.5, True, None], "a": "é\n", "c": {"z": 1, "y": -0.0}, "1": 1e21}
    assert canonical_json(obj) == b'{"1":1e+21,"a":"\xc3\xa9\\n","b":[1,2.5,true,null],"c":{"y":0,"z":1}}'


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 2**53, {1: "x"}, object(), b"bytes"])
def test_canonical_json_rejects_unrepresentable(bad: object) -> None:
    with pytest.raises(UsageError):
        canonical_json({"v": bad})


@pytest.mark.parametrize("big", [2.0**53, -(2.0**53), 1e20, 2.0**60])
def test_canonical_json_refuses_floats_it_would_write_as_unreadable_integers(big: float) -> None:
    with pytest.raises(UsageError, match="I-JSON"):
        canonical_json({"v": [big]})


@pytest.mark.parametrize("fine", [2.0**53 - 1, 1e21, 0.5, -1e300])
def test_canonical_json_floats_it_writes_are_read_back(fine: float) -> None:
    raw = canonical_json({"v": fine})
    assert canonical_json(parse_json_object(raw, what="doc", max_bytes=100)) == raw


def test_canonical_json_refuses_a_cycle() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(UsageError):
        canonical_json({"v": loop})


def test_canonical_json_error_class_is_chosen_by_caller() -> None:
    with pytest.raises(ManifestInvalidError):
        canonical_json(float("nan"), error=ManifestInvalidError)


def _parse(data: bytes, **kw: object) -> dict:
    return parse_json_object(data, what="doc", max_bytes=kw.pop("max_bytes", 1000), **kw)  # type: ignore[arg-type]


def test_parse_ok() -> None:
    assert _parse(b' {"a": [1, 2.5, "x", null, true], "b": {}} ') == {"a": [1, 2.5, "x", None, True], "b": {}}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
        (b'{"a": {"b": 1, "b": 1}}', "duplicate key 'b'"),
        (b'{"a": NaN}', "non-finite"),
        (b'{"a": Infinity}', "non-finite"),
        (b'{"a": -Infinity}', "non-finite"),
        (b'{"a": 1e400}', "non-finite"),
        (b'{"a": 9007199254740992}', "I-JSON"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"\\udc00": 1}', "surrogate"),
        (b"[1, 2]", "JSON object"),
        (b'"x"', "JSON object"),
        (b"", "not valid JSON"),
        (b'{"a": 1} x', "not valid JSON"),
        (b"{'a': 1}", "not valid JSON"),
        (b'{"a": "\xff"}', "UTF-8"),
        (b'\xef\xbb\xbf{"a": 1}', "byte-order mark"),
        (b'{"a": "\xed\xa0\x80"}', "UTF-8"),  # CESU-style surrogate bytes
    ],
)
def test_parse_rejects(data: bytes, match: str) -> None:
    with pytest.raises(ManifestInvalidError, match=match):
        _parse(data)


def test_parse_size_cap() -> None:
    with pytest.raises(ManifestInvalidError, match="more than the limit"):
        _parse(b'{"a": "' + b"x" * 100 + b'"}', max_bytes=50)
    assert _parse(b'{"a": 1}', max_bytes=8) == {"a": 1}


def test_parse_depth_cap() -> None:
    ok = b'{"a":' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    _parse(ok, max_bytes=10_000)
    deep = b'{"a":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"
    with pytest.raises(ManifestInvalidError, match="nesting"):
        _parse(deep, max_bytes=10_000)
    very_deep = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ManifestInvalidError):
        _parse(very_deep, max_bytes=1_000_000)


def test_parse_error_class_is_chosen_by_caller() -> None:
    with pytest.raises(EnvelopeInvalidError, match="envelope"):
        parse_json_object(b"[]", what="envelope", max_bytes=10, error=EnvelopeInvalidError)
