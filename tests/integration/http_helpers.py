"""Raw HTTP helpers for the protocol tests: upload an artifact's parts by hand, craft envelopes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from kvreg.core.canonical import canonical_json
from kvreg.core.envelope import sign_envelope
from kvreg.core.keys import SigningKey
from kvreg.fileio.keyfiles import load_signing_key
from kvreg.store.home import Home


def depositor_key(depositor: dict[str, Any]) -> SigningKey:
    return load_signing_key(Path(depositor["home"]) / "keys" / "default.key")


def upload_objects(
    client: httpx.Client, ns: str, home: Path, manifest: Any, *, skip: set[str] | None = None
) -> None:
    h = Home(home)
    for digest in manifest.object_digests():
        if skip and str(digest) in skip:
            continue
        r = client.put(f"/namespaces/{ns}/objects/{digest}", content=h.objects.read(digest))
        assert r.status_code in (200, 201), r.text


def envelope_bytes(home: Path, manifest: Any) -> bytes:
    return Home(home).envelopes.get(manifest.digest)


def signed(payload_doc: dict[str, Any], key: SigningKey) -> tuple[str, bytes]:
    """(manifest digest, envelope JSON) for a manifest document signed by ``key``."""
    payload = canonical_json(payload_doc)
    env = sign_envelope(payload, key)
    return str(env.manifest_digest), env.to_json_bytes()


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert response.headers.get("x-kvreg-error-code") == body["error"]["code"]
    return str(body["error"]["code"])
