"""Running the app under uvicorn, with the flow control large uploads need.

uvicorn stops reading a connection whenever more than ``HIGH_WATER_LIMIT`` bytes
(64 KiB) of request body wait for the app, so a multi-megabyte object PUT is
delivered in 64 KiB pieces with a pause after each; measured on loopback
(bench/push_pull.py) the server then spends most of a push in that loop. The limit
is a module constant, not an option, so :func:`tune_uvicorn` raises it where the
protocol modules read it (``h11_impl`` and ``httptools_impl``), checking that they
still have it; the pinned uvicorn range in pyproject.toml is the one this was
tested with. Memory per connection stays bounded by the new limit.

``run`` serves one process; ``app_from_env`` is the factory worker processes use
(``--workers N``), tuning their uvicorn too.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI

from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

log = logging.getLogger(__name__)

BODY_HIGH_WATER = 4 << 20


def tune_uvicorn(high_water: int = BODY_HIGH_WATER) -> None:
    """Let uvicorn buffer up to ``high_water`` bytes of request body before it pauses reading."""
    from uvicorn.protocols.http import flow_control, h11_impl

    modules: list[Any] = [flow_control, h11_impl]
    try:
        from uvicorn.protocols.http import httptools_impl

        modules.append(httptools_impl)
    except ImportError:  # httptools is optional
        pass
    for module in modules:
        if not hasattr(module, "HIGH_WATER_LIMIT"):
            log.warning("uvicorn's %s has no HIGH_WATER_LIMIT; uploads keep its default flow control", module)
            continue
        module.HIGH_WATER_LIMIT = high_water


def app_from_env() -> FastAPI:
    """The app of a worker process (settings from ``KVREG_*``), with uvicorn tuned."""
    tune_uvicorn()
    return create_app(Settings.from_env())


def run(settings: Settings, *, host: str, port: int, workers: int = 1, log_level: str = "info") -> None:
    import uvicorn

    tune_uvicorn()
    if workers > 1:
        uvicorn.run(
            "kvreg_registry.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
        )
        return
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)
