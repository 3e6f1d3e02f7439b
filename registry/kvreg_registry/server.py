"""Running the app under uvicorn: one process, or worker processes built from the environment.

``run`` serves one process (``kvreg serve``); ``app_from_env`` is the factory worker
processes use (``--workers N``). Both tune uvicorn first
(``kvreg_registry.server_io.install``: zero-copy object downloads, upload bodies
without copies, a 4 MiB receive high-water mark) and run it on asyncio's own event
loop, whose ``loop.sendfile`` the zero-copy downloads use (uvloop has none).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI

from kvreg_registry import server_io
from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

log = logging.getLogger(__name__)

#: The event loop ``kvreg serve`` runs on (see the module docstring).
LOOP = "asyncio"


def app_from_env() -> FastAPI:
    """The app of a worker process (settings from ``KVREG_*``), with uvicorn tuned."""
    server_io.install()
    return create_app(Settings.from_env())


def run(settings: Settings, *, host: str, port: int, workers: int = 1, log_level: str = "info") -> None:
    import uvicorn

    server_io.install()
    if workers > 1:
        uvicorn.run(
            "kvreg_registry.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            loop=LOOP,
            http=server_io.protocol_class(),
        )
        return
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        loop=LOOP,
        http=server_io.protocol_class(),
    )
