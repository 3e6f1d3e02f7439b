"""The harness itself: the seeded registry answers, and chromium renders what it serves."""

from __future__ import annotations

import json
from typing import Any

from .seed import Seeded


def test_chromium_renders_the_api_root(page: Any, server: Seeded) -> None:
    response = page.goto("/api/v1/")
    assert response is not None and response.status == 200
    body = json.loads(page.text_content("body") or "")
    assert isinstance(body, dict) and body
    assert page.dialogs == [] and page.errors == []


def test_the_seeding_pushed_real_artifacts(server: Seeded) -> None:
    # p07x extends p07: every full block of p07 is a chunk of p07x (deduplicated on the registry).
    base = server.full_blocks("p07")
    assert base and set(base) <= set(server.chunk_digests("p07x"))
    assert len(set(server.digests.values())) == len(server.artifacts)
    types = {e["type"] for e in server.audit_entries}
    assert {"envelope.stored", "ref.created"} <= types
    with server.registry.http() as anonymous:
        r = anonymous.get(f"/namespaces/{server.private_ns}/refs/secret")
        assert r.status_code in (401, 403, 404), r.text
        listed = anonymous.get("/artifacts", params={"q": "heliotrope"}).json()
        assert listed["total"] == 0
    with server.registry.http(server.reader_token) as reader:
        r = reader.get(f"/namespaces/{server.private_ns}/refs/secret")
        assert r.status_code == 200 and r.json()["digest"] == server.digests["secret"]
