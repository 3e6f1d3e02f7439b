"""A registry app in this process, seeded through its own HTTP API, for the web UI's tests.

``Library`` wraps a ``TestClient`` of ``create_app`` (the real app: alembic-made
database, real storage backend, real signature and manifest checks) and publishes
artifacts the way ``kvreg push`` does (``push``): objects in one upload session and one
object pack, then the signed envelope, then the ref. Artifacts are built
(``core.manifest_helpers.signed_artifact``) from token ids: chunk ``i`` (``kv_chunks``)
is a function of the tokens up to the end of block ``i`` (as real KV blocks are, by
causality), so two artifacts whose tokens share a prefix share exactly the chunks of
the shared full blocks.

``count_queries`` counts the SQL statements the app runs (SQLAlchemy's
``before_cursor_execute`` event on the app's engine) for the bounded-query tests.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event

from core.manifest_helpers import Built, signed_artifact
from kvreg.core.blockkey import pack_tokens
from kvreg.core.digest import Digest
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg_registry.api.routes_packs import OBJECTS_HEADER
from kvreg_registry.auth import Principal
from kvreg_registry.services import accounts

MODEL_FP = Digest.of_bytes(b"web-model")
TOKENIZER_FP = Digest.of_bytes(b"web-tokenizer")
CONFIG_FP = Digest.of_bytes(b"web-config")
OPERATOR = Principal(is_admin=True, name="operator")


@dataclass
class Published:
    namespace: str
    ref: str
    digest: Digest
    manifest: Manifest
    text: str


def kv_chunks(tokens: list[int], block_size: int) -> list[bytes]:
    """Stand-in KV bytes of each block of ``tokens``: a function of the tokens up to its end."""
    n = -(-len(tokens) // block_size)
    ends = [min((i + 1) * block_size, len(tokens)) for i in range(n)]
    return [hashlib.sha256(pack_tokens(tokens[:end])).digest() * 8 for end in ends]


def words_to_tokens(text: str) -> list[int]:
    """A toy tokenizer (one id per word), so texts with a common start share a token prefix."""
    return [int.from_bytes(hashlib.sha256(w.encode()).digest()[:3], "little") + 1 for w in text.split()]


@dataclass
class Library:
    client: TestClient
    admin_token: str
    key: SigningKey = field(default_factory=SigningKey.generate)
    namespaces: list[str] = field(default_factory=list)

    @property
    def app_state(self) -> Any:
        return self.client.app.state.registry  # type: ignore[attr-defined]

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        headers["Authorization"] = f"Bearer {token or self.admin_token}"
        return self.client.request(method, f"/api/v1{path}", headers=headers, **kw)

    def namespace(self, name: str | None = None, *, public: bool = True) -> str:
        name = name or f"ns-{uuid.uuid4().hex[:8]}"
        r = self.api("POST", "/namespaces", json={"name": name, "public": public})
        assert r.status_code == 201, r.text
        r = self.api("POST", f"/namespaces/{name}/keys", json={"public_key": self.key.public_key.to_text()})
        assert r.status_code in (200, 201), r.text
        self.namespaces.append(name)
        return name

    def user(self, roles: dict[str, str] | None = None, *, admin: bool = False) -> str:
        """A new user with ``roles``; returns a token of theirs."""
        name = f"u{uuid.uuid4().hex[:8]}"
        with self.app_state.db.write() as s:
            accounts.create_user(s, OPERATOR, name, admin=admin)
            for ns, role in (roles or {}).items():
                accounts.set_role(s, OPERATOR, ns, name, role)
            return accounts.create_token(s, OPERATOR, name, label="web tests").token

    def publish(
        self,
        namespace: str,
        ref: str,
        text: str,
        *,
        title: str = "",
        question: str = "",
        block_size: int = 4,
        verdict: str | None = "pass",
        verifier: str = "exact-match",
        model_name: str = "tiny-llama",
        tokenizer_fp: Digest = TOKENIZER_FP,
        token: str | None = None,
    ) -> Published:
        """Publish the artifact of ``text`` (one token a word) at ``ref``, as ``token``."""
        tokens = words_to_tokens(text) or [1]
        words = text.split()
        built = signed_artifact(
            self.key,
            tokens,
            kv_chunks(tokens, block_size),
            text=text.encode("utf-8"),
            logits=hashlib.sha256(pack_tokens(tokens)).digest() * 4,
            block_size=block_size,
            model_fp=MODEL_FP,
            model_name=model_name,
            tokenizer_fp=tokenizer_fp,
            config_fp=CONFIG_FP,
            config_fields={"threads": 1, "dtype": "float32"},
            verdict=verdict,
            verifier=verifier,
            evidence={"answer": words[-1]} if words else {},
            annotations={"title": title, "question": question},
            created="2026-11-29T12:00:00Z",
        )
        self.push(namespace, ref, built, token)
        return Published(namespace, ref, built.digest, built.manifest, text)

    def push(self, namespace: str, ref: str | None, built: Built, token: str | None = None) -> None:
        """Upload ``built`` as ``kvreg push`` does: an upload session listing its objects and
        manifest, the ones the namespace lacks in one object pack, the session closed, the
        envelope, then ``ref`` (none if None), made or moved to it."""
        objects = {**built.objects, built.digest: built.manifest.raw_bytes}
        r = self.api(
            "POST", f"/namespaces/{namespace}/uploads", token, json={"digests": [str(d) for d in objects]}
        )
        assert r.status_code in (200, 201), r.text
        upload, missing = r.json()["upload"], [Digest(d) for d in r.json()["missing"]]
        if missing:
            r = self.api(
                "POST",
                f"/namespaces/{namespace}/uploads/{upload}/objects",
                token,
                content=b"".join(objects[d] for d in missing),
                headers={
                    "Content-Type": "application/octet-stream",
                    OBJECTS_HEADER: ",".join(f"{d}={len(objects[d])}" for d in missing),
                },
            )
            assert r.status_code == 200, r.text
        r = self.api("DELETE", f"/namespaces/{namespace}/uploads/{upload}", token)
        assert r.status_code in (200, 204), r.text
        r = self.api(
            "PUT", f"/namespaces/{namespace}/envelopes/{built.digest}", token, content=built.envelope_bytes
        )
        assert r.status_code in (200, 201), r.text
        if ref is None:
            return
        r = self.api("GET", f"/namespaces/{namespace}/refs/{ref}", token)
        headers = {"If-Match": r.headers["etag"]} if r.status_code == 200 else {"If-None-Match": "*"}
        r = self.api(
            "PUT",
            f"/namespaces/{namespace}/refs/{ref}",
            token,
            json={"digest": built.digest},
            headers=headers,
        )
        assert r.status_code in (200, 201), r.text


@contextmanager
def count_queries(library: Library) -> Iterator[list[str]]:
    """The SQL statements run while the block runs (all of the app's connections)."""
    statements: list[str] = []
    engine = library.app_state.db.engine

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)
