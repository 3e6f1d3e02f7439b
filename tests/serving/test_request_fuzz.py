"""The long form of ``tests/fuzz/test_serving_requests.py``: thousands of drawn chat and completion
requests, up to four odd fields each, against the real application in process on a tiny chat model
(``fuzz.serving_requests``): never a 5xx, a refusal names its field, nothing silently ignored, and
what changes nothing changes nothing. Under a minute."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given

from fuzz.serving_requests import check_answer, fuzz_app, requests
from fuzz.strategies import fuzz

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with fuzz_app(Path(tmp_path_factory.mktemp("fuzz-serve-long"))) as app:
        yield app


@fuzz(2000)
@given(requests(max_fields=1))
def test_one_field_changed_at_length(served: tuple[TestClient, dict[str, str]], example: Any) -> None:
    app, texts = served
    check_answer(app, *example, texts)


@fuzz(2000)
@given(requests(max_fields=4))
def test_several_fields_changed_at_length(served: tuple[TestClient, dict[str, str]], example: Any) -> None:
    app, texts = served
    check_answer(app, *example, texts)
