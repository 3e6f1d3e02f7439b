"""The bugs the conformance run found, one request each, so that they stay fixed even if a
later schemathesis stops generating the request that found them.

Against the same live registries as ``test_openapi.py`` (both backends).
"""

from __future__ import annotations

import httpx
import pytest

from .conftest import NAMESPACE, Target


@pytest.fixture
def admin(target: Target) -> httpx.Client:
    return target.registry.http(target.tokens["fuzz-admin"])


@pytest.mark.parametrize(
    "path",
    [
        "/tokens/1209465694020078927872",
        f"/namespaces/{NAMESPACE}/holds/4294967296",
        f"/namespaces/{NAMESPACE}/receipts/11776749063945475588096",
    ],
)
def test_a_row_id_past_the_database_integer_is_400_not_500(admin: httpx.Client, path: str) -> None:
    method = "DELETE" if path.startswith("/tokens") else "GET"
    r = admin.request(method, path)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "REQUEST_INVALID"


def test_405_names_every_method_of_the_path(target: Target) -> None:
    with target.registry.http() as c:
        r = c.request("TRACE", "/namespaces")
        assert r.status_code == 405
        assert r.headers["Allow"] == "GET, POST"
        assert r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        r = c.request("PATCH", f"/namespaces/{NAMESPACE}/roles/someone")
        assert r.headers["Allow"] == "DELETE, PUT"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/gc", {"grace_seconds": False, "dry_run": True}),
        ("/gc", {"dry_run": 0}),
        ("/namespaces", {"name": "bool-public", "public": 1}),
        ("/users/fuzz-nobody/tokens", {"expires_in_days": True}),
    ],
)
def test_booleans_and_integers_are_not_interchangeable(admin: httpx.Client, path: str, body: object) -> None:
    r = admin.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "REQUEST_INVALID"


def test_a_whole_number_float_is_an_integer(admin: httpx.Client) -> None:
    r = admin.post("/gc", json={"grace_seconds": 3600.0, "dry_run": True})
    assert r.status_code == 200, r.text
    assert r.json()["dry_run"] is True


def test_head_of_an_object_is_documented_as_octet_stream(target: Target, admin: httpx.Client) -> None:
    r = admin.head(f"/namespaces/{NAMESPACE}/objects/{target.object_digest}")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    schema = admin.get("/openapi.json").json()
    head = schema["paths"]["/api/v1/namespaces/{ns}/objects/{digest}"]["head"]["responses"]
    assert "application/octet-stream" in head["200"]["content"]
    assert "application/octet-stream" in head["206"]["content"]


def test_no_route_documents_fastapis_422(admin: httpx.Client) -> None:
    schema = admin.get("/openapi.json").json()
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/ErrorOut", (method, path, status)
