"""Settings from the environment, and the strict Range parser of object GETs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.core.errors import ConfigError, RangeNotSatisfiableError, RequestInvalidError
from kvreg_registry.api.routes_objects import parse_range
from kvreg_registry.settings import Settings


def test_embedded_defaults_need_no_setup(tmp_path: Path) -> None:
    s = Settings.from_env({}, data_dir=tmp_path)
    assert s.effective_database_url == f"sqlite:///{(tmp_path / 'registry.sqlite3').resolve()}"
    assert s.effective_storage_url == str((tmp_path / "objects").resolve())
    assert s.s3.redirect is False and s.migrate_on_start is True


def test_environment_variables() -> None:
    env = {
        "KVREG_DATA": "/srv/kvreg",
        "KVREG_DATABASE_URL": "postgresql+psycopg://u:p@127.0.0.1/db",
        "KVREG_STORAGE": "s3://bucket/prefix",
        "KVREG_S3_ENDPOINT": "http://127.0.0.1:8333",
        "KVREG_S3_REDIRECT": "yes",
        "KVREG_MAX_OBJECT_BYTES": "1024",
        "KVREG_GC_GRACE_SECONDS": "0",
        "KVREG_MIGRATE_ON_START": "false",
    }
    s = Settings.from_env(env)
    assert s.data_dir == Path("/srv/kvreg")
    assert s.effective_database_url == env["KVREG_DATABASE_URL"]
    assert s.effective_storage_url == "s3://bucket/prefix"
    assert s.s3.endpoint_url == "http://127.0.0.1:8333" and s.s3.redirect is True
    assert s.max_object_bytes == 1024 and s.gc_grace_seconds == 0 and s.migrate_on_start is False
    assert "secret" not in repr(Settings.from_env({"KVREG_S3_SECRET_KEY": "secret"}))


@pytest.mark.parametrize(
    "env",
    [{"KVREG_MAX_OBJECT_BYTES": "lots"}, {"KVREG_MAX_OBJECT_BYTES": "0"}, {"KVREG_S3_REDIRECT": "maybe"}],
)
def test_bad_settings_are_clear_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="KVREG_"):
        Settings.from_env(env)


@pytest.mark.parametrize(
    "header, expected",
    [
        (None, None),
        ("bytes=0-9", (0, 10)),
        ("bytes=5-", (5, 100)),
        ("bytes=-10", (90, 100)),
        ("bytes=-1000", (0, 100)),
        ("bytes=90-1000", (90, 100)),
        ("bytes=99-99", (99, 100)),
        ("BYTES=0-0", (0, 1)),
    ],
)
def test_range_parsing(header: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=150-200", "bytes=-0"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(RangeNotSatisfiableError) as info:
        parse_range(header, 100)
    assert info.value.details["size"] == 100


@pytest.mark.parametrize(
    "header",
    ["items=0-1", "bytes=0-1,5-6", "bytes=a-b", "bytes=-", "bytes=5-2", "bytes=" + "9" * 30 + "-", "bytes"],
)
def test_malformed_ranges(header: str) -> None:
    with pytest.raises((RequestInvalidError, RangeNotSatisfiableError)):
        parse_range(header, 100)
