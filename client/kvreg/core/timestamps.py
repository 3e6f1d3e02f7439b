"""RFC 3339 timestamps in UTC: the one formatter and parser every part of kvreg uses.

Three shapes are written, all in UTC with a ``Z`` suffix:

- :func:`rfc3339` whole seconds, ``2026-11-29T15:15:28Z`` (manifests, receipts,
  API documents, audit exports);
- :func:`rfc3339_micro` microseconds, ``2026-11-29T15:15:28.123456Z`` (the audit
  log's entries and the local ref log, where order within a second matters);
- :func:`compact_micro` ``20261129T151528.123456Z`` (file names, e.g. quarantined
  objects).

A naive ``datetime`` (as SQLite hands back) is taken to be UTC already, never the
host's local time. :func:`parse_rfc3339` accepts what these write and any RFC 3339
time with an offset, and returns an aware UTC ``datetime``.

This module formats and parses; it does not read clocks other than through the
``now`` helpers, and it knows nothing of the documents the times go into.
"""

from __future__ import annotations

import datetime as dt

__all__ = [
    "compact_micro",
    "from_epoch",
    "parse_rfc3339",
    "rfc3339",
    "rfc3339_micro",
    "utc_now",
]

_SECONDS = "%Y-%m-%dT%H:%M:%SZ"
_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"
_COMPACT = "%Y%m%dT%H%M%S.%fZ"


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def utc_now() -> dt.datetime:
    """The current time, aware, in UTC."""
    return dt.datetime.now(dt.UTC)


def from_epoch(seconds: float) -> dt.datetime:
    """A POSIX time (``time.time()``) as an aware UTC ``datetime``."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def rfc3339(t: dt.datetime | None = None) -> str:
    """``t`` (default: now) as RFC 3339 in UTC, whole seconds: ``2026-11-29T15:15:28Z``."""
    return _utc(utc_now() if t is None else t).strftime(_SECONDS)


def rfc3339_micro(t: dt.datetime | None = None) -> str:
    """``t`` (default: now) as RFC 3339 in UTC with microseconds."""
    return _utc(utc_now() if t is None else t).strftime(_MICRO)


def compact_micro(t: dt.datetime | None = None) -> str:
    """``t`` (default: now) as ``20261129T151528.123456Z``: sortable and safe in a file name."""
    return _utc(utc_now() if t is None else t).strftime(_COMPACT)


def parse_rfc3339(text: str) -> dt.datetime:
    """An RFC 3339 time with a date, a time and an offset (``Z`` or ``±hh:mm``), in UTC.

    Raises ``ValueError`` for anything else (no offset, no time, out of range in UTC);
    callers turn it into their own typed error with the field's name.
    """
    if "T" not in text and "t" not in text:
        raise ValueError(f"{text!r} has no time part")
    t = dt.datetime.fromisoformat(text.replace("z", "Z"))
    if t.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset")
    try:
        return t.astimezone(dt.UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise ValueError(f"{text!r} is out of range in UTC") from None
