"""The names an S3 store is addressed by: a bucket name and a key prefix, validated.

Used when an ``s3://bucket/prefix`` URL is parsed (``storage.open_storage``) and when
an ``S3Storage`` is made; imports no boto3, so checking a URL stays cheap. Keys
themselves are built by ``storage.s3`` from a validated prefix and digests.
"""

from __future__ import annotations

import re

from kvreg.core.errors import ConfigError

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def validate_bucket(bucket: str) -> str:
    if not isinstance(bucket, str) or _BUCKET.fullmatch(bucket) is None or ".." in bucket:
        raise ConfigError(
            f"not a valid S3 bucket name: {bucket!r}",
            hint="3-63 characters: lowercase letters, digits, '.' and '-'",
        )
    return bucket


def validate_prefix(prefix: str) -> str:
    """``a/b`` or ``a/b/`` → ``a/b/``; ``""`` stays empty. Refuses anything but plain segments."""
    if not isinstance(prefix, str):
        raise ConfigError(f"not a valid S3 key prefix: {prefix!r}")
    stripped = prefix.removesuffix("/")
    if not stripped:
        if prefix:
            raise ConfigError(f"not a valid S3 key prefix: {prefix!r}")
        return ""
    for segment in stripped.split("/"):
        if _PREFIX_SEGMENT.fullmatch(segment) is None or segment.strip(".") == "":
            raise ConfigError(
                f"not a valid S3 key prefix: {prefix!r}",
                hint="segments of letters, digits, '.', '_' and '-' separated by '/', no '..'",
            )
    return stripped + "/"
