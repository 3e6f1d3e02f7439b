"""``create_app(settings)``: the registry's FastAPI application.

Nothing is created at import time: the database engine and the storage backend
are opened in the app's lifespan (when uvicorn or a test client starts it), and
the schema is brought to ``head`` with alembic first unless
``settings.migrate_on_start`` is off. Several processes may serve one PostgreSQL
database and one S3 bucket: they share no state but those two.

This module imports ``kvreg.core`` but never torch (``tests/core/test_no_torch.py``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import kvreg
from kvreg_registry.api import errors
from kvreg_registry.api.limits import BodyLimitMiddleware
from kvreg_registry.api.routes_admin import router as admin_router
from kvreg_registry.api.routes_artifacts import router as artifacts_router
from kvreg_registry.api.routes_compliance import router as compliance_router
from kvreg_registry.api.routes_fetch import router as fetch_router
from kvreg_registry.api.routes_log import router as log_router
from kvreg_registry.api.routes_objects import router as objects_router
from kvreg_registry.api.routes_oci import router as oci_router
from kvreg_registry.api.routes_packs import router as packs_router
from kvreg_registry.api.routes_router import router as router_router
from kvreg_registry.settings import Settings
from kvreg_registry.state import open_state
from kvreg_registry.web import install as install_web

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1"


def create_app(settings: Settings | None = None) -> FastAPI:
    """The registry app for ``settings`` (default: ``Settings.from_env()``)."""
    settings = settings if settings is not None else Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = open_state(settings)
        app.state.registry = state
        log.info("registry ready: database %s, storage %s", state.db.dialect, state.storage.kind)
        try:
            yield
        finally:
            state.db.dispose()

    app = FastAPI(
        title="kvreg registry",
        version=kvreg.__version__,
        description="A content-addressed registry of verified LLM KV-cache states. See docs/protocol.md.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_object_bytes=settings.max_object_bytes,
        max_json_bytes=settings.max_json_bytes,
        max_pack_bytes=settings.max_pack_bytes,
    )
    for router in (
        admin_router,
        objects_router,
        packs_router,
        fetch_router,
        artifacts_router,
        log_router,
        compliance_router,
        router_router,
    ):
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(oci_router)  # /v2/: the OCI distribution pull API (docs/protocol.md § OCI)
    install_web(app)
    return app
