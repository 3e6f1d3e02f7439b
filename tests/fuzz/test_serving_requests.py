"""Fuzzing ``kvreg engine serve``'s chat and completion requests against the real application in
process (a tiny chat model, derandomized, a few hundred requests): no 5xx, a 4xx names the field,
no field silently ignored, and the fields that change nothing change nothing
(``fuzz.serving_requests``; ``tests/serving/test_request_fuzz.py`` runs it longer)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given

from fuzz.serving_requests import check_answer, fuzz_app, requests
from fuzz.strategies import fuzz


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with fuzz_app(Path(tmp_path_factory.mktemp("fuzz-serve"))) as app:
        yield app


@fuzz(300)
@given(requests(max_fields=1))
def test_one_field_changed(served: tuple[TestClient, dict[str, str]], example: Any) -> None:
    app, texts = served
    check_answer(app, *example, texts)


@fuzz(100)
@given(requests(max_fields=3))
def test_several_fields_changed(served: tuple[TestClient, dict[str, str]], example: Any) -> None:
    app, texts = served
    check_answer(app, *example, texts)
