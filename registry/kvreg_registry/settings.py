"""The registry's settings: where metadata and objects live, limits, and defaults.

Settings are a frozen dataclass built explicitly (``Settings(...)``) or from the
environment (``Settings.from_env()``, variables ``KVREG_*``); nothing is read at
import time. The embedded defaults need no setup: SQLite (WAL) for metadata and a
local folder for objects, both under one data folder. This module does not open
databases or storage; ``kvreg_registry.db`` and ``kvreg_registry.storage`` do.

=============================  ==============================================  =====================
variable                       meaning                                         default
=============================  ==============================================  =====================
``KVREG_DATA``                 data folder (SQLite file, objects, log key)     ``./kvreg-data``
``KVREG_DATABASE_URL``         SQLAlchemy URL (``postgresql+psycopg://...``)   SQLite in the data dir
``KVREG_STORAGE``              ``/path``, ``file:///path`` or ``s3://b/pfx``   ``<data>/objects``
``KVREG_S3_ENDPOINT``          S3 endpoint URL (SeaweedFS, MinIO, AWS)         boto3's default
``KVREG_S3_ACCESS_KEY``        S3 credentials (else boto3's own chain)         unset
``KVREG_S3_SECRET_KEY``
``KVREG_S3_REGION``                                                            ``us-east-1``
``KVREG_S3_REDIRECT``          answer object GETs with a presigned redirect    ``0``
``KVREG_MAX_OBJECT_BYTES``     largest object accepted                         8 GiB
``KVREG_MAX_JSON_BYTES``       largest JSON body (envelopes, queries)          16 MiB
``KVREG_MAX_MISSING_DIGESTS``  digests per missing query                       100000
``KVREG_MAX_PACK_OBJECTS``     objects per object pack (one POST)              256
``KVREG_MAX_PACK_BYTES``       bytes per object pack                           256 MiB
``KVREG_UPLOAD_TTL_SECONDS``   how long an upload session protects objects     3600
``KVREG_GC_GRACE_SECONDS``     default GC grace period                         3600
``KVREG_LOG_KEY_FILE``         the audit log's Ed25519 signing key (PEM);      ``<data>/log.key``
                               made on first start; every process of one
                               registry must read the same file (the OCI
                               scoped tokens' key is derived from it)
``KVREG_LOG_ORIGIN``           the log's name in its checkpoints               ``kvreg-log-<key id>``
``KVREG_LOG_PUBLIC``           anyone may read log entries (else: any token)   ``0``
``KVREG_WEB_SESSION_HOURS``    how long a browser sign-in lasts (never longer   ``12``
                               than its token)
``KVREG_WEB_SECURE_COOKIES``   mark the web UI's cookies ``Secure`` (set it     ``0`` (``1`` over https)
                               behind a TLS proxy that speaks plain http)
``KVREG_AUTH_FAILURE_LIMIT``   failed authentications (bearer token or web     ``20``
                               sign-in) per client address and per token
                               prefix within the window before ``429
                               RATE_LIMITED``; ``0`` turns the limiter off
``KVREG_AUTH_FAILURE_WINDOW_SECONDS`` the limiter's sliding window              ``60``
``KVREG_AUTH_FAILURE_KEYS``    most addresses/prefixes the limiter remembers   ``10000``
                               (in this process's memory)
``KVREG_MIGRATE_ON_START``     run ``alembic upgrade head`` when a process     ``1``
                               starts (``kvreg-admin migrate`` always does)
``KVREG_PUBLIC_URL``           the registry's public base URL                  unset: the request's
                               (``https://registry.example.org``); the OCI     on loopback, else
                               token realm is ``<it>/v2/token``                ``https://<Host>``
``KVREG_OCI_TOKEN_SECONDS``    lifetime of a scoped ``/v2/`` token (60-3600;   ``300``
                               never past its API token's expiry)
``KVREG_FORWARDED_ALLOW_IPS``  the proxies whose ``X-Forwarded-For`` and        ``127.0.0.1``
                               ``X-Forwarded-Proto`` are believed: addresses
                               and networks, comma-separated; ``*`` any peer;
                               set and empty: none (see ``trusted_proxies``)
``KVREG_METRICS_TOKEN``        a bearer token ``GET /metrics`` asks for         unset: no token
                               (``kvreg_registry.api.metrics``)
=============================  ==============================================  =====================
"""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvreg.core.errors import ConfigError

ENV_PREFIX = "KVREG_"
GIB = 1 << 30
MIB = 1 << 20
#: The bounds of ``KVREG_OCI_TOKEN_SECONDS`` (the Docker token specification: at least 60 s).
MIN_OCI_TOKEN_SECONDS = 60
MAX_OCI_TOKEN_SECONDS = 3600


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{ENV_PREFIX}{name} must be at least {minimum}, not {value}")
    return value


def _bounded(env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int) -> int:
    value = _int(env, name, default, minimum=minimum)
    if value > maximum:
        raise ConfigError(f"{ENV_PREFIX}{name} must be at most {maximum}, not {value}")
    return value


def public_base_url(url: str) -> str:
    """``url`` without a trailing ``/`` if it is a usable public base URL: ``http`` or ``https``,
    a host (and port), an optional path, and no query, fragment or user info; else ``ConfigError``."""
    what = f"{ENV_PREFIX}PUBLIC_URL {url!r}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"{what} is not a URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{what} must start with https:// (or http://)")
    if not parts.hostname:
        raise ConfigError(f"{what} names no host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{what} must not hold a user name or password")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ConfigError(f"{what} must not have a query or fragment")
    if port == 0 or any(c.isspace() or c in '"\\<>' for c in url):
        raise ConfigError(f"{what} is not a usable URL")
    return url.rstrip("/")


def trusted_proxies(value: str) -> str:
    """``value`` (``KVREG_FORWARDED_ALLOW_IPS``) normalized, ``", "``-separated, if each entry is an
    IP address or a network (``10.0.0.0/8``), or the whole value is ``*`` (any peer); ``""``
    trusts no one. Anything else is a ``ConfigError`` (uvicorn would take a typo for a host name
    that never matches, and trust no one without a word)."""
    entries = [part.strip() for part in value.split(",") if part.strip()]
    if entries == ["*"]:
        return "*"
    normalized: list[str] = []
    for entry in entries:
        try:
            if "/" in entry:  # host bits are dropped: uvicorn would take "10.0.0.1/8" for a name
                normalized.append(str(ipaddress.ip_network(entry, strict=False)))
            else:
                normalized.append(str(ipaddress.ip_address(entry)))
        except ValueError:
            raise ConfigError(
                f"{ENV_PREFIX}FORWARDED_ALLOW_IPS: {entry!r} is not an IP address or network",
                hint="list the proxies' addresses or networks, comma-separated (127.0.0.1,10.0.0.0/8), "
                "or * for any peer",
            ) from None
    return ", ".join(normalized)


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{ENV_PREFIX}{name} must be a boolean (1/0, true/false), not {raw!r}")


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible store; ``None`` fields fall back to boto3's defaults."""

    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    redirect: bool = False

    def as_storage_options(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint_url,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "region": self.region,
            "redirect": self.redirect,
        }


@dataclass(frozen=True)
class Settings:
    """Everything the app needs; see the module docstring for the environment variables."""

    data_dir: Path = Path("kvreg-data")
    database_url: str | None = None
    storage_url: str | None = None
    s3: S3Options = S3Options()
    max_object_bytes: int = 8 * GIB
    max_json_bytes: int = 16 * MIB
    max_missing_digests: int = 100_000
    max_pack_objects: int = 256
    max_pack_bytes: int = 256 * MIB
    upload_ttl_seconds: int = 3600
    gc_grace_seconds: int = 3600
    log_key_file: Path | None = None
    log_origin: str | None = None
    log_public: bool = False
    # Create the schema with alembic on startup when the database is empty or behind
    # (the embedded default). Deployments that migrate by hand set it to False.
    migrate_on_start: bool = True
    web_session_hours: int = 12
    web_secure_cookies: bool = False
    # The failed-authentication limiter (kvreg_registry.api.ratelimit); 0 turns it off.
    auth_failure_limit: int = 20
    auth_failure_window_seconds: int = 60
    auth_failure_keys: int = 10_000
    # The registry's public base URL (KVREG_PUBLIC_URL): the OCI token realm is built from it.
    public_url: str | None = None
    # How long a scoped /v2/ token lives (KVREG_OCI_TOKEN_SECONDS), at most its API token's life.
    oci_token_seconds: int = 300
    # The proxies whose X-Forwarded-For / -Proto are believed (KVREG_FORWARDED_ALLOW_IPS): uvicorn's
    # own default, loopback, for a proxy on the same machine; "" trusts no one, "*" every peer.
    forwarded_allow_ips: str = "127.0.0.1"
    # GET /metrics answers only with this bearer token when it is set (KVREG_METRICS_TOKEN).
    metrics_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "forwarded_allow_ips", trusted_proxies(self.forwarded_allow_ips))
        if self.public_url is not None:
            object.__setattr__(self, "public_url", public_base_url(self.public_url))
        if not MIN_OCI_TOKEN_SECONDS <= self.oci_token_seconds <= MAX_OCI_TOKEN_SECONDS:
            raise ConfigError(
                f"{ENV_PREFIX}OCI_TOKEN_SECONDS must be from {MIN_OCI_TOKEN_SECONDS} to "
                f"{MAX_OCI_TOKEN_SECONDS}, not {self.oci_token_seconds}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``KVREG_*`` variables (``os.environ`` by default), then ``overrides``."""
        e = os.environ if env is None else env
        settings = cls(
            data_dir=Path(e.get(ENV_PREFIX + "DATA") or "kvreg-data"),
            database_url=e.get(ENV_PREFIX + "DATABASE_URL") or None,
            storage_url=e.get(ENV_PREFIX + "STORAGE") or None,
            s3=S3Options(
                endpoint_url=e.get(ENV_PREFIX + "S3_ENDPOINT") or None,
                access_key=e.get(ENV_PREFIX + "S3_ACCESS_KEY") or None,
                secret_key=e.get(ENV_PREFIX + "S3_SECRET_KEY") or None,
                region=e.get(ENV_PREFIX + "S3_REGION") or "us-east-1",
                redirect=_bool(e, "S3_REDIRECT", False),
            ),
            max_object_bytes=_int(e, "MAX_OBJECT_BYTES", 8 * GIB),
            max_json_bytes=_int(e, "MAX_JSON_BYTES", 16 * MIB),
            max_missing_digests=_int(e, "MAX_MISSING_DIGESTS", 100_000),
            max_pack_objects=_int(e, "MAX_PACK_OBJECTS", 256),
            max_pack_bytes=_int(e, "MAX_PACK_BYTES", 256 * MIB),
            upload_ttl_seconds=_int(e, "UPLOAD_TTL_SECONDS", 3600),
            gc_grace_seconds=_int(e, "GC_GRACE_SECONDS", 3600, minimum=0),
            migrate_on_start=_bool(e, "MIGRATE_ON_START", True),
            log_key_file=Path(e[ENV_PREFIX + "LOG_KEY_FILE"]) if e.get(ENV_PREFIX + "LOG_KEY_FILE") else None,
            log_origin=e.get(ENV_PREFIX + "LOG_ORIGIN") or None,
            log_public=_bool(e, "LOG_PUBLIC", False),
            web_session_hours=_int(e, "WEB_SESSION_HOURS", 12),
            web_secure_cookies=_bool(e, "WEB_SECURE_COOKIES", False),
            auth_failure_limit=_int(e, "AUTH_FAILURE_LIMIT", 20, minimum=0),
            auth_failure_window_seconds=_int(e, "AUTH_FAILURE_WINDOW_SECONDS", 60),
            auth_failure_keys=_int(e, "AUTH_FAILURE_KEYS", 10_000),
            public_url=e.get(ENV_PREFIX + "PUBLIC_URL") or None,
            oci_token_seconds=_bounded(
                e, "OCI_TOKEN_SECONDS", 300, minimum=MIN_OCI_TOKEN_SECONDS, maximum=MAX_OCI_TOKEN_SECONDS
            ),
            # Set and empty means "no proxy" here, unlike the other variables: unset is the default.
            forwarded_allow_ips=e.get(ENV_PREFIX + "FORWARDED_ALLOW_IPS", "127.0.0.1"),
            metrics_token=e.get(ENV_PREFIX + "METRICS_TOKEN") or None,
        )
        return replace(settings, **overrides) if overrides else settings

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'registry.sqlite3').resolve()}"

    @property
    def effective_storage_url(self) -> str:
        if self.storage_url:
            return self.storage_url
        return str((self.data_dir / "objects").resolve())

    @property
    def log_key_path(self) -> Path:
        """The registry's own Ed25519 key that signs log checkpoints."""
        return self.log_key_file if self.log_key_file is not None else self.data_dir / "log.key"
