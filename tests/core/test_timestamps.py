import datetime as dt

import pytest

from kvreg.core.timestamps import compact_micro, from_epoch, parse_rfc3339, rfc3339, rfc3339_micro

T = dt.datetime(2026, 11, 29, 15, 15, 28, 123456, tzinfo=dt.UTC)


def test_the_three_shapes():
    assert rfc3339(T) == "2026-11-29T15:15:28Z"
    assert rfc3339_micro(T) == "2026-11-29T15:15:28.123456Z"
    assert compact_micro(T) == "20261129T151528.123456Z"


def test_naive_times_are_utc_and_offsets_are_converted():
    assert rfc3339(T.replace(tzinfo=None)) == "2026-11-29T15:15:28Z"
    plus_two = T.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert rfc3339(plus_two) == "2026-11-29T15:15:28Z"


def test_epoch_and_round_trip():
    assert rfc3339(from_epoch(0)) == "1970-01-01T00:00:00Z"
    assert parse_rfc3339(rfc3339_micro(T)) == T
    assert parse_rfc3339("2026-11-29T17:15:28+02:00") == T.replace(microsecond=0)


@pytest.mark.parametrize("text", ["2026-11-29", "2026-11-29T15:15:28", "0001-01-01T00:00:00+01:00", "nope"])
def test_parse_refuses_times_without_offset_or_out_of_range(text):
    with pytest.raises(ValueError):
        parse_rfc3339(text)
