"""The registry's object storage: where the bytes of objects live.

:func:`open_storage` turns a storage URL into a backend:

- a local path, or ``file:///abs/path`` → :class:`FolderStorage` (the embedded
  default; no options);
- ``s3://bucket/prefix`` → :class:`~kvreg_registry.storage.s3.S3Storage`, with the
  options ``endpoint_url``, ``access_key``, ``secret_key``, ``region``,
  ``redirect``, ``multipart_threshold`` (default 8 MiB), ``part_size`` (default
  8 MiB, at least 5 MiB), ``max_concurrency`` and ``conditional_writes``.

Options that are ``None`` count as not given; integers and booleans may be given
as strings (``"1"``, ``"false"``) as they come from the environment. Anything
else (another scheme, a query string, an unknown option, a bad bucket name)
raises ``ConfigError``. Nothing is contacted here: call
:meth:`ObjectStorage.check` at startup. boto3 is imported only for S3 URLs.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.core.errors import ConfigError
from kvreg_registry.storage.base import READ_PIECE, ObjectStorage, PendingObject, StoredObject
from kvreg_registry.storage.folder import FolderStorage
from kvreg_registry.storage.s3_names import validate_bucket, validate_prefix

if TYPE_CHECKING:
    from kvreg_registry.storage.s3 import S3Storage

__all__ = [
    "READ_PIECE",
    "FolderStorage",
    "ObjectStorage",
    "PendingObject",
    "S3Storage",
    "StoredObject",
    "open_storage",
]

_S3_STRINGS = ("endpoint_url", "access_key", "secret_key", "region")
_S3_INTS = ("multipart_threshold", "part_size", "max_concurrency")
_S3_BOOLS = ("redirect", "conditional_writes")


def open_storage(url: str, **options: Any) -> ObjectStorage:
    """The storage backend that ``url`` names (see the module docstring)."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(
            "the storage URL is empty", hint="a folder path, file:///abs/path or s3://bucket/prefix"
        )
    given = {k: v for k, v in options.items() if v is not None}
    if "://" not in url:
        return _folder(Path(url), given)
    parsed = urllib.parse.urlsplit(url)
    if parsed.query or parsed.fragment:
        raise ConfigError(f"storage URL {url!r} must not have a query or fragment")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"file storage URL {url!r} names a host; use file:///abs/path")
        path = urllib.parse.unquote(parsed.path)
        if not path.startswith("/"):
            raise ConfigError(f"file storage URL {url!r} must hold an absolute path")
        return _folder(Path(path), given)
    if parsed.scheme == "s3":
        return _s3(url, parsed, given)
    raise ConfigError(
        f"unsupported storage URL {url!r}",
        hint="a folder path, file:///abs/path or s3://bucket/prefix",
    )


def _folder(path: Path, options: dict[str, Any]) -> FolderStorage:
    if options:
        raise ConfigError(f"folder storage takes no options, got {sorted(options)}")
    if "\x00" in str(path):
        raise ConfigError("storage path contains a NUL character")
    return FolderStorage(path.absolute())


def _s3(url: str, parsed: urllib.parse.SplitResult, options: dict[str, Any]) -> S3Storage:
    from kvreg_registry.storage.s3 import S3Storage  # imported lazily: boto3 is heavy

    if parsed.username is not None or parsed.password is not None or parsed.port is not None:
        raise ConfigError(f"S3 URL {url!r} must be s3://bucket/prefix; pass credentials as options")
    unknown = set(options) - set(_S3_STRINGS) - set(_S3_INTS) - set(_S3_BOOLS)
    if unknown:
        raise ConfigError(f"unknown S3 storage options: {sorted(unknown)}")
    bucket = validate_bucket(parsed.netloc)
    prefix = validate_prefix(parsed.path.removeprefix("/"))
    kwargs: dict[str, Any] = {}
    for name, value in options.items():
        if name in _S3_STRINGS:
            if not isinstance(value, str):
                raise ConfigError(f"S3 option {name} must be a string")
            kwargs[name] = value or None
        elif name in _S3_INTS:
            kwargs[name] = _as_int(name, value)
        else:
            kwargs[name] = _as_bool(name, value)
    return S3Storage(bucket, prefix, **kwargs)


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"S3 option {name} must be an integer, not {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"S3 option {name} must be an integer, not {value!r}") from None


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
    raise ConfigError(f"S3 option {name} must be a boolean, not {value!r}")


def __getattr__(name: str) -> Any:
    if name == "S3Storage":  # imported lazily: boto3 is heavy, and only S3 needs it
        from kvreg_registry.storage.s3 import S3Storage

        return S3Storage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
