"""``create_app(settings)``: the registry's FastAPI application.

Nothing is created at import time: the database engine and the storage backend
are opened in the app's lifespan (when uvicorn or a test client starts it), and
the schema is brought to ``head`` with alembic first unless
``settings.migrate_on_start`` is off. Several processes may serve one PostgreSQL
database and one S3 bucket: they share no state but those two (and, under ``kvreg serve
--workers N``, the directory of their metrics: ``kvreg_registry.api.metrics``).

Requests pass, in order: the proxy headers (``X-Forwarded-For`` believed from the proxies of
``settings.forwarded_allow_ips`` only), the metrics (``api.metrics_http``), the body limits
(``api.limits``), then the routes: the API under ``/api/v1``, the OCI pull API under ``/v2/``,
the operator's ``/metrics``, ``/livez`` and ``/readyz`` (``api.routes_ops``) and the web UI.

This module imports ``kvreg.core`` but never torch (``tests/core/test_no_torch.py``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

import kvreg
from kvreg_registry.api import errors
from kvreg_registry.api.health import ReadinessProbe
from kvreg_registry.api.limits import BodyLimitMiddleware
from kvreg_registry.api.metrics import AuditLogCollector, RegistryMetrics
from kvreg_registry.api.metrics_http import MetricsMiddleware, RouteTemplates
from kvreg_registry.api.routes_admin import router as admin_router
from kvreg_registry.api.routes_artifacts import router as artifacts_router
from kvreg_registry.api.routes_compliance import router as compliance_router
from kvreg_registry.api.routes_fetch import router as fetch_router
from kvreg_registry.api.routes_log import router as log_router
from kvreg_registry.api.routes_objects import router as objects_router
from kvreg_registry.api.routes_oci import router as oci_router
from kvreg_registry.api.routes_ops import router as ops_router
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

    metrics = RegistryMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = open_state(settings)
        app.state.registry = state
        metrics.watch_pool(state.db.engine)
        log.info("registry ready: database %s, storage %s", state.db.dialect, state.storage.kind)
        try:
            yield
        finally:
            state.db.dispose()
            metrics.close()

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
    app.state.metrics = metrics
    app.state.readiness = ReadinessProbe()
    metrics.add_scrape_collector(AuditLogCollector(lambda: getattr(app.state, "registry", None)))
    # Middleware added last runs first: the proxy headers, then the metrics, then the body limits.
    app.add_middleware(
        BodyLimitMiddleware,
        max_object_bytes=settings.max_object_bytes,
        max_json_bytes=settings.max_json_bytes,
        max_pack_bytes=settings.max_pack_bytes,
    )
    templates = RouteTemplates()
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=templates)
    if settings.forwarded_allow_ips:
        # uvicorn's own middleware: the client's address (and scheme) from X-Forwarded-For (and
        # -Proto) when the peer is one of these proxies, else the peer's. `kvreg serve` tells
        # uvicorn not to add another (server.run): two would each take a hop off the header.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
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
        templates.include(router.routes, API_PREFIX)
    app.include_router(oci_router)  # /v2/: the OCI distribution pull API (docs/protocol.md § OCI)
    app.include_router(ops_router)  # /metrics, /livez, /readyz (docs/deployment.md)
    for router in (oci_router, ops_router, *install_web(app)):
        templates.include(router.routes)
    templates.include(app.router.routes)  # the app's own: the API docs, the static files' mount
    return app
