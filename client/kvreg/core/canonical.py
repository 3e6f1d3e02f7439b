"""Canonical JSON out, strict JSON in.

``canonical_json`` serializes a JSON value with RFC 8785 (JSON Canonicalization
Scheme) through the ``rfc8785`` package: sorted keys, no whitespace, ECMAScript
number formatting, UTF-8. The same value always gives the same bytes, which is what
digests and signatures are computed over.

``parse_json_object`` reads untrusted bytes (manifests, envelopes, policy files)
strictly: size-capped, UTF-8 only, no byte-order mark, a JSON object at the top
level, no duplicate keys, no ``NaN``/``Infinity`` (nor numbers that overflow to
them), integers and strings inside the I-JSON domain (RFC 7493) that RFC 8785
requires, and bounded nesting. Every failure raises the ``KvregError`` subclass the
caller names, so a manifest parser reports ``MANIFEST_INVALID`` and an envelope
parser ``ENVELOPE_INVALID``.

This module does not validate any schema (see ``kvreg.core.manifest`` and
``kvreg.core.envelope``), and it never re-serializes input to check it: callers
that need the digest of received bytes hash those bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import rfc8785

from kvreg.core.errors import KvregError, ManifestInvalidError, UsageError

__all__ = ["MAX_DEPTH", "canonical_json", "parse_json_object"]

#: The deepest nesting of arrays and objects that ``parse_json_object`` accepts.
MAX_DEPTH = 64

_INT_MAX = 2**53 - 1  # I-JSON: integers must be exactly representable as IEEE 754 doubles


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _BadNumber(ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def canonical_json(obj: Any, *, error: type[KvregError] = UsageError) -> bytes:
    """Serialize ``obj`` as RFC 8785 canonical JSON (UTF-8 bytes).

    ``obj`` may hold dicts with ``str`` keys, lists, tuples, ``str``, ``int``
    (within +-(2**53 - 1)), finite ``float``, ``bool`` and ``None``. Anything else
    raises ``error`` (``UsageError`` by default: serializing a bad value is a
    programming or input mistake, never silently repaired).

    A whole-number ``float`` of magnitude 2**53 or more (below 1e21) is refused too:
    RFC 8785 writes it as a bare digit string, which ``parse_json_object`` reads as
    an integer outside the I-JSON range and refuses, so writing it would produce a
    document kvreg itself cannot read back.
    """
    _check_writable_floats(obj, error)
    try:
        return rfc8785.dumps(obj)
    except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError) as e:
        raise error(f"value cannot be written as canonical JSON: {e}") from e


def _check_writable_floats(obj: Any, error: type[KvregError]) -> None:
    """Refuse floats whose canonical form would read back as an out-of-range integer."""
    stack: list[Any] = [obj]
    visited: set[int] = set()  # containers already walked: a cycle is left for rfc8785 to report
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list, tuple)):
            if id(node) in visited:
                continue
            visited.add(id(node))
            stack.extend(node.values() if isinstance(node, dict) else node)
        elif (
            isinstance(node, float)
            and math.isfinite(node)
            and node.is_integer()
            and _INT_MAX < abs(node) < 1e21
        ):
            raise error(
                f"value cannot be written as canonical JSON: {node!r} would be written as an "
                "integer outside the I-JSON range +-(2**53 - 1), which no kvreg reader accepts"
            )


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(text)
    return value


def _parse_constant(text: str) -> Any:
    raise _BadNumber(text)


def _check_string(s: str, what: str, path: str, error: type[KvregError]) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{what}: string at {path} contains an unpaired surrogate escape") from e


def _check_tree(value: Any, what: str, error: type[KvregError]) -> None:
    """Walk the parsed tree iteratively: depth, integer range, string encodability."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth >= MAX_DEPTH:
                raise error(f"{what}: nesting deeper than {MAX_DEPTH} levels at {path}")
            for key, child in node.items():
                _check_string(key, what, path, error)
                stack.append((child, f"{path}.{key}", depth + 1))
        elif isinstance(node, list):
            if depth >= MAX_DEPTH:
                raise error(f"{what}: nesting deeper than {MAX_DEPTH} levels at {path}")
            for i, child in enumerate(node):
                stack.append((child, f"{path}[{i}]", depth + 1))
        elif isinstance(node, str):
            _check_string(node, what, path, error)
        elif isinstance(node, int) and not isinstance(node, bool) and not -_INT_MAX <= node <= _INT_MAX:
            raise error(f"{what}: integer at {path} is outside the I-JSON range +-(2**53 - 1)")


def parse_json_object(
    data: bytes | bytearray | memoryview,
    *,
    what: str,
    max_bytes: int,
    error: type[KvregError] = ManifestInvalidError,
) -> dict[str, Any]:
    """Parse untrusted ``data`` as one JSON object, strictly.

    ``what`` names the document in messages ("manifest", "envelope"); ``error`` is
    the ``KvregError`` subclass raised on any failure. Returns plain ``dict``,
    ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None`` values.
    """
    if len(data) > max_bytes:
        raise error(f"{what} is {len(data)} bytes, more than the limit of {max_bytes}", size=len(data))
    try:
        text = bytes(data).decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise error(f"{what} is not valid UTF-8 (byte {e.start})") from e
    if text.startswith("\ufeff"):
        raise error(f"{what} starts with a byte-order mark")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_reject_duplicates,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except _DuplicateKey as e:
        raise error(f"{what} has a duplicate key {e.key!r}") from e
    except _BadNumber as e:
        raise error(f"{what} has a non-finite number {e.text!r}") from e
    except RecursionError as e:
        raise error(f"{what} is nested too deeply") from e
    except json.JSONDecodeError as e:
        raise error(f"{what} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from e
    except ValueError as e:  # e.g. int() refusing a huge digit string
        raise error(f"{what} is not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise error(f"{what} must be a JSON object at the top level, not {type(value).__name__}")
    _check_tree(value, what, error)
    return value
