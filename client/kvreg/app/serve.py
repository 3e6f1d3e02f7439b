"""Run the registry server on this machine (``kvreg serve``): the embedded defaults or the
PostgreSQL and S3 settings the caller gives, under uvicorn.

This is one of the two client modules that import ``kvreg_registry`` (the other is the
demo's embedded registry): the server is started, not talked to. It builds the settings,
hands worker processes what they need through the environment, and blocks until the
server stops. It prints nothing itself: the caller announces the addresses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg_registry.server import run
from kvreg_registry.settings import Settings

__all__ = ["ServeRequest", "registry_settings", "serve"]


@dataclass(frozen=True, slots=True)
class ServeRequest:
    """Where the registry listens and where it keeps its data (None: the defaults)."""

    data: Path | None = None
    database_url: str | None = None
    storage: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    log_level: str = "info"
    #: The proxies whose X-Forwarded-For is believed (None: $KVREG_FORWARDED_ALLOW_IPS or loopback).
    forwarded_allow_ips: str | None = None


def registry_settings(request: ServeRequest) -> Settings:
    """The server's settings: the environment's ``KVREG_*``, overridden by the request."""
    overrides: dict[str, Any] = {}
    if request.data is not None:
        overrides["data_dir"] = request.data
    if request.database_url is not None:
        overrides["database_url"] = request.database_url
    if request.storage is not None:
        overrides["storage_url"] = request.storage
    if request.forwarded_allow_ips is not None:
        overrides["forwarded_allow_ips"] = request.forwarded_allow_ips
    return Settings.from_env(**overrides)


def serve(request: ServeRequest, settings: Settings) -> None:
    """Serve until stopped. Worker processes build the app from the environment, so with
    more than one worker the settings are put there first."""
    if request.workers > 1:
        os.environ["KVREG_DATA"] = str(settings.data_dir)
        if settings.database_url:
            os.environ["KVREG_DATABASE_URL"] = settings.database_url
        if settings.storage_url:
            os.environ["KVREG_STORAGE"] = settings.storage_url
        os.environ["KVREG_FORWARDED_ALLOW_IPS"] = settings.forwarded_allow_ips
    run(settings, host=request.host, port=request.port, workers=request.workers, log_level=request.log_level)
