"""The operator's routes: ``GET /health``, ``GET /version`` and ``GET /metrics``.

- ``/health`` (no API key needed): 200 ``{"status": "ok", ...}`` when the model answers, 503
  with the status (``failing``, ``stalled``; ``loading`` before the model is loaded) and the
  error otherwise (``.health``); never cached.
- ``/version``: kvreg's version, the model's id and fingerprints, the engine config it runs
  under, the server's settings and, when the host has them, the model's sampling defaults.
- ``/metrics``: Prometheus' text format (``.metrics``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from kvreg import __version__

if TYPE_CHECKING:
    from kvreg.app.serving.health import HealthCheck
    from kvreg.app.serving.host import ModelHost
    from kvreg.app.serving.metrics import ServeMetrics


def version_info(host: ModelHost, settings: dict[str, Any]) -> dict[str, Any]:
    """What ``/version`` answers (``settings``: the server's own, e.g. ``max_queue``)."""
    lm = host.lm
    out: dict[str, Any] = {
        "version": __version__,
        "model": {
            "id": host.name,
            "model_fingerprint": str(lm.model_fp),
            "tokenizer_fingerprint": str(lm.tokenizer_fp),
            "config_fingerprint": str(lm.config.fingerprint),
            "block_size": lm.config.block_size,
            "context_length": host.context_length,
            "load_seconds": round(host.load_seconds, 3),
        },
        "engine": lm.config.fields,
        "server": {"mode": host.mode, "probe": host.probe, **settings},
    }
    defaults = getattr(host, "sampling_defaults", None)  # the model's generation config, when read
    if defaults is not None:
        out["sampling_defaults"] = dict(defaults)
    return out


def add_operation_routes(
    app: FastAPI, host: ModelHost, metrics: ServeMetrics, health: HealthCheck, settings: dict[str, Any]
) -> None:
    @app.get("/health")
    async def health_route() -> JSONResponse:
        verdict = await health.check()
        metrics.health.labels("ok" if verdict.ok else "failed").inc()
        return JSONResponse(verdict.body, status_code=verdict.status, headers={"cache-control": "no-store"})

    @app.get("/version")
    async def version() -> dict[str, Any]:
        return version_info(host, settings)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        data, content_type = metrics.render()
        return Response(data, media_type=content_type, headers={"cache-control": "no-store"})
