"""uvicorn's flow control is raised for large uploads (kvreg_registry.server)."""

from __future__ import annotations

import importlib


def test_tune_uvicorn_raises_the_body_high_water_mark() -> None:
    from kvreg_registry.server import BODY_HIGH_WATER, tune_uvicorn

    h11_impl = importlib.import_module("uvicorn.protocols.http.h11_impl")
    assert hasattr(h11_impl, "HIGH_WATER_LIMIT"), (
        "uvicorn changed its flow control: revisit kvreg_registry.server"
    )
    saved = h11_impl.HIGH_WATER_LIMIT
    try:
        tune_uvicorn()
        assert h11_impl.HIGH_WATER_LIMIT == BODY_HIGH_WATER
    finally:
        tune_uvicorn(saved)
