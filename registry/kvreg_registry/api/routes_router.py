"""``POST /api/v1/route``: the artifacts that share the longest block-aligned prefix with a
prompt, found by the prompt's block keys (``kvreg_registry.services.router``).

The body is JSON (``models.RouteIn``), bounded by ``limits.ROUTER_MAX_BODY_BYTES`` (and
``max_json_bytes``) in the body-limit middleware before it is read; every digest and
name is checked by ``router.parse_query`` (``DIGEST_INVALID``, ``NAME_INVALID``,
``REQUEST_INVALID``). Anonymous callers see public namespaces only. A route is a read:
it runs in a read transaction and writes no audit entry.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from kvreg_registry.api import models as m
from kvreg_registry.api.deps import principal, state
from kvreg_registry.auth import Principal
from kvreg_registry.services import router as router_service

router = APIRouter()


@router.post(
    "/route",
    responses=m.errors(400),
    response_model=m.RouteOut,
    summary="Artifacts the caller can read that hold the longest prefix of these block keys",
)
def route(body: m.RouteIn, request: Request, who: Principal = Depends(principal)) -> m.RouteOut:
    query = router_service.parse_query(
        model_fingerprint=body.model_fingerprint,
        tokenizer_fingerprint=body.tokenizer_fingerprint,
        config_fingerprint=body.config_fingerprint,
        block_size=body.block_size,
        block_keys=body.block_keys,
        namespaces=body.namespaces,
        limit=body.limit,
    )
    with state(request).db.read() as s:
        candidates = router_service.route(s, who, query)
    return m.RouteOut(
        candidates=[m.RouteCandidateOut(**c.to_dict()) for c in candidates],
        limit=query.limit,
    )
