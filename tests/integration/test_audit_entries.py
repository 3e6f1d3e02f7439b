"""Every API call that changes state leaves exactly one audit entry; calls that change nothing
leave none (both backends, against the real server)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from kvreg.core.digest import Digest
from kvreg.core.keys import SigningKey

from .http_helpers import envelope_bytes
from .registry_server import Registry


def _size(admin: httpx.Client) -> int:
    return int(admin.get("/log/entries", params={"start": 0, "end": 0}).json()["size"])


def _last_entry(admin: httpx.Client, size: int) -> dict[str, Any]:
    entry = admin.get("/log/entries", params={"start": size - 1, "end": size}).json()["entries"][0]
    return dict(json.loads(base64.b64decode(entry["entry"])))


def test_one_entry_per_state_change(registry: Registry, depositor: dict[str, Any]) -> None:
    m = depositor["manifests"]["p07"]
    other = depositor["manifests"]["other"]
    ns = f"ns-{uuid.uuid4().hex[:10]}"
    user = f"u{uuid.uuid4().hex[:10]}"
    key = SigningKey.generate().public_key
    loose = b"loose " + uuid.uuid4().bytes
    state: dict[str, Any] = {}

    with registry.admin() as c:

        def expect(
            kind: str | None, call: Callable[[], httpx.Response], status: int | tuple[int, ...]
        ) -> httpx.Response:
            before = _size(c)
            r = call()
            statuses = (status,) if isinstance(status, int) else status
            assert r.status_code in statuses, r.text
            after = _size(c)
            if kind is None:
                assert after == before, (
                    f"{r.request.method} {r.request.url.path} logged {after - before} entries"
                )
            else:
                assert after == before + 1, f"{kind}: {after - before} entries"
                entry = _last_entry(c, after)
                assert entry["type"] == kind and entry["seq"] == before
                assert entry["actor"] == "root"
            return r

        expect("namespace.created", lambda: c.post("/namespaces", json={"name": ns}), 201)
        expect(None, lambda: c.post("/namespaces", json={"name": ns}), 409)
        expect("user.created", lambda: c.post("/users", json={"name": user}), 201)
        token = expect("token.created", lambda: c.post(f"/users/{user}/tokens", json={}), 201).json()
        assert token["token"] not in json.dumps(_last_entry(c, _size(c)))
        expect("role.set", lambda: c.put(f"/namespaces/{ns}/roles/{user}", json={"role": "write"}), 204)
        expect("role.removed", lambda: c.delete(f"/namespaces/{ns}/roles/{user}"), 204)
        expect(None, lambda: c.delete(f"/namespaces/{ns}/roles/{user}"), 204)
        expect("token.revoked", lambda: c.delete(f"/tokens/{token['id']}"), 204)
        expect(None, lambda: c.delete(f"/tokens/{token['id']}"), 204)
        expect(
            "key.registered",
            lambda: c.post(f"/namespaces/{ns}/keys", json={"public_key": key.to_text()}),
            201,
        )
        expect("key.revoked", lambda: c.delete(f"/namespaces/{ns}/keys/{key.keyid}"), 200)
        expect(
            "key.registered",
            lambda: c.post(f"/namespaces/{ns}/keys", json={"public_key": depositor["public_key"]}),
            201,
        )
        upload = expect(
            "upload.opened",
            lambda: c.post(f"/namespaces/{ns}/uploads", json={"digests": [str(Digest.of_bytes(loose))]}),
            201,
        ).json()["upload"]
        expect(
            "object.held",
            lambda: c.put(
                f"/namespaces/{ns}/objects/{Digest.of_bytes(loose)}",
                content=loose,
                headers={"X-Kvreg-Upload": upload},
            ),
            201,
        )
        expect(None, lambda: c.put(f"/namespaces/{ns}/objects/{Digest.of_bytes(loose)}", content=loose), 200)
        expect("upload.closed", lambda: c.delete(f"/namespaces/{ns}/uploads/{upload}"), 204)
        expect(None, lambda: c.delete(f"/namespaces/{ns}/uploads/{upload}"), 204)
        from kvreg.store.home import Home

        h = Home(depositor["home"])
        for art in (m, other):
            for d in art.object_digests():
                expect(
                    "object.held",
                    lambda d=d: c.put(f"/namespaces/{ns}/objects/{d}", content=h.objects.read(d)),
                    201,
                )
            env = envelope_bytes(depositor["home"], art)
            expect(
                "envelope.stored",
                lambda art=art, env=env: c.put(f"/namespaces/{ns}/envelopes/{art.digest}", content=env),
                201,
            )
        expect(
            None,
            lambda: c.put(
                f"/namespaces/{ns}/envelopes/{m.digest}", content=envelope_bytes(depositor["home"], m)
            ),
            200,
        )
        r = expect(
            "ref.created",
            lambda: c.put(
                f"/namespaces/{ns}/refs/p07", json={"digest": str(m.digest)}, headers={"If-None-Match": "*"}
            ),
            201,
        )
        state["ref_index"] = r.json()["log_index"]
        expect(
            "ref.moved",
            lambda: c.put(
                f"/namespaces/{ns}/refs/p07",
                json={"digest": str(other.digest)},
                headers={"If-Match": f'"{m.digest}"'},
            ),
            200,
        )
        expect(
            None,
            lambda: c.put(
                f"/namespaces/{ns}/refs/p07",
                json={"digest": str(m.digest)},
                headers={"If-Match": f'"{m.digest}"'},
            ),
            409,
        )
        expect(
            "tag.created",
            lambda: c.put(
                f"/namespaces/{ns}/refs/v1",
                json={"digest": str(m.digest), "tag": True},
                headers={"If-None-Match": "*"},
            ),
            201,
        )
        expect(
            "ref.deleted",
            lambda: c.delete(f"/namespaces/{ns}/refs/p07", headers={"If-Match": f'"{other.digest}"'}),
            204,
        )
        hold = expect(
            "hold.placed", lambda: c.post(f"/namespaces/{ns}/holds", json={"reason": "matter 1"}), 201
        ).json()
        expect(
            "hold.lifted",
            lambda: c.delete(f"/namespaces/{ns}/holds/{hold['id']}", params={"reason": "closed"}),
            200,
        )
        expect("retention.set", lambda: c.put(f"/namespaces/{ns}/retention", json={"keep_versions": 5}), 200)
        expect("retention.cleared", lambda: c.delete(f"/namespaces/{ns}/retention"), (200, 204))
        expect("envelope.deleted", lambda: c.delete(f"/namespaces/{ns}/envelopes/{other.digest}"), 204)
        r = c.post("/gc", json={"grace_seconds": 3600})
        assert r.status_code == 200
        entry = _last_entry(c, _size(c))
        assert entry["type"] == "gc.run"
        # Reads change nothing.
        for path in (
            f"/namespaces/{ns}/refs",
            "/artifacts",
            f"/namespaces/{ns}/keys",
            "/whoami",
            "/namespaces",
        ):
            expect(None, lambda path=path: c.get(path), 200)
