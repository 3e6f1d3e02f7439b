"""Running the app under uvicorn: one process, or worker processes built from the environment.

``run`` serves one process (``kvreg serve``); ``app_from_env`` is the factory worker
processes use (``--workers N``). Both tune uvicorn first
(``kvreg_registry.server_io.install``: zero-copy object downloads, upload bodies
without copies, a 4 MiB receive high-water mark) and run it on asyncio's own event
loop, whose ``loop.sendfile`` the zero-copy downloads use (uvloop has none).

With several workers their metrics are shared through a directory of this server's own
(:func:`metrics_directory`), so that a scrape answered by any worker counts them all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI

from kvreg_registry import server_io
from kvreg_registry.api.metrics import MULTIPROC_ENV
from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

log = logging.getLogger(__name__)

#: The event loop ``kvreg serve`` runs on (see the module docstring).
LOOP = "asyncio"


def app_from_env() -> FastAPI:
    """The app of a worker process (settings from ``KVREG_*``), with uvicorn tuned."""
    server_io.install()
    return create_app(Settings.from_env())


@contextlib.contextmanager
def metrics_directory(workers: int) -> Iterator[str | None]:
    """The directory where this server's processes keep their metrics (prometheus-client's
    multiprocess mode, ``kvreg_registry.api.metrics``), for as long as the server runs.

    ``PROMETHEUS_MULTIPROC_DIR`` if the operator set it (it must be this server's alone: its
    samples are deleted here, at start); else, with more than one worker, a new temporary
    directory, named in the environment that the workers inherit and removed when the server
    stops; else none (one process keeps its metrics in memory)."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):  # a previous run's samples
            stale.unlink(missing_ok=True)
        yield given
        return
    if workers <= 1:
        yield None
        return
    made = tempfile.mkdtemp(prefix="kvreg-metrics-")
    os.environ[MULTIPROC_ENV] = made
    try:
        yield made
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(made, ignore_errors=True)


def run(settings: Settings, *, host: str, port: int, workers: int = 1, log_level: str = "info") -> None:
    """Serve until stopped. The proxy headers are the app's to read (``create_app`` installs
    uvicorn's middleware for ``settings.forwarded_allow_ips``), so uvicorn is told not to add its
    own: it would trust loopback (or ``$FORWARDED_ALLOW_IPS``) on its own terms, and the two
    together would each take a hop off ``X-Forwarded-For``."""
    import uvicorn

    server_io.install()
    with metrics_directory(workers):
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
                proxy_headers=False,
            )
            return
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            log_level=log_level,
            loop=LOOP,
            http=server_io.protocol_class(),
            proxy_headers=False,
        )
