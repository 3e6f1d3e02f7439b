"""The operator's routes, at the server's root and outside the published API: ``GET /metrics``
(Prometheus), ``GET /livez`` and ``GET /readyz`` (load balancers and orchestrators).

- ``/livez`` answers ``200`` whenever the process's event loop runs; it touches nothing else,
  so that a database outage never gets healthy processes restarted.
- ``/readyz`` answers ``200`` when the database, its migrations, the object storage and the
  log key pass their checks (``kvreg_registry.api.health``), else ``503``; the JSON body
  names each check and what failed.
- ``/metrics`` answers the metrics in Prometheus's text format
  (``kvreg_registry.api.metrics``); with ``KVREG_METRICS_TOKEN`` set it asks for
  ``Authorization: Bearer <that token>``, and failures count against the
  failed-authentication limiter like any other.

None of them is in the OpenAPI document: they are not part of the registry's protocol.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from kvreg.core.errors import KvregError, UnauthenticatedError
from kvreg_registry.api.deps import presented_token, state
from kvreg_registry.api.errors import kvreg_error_response
from kvreg_registry.api.health import ReadinessProbe
from kvreg_registry.api.metrics import CONTENT_TYPE, metrics_of
from kvreg_registry.api.ratelimit import auth_attempt

router = APIRouter()

_NO_STORE = {"Cache-Control": "no-store"}


@router.api_route("/livez", methods=["GET", "HEAD"], include_in_schema=False)
async def livez() -> JSONResponse:
    return JSONResponse({"status": "live"}, headers=_NO_STORE)


@router.api_route("/readyz", methods=["GET", "HEAD"], include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    probe: ReadinessProbe = request.app.state.readiness  # set by create_app
    readiness = await probe(state(request))
    return JSONResponse(readiness.as_json(), status_code=200 if readiness.ready else 503, headers=_NO_STORE)


def _check_metrics_token(request: Request, token: str) -> None:
    header = request.headers.get("authorization")
    with auth_attempt(request, presented_token(header) if header is not None else None):
        scheme, _, presented = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode("utf-8"), token.encode("utf-8")
        ):
            raise UnauthenticatedError(
                "GET /metrics needs the metrics token",
                hint="send Authorization: Bearer <KVREG_METRICS_TOKEN>",
            )


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    token = state(request).settings.metrics_token
    if token is not None:
        try:
            _check_metrics_token(request, token)
        except KvregError as e:  # JSON, as the API answers (not the web UI's error page)
            return kvreg_error_response(e)
    body = await run_in_threadpool(metrics_of(request).render)
    return Response(body, media_type=CONTENT_TYPE, headers=_NO_STORE)
