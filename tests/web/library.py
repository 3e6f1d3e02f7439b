"""A registry app in this process, seeded through its own HTTP API, for the web UI's tests.

``Library`` wraps a ``TestClient`` of ``create_app`` (the real app: alembic-made
database, real storage backend, real signature and manifest checks) and publishes
artifacts the way ``kvreg push`` does: objects, then the signed envelope, then the
ref. Artifacts are built from token ids: chunk ``i`` is a function of the tokens up
to the end of block ``i`` (as real KV blocks are, by causality), so two artifacts
whose tokens share a prefix share exactly the chunks of the shared full blocks.

``count_queries`` counts the SQL statements the app runs (SQLAlchemy's
``before_cursor_execute`` event on the app's engine) for the bounded-query tests.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event

from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.envelope import sign_envelope
from kvreg.core.keys import SigningKey
from kvreg.core.manifest import Manifest
from kvreg.core.merkle import chunk_merkle_root
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


def chunk_bytes(tokens: list[int], end: int) -> bytes:
    """The stand-in KV bytes of the block that ends at ``end``: a function of ``tokens[:end]``."""
    seed = hashlib.sha256(struct.pack(f"<{end}I", *tokens[:end])).digest()
    return seed * 8


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
        token: str | None = None,
    ) -> Published:
        tokens = words_to_tokens(text) or [1]
        count = len(tokens)
        n = -(-count // block_size)
        chunks = [chunk_bytes(tokens, min((i + 1) * block_size, count)) for i in range(n)]
        tokens_bytes = struct.pack(f"<{count}I", *tokens)
        text_bytes = text.encode("utf-8")
        logits_bytes = hashlib.sha256(tokens_bytes).digest() * 4
        digests = [Digest.of_bytes(c) for c in chunks]
        doc: dict[str, Any] = {
            "schema": "kvreg.manifest/v1",
            "model": {
                "fingerprint": MODEL_FP,
                "name": model_name,
                "architecture": "LlamaForCausalLM",
                "model_type": "llama",
                "num_layers": 2,
                "kv_heads": 2,
                "head_dim": 8,
                "dtype": "float32",
                "layer_types": ["full_attention", "full_attention"],
                "sliding_window": None,
            },
            "tokenizer": {"fingerprint": TOKENIZER_FP, "name": "tiny-tok"},
            "config": {
                "fingerprint": CONFIG_FP,
                "profile": "native",
                "fields": {"threads": 1, "dtype": "float32"},
            },
            "schedule": {"block_size": block_size, "grid": "absolute"},
            "tokens": {"count": count, "digest": Digest.of_bytes(tokens_bytes)},
            "text": {"digest": Digest.of_bytes(text_bytes), "size": len(text_bytes)},
            "chunks": [
                {
                    "index": i,
                    "start": i * block_size,
                    "end": min((i + 1) * block_size, count),
                    "digest": digests[i],
                    "size": len(chunks[i]),
                    "block_key": k,
                }
                for i, k in enumerate(block_keys(MODEL_FP, TOKENIZER_FP, CONFIG_FP, tokens, block_size))
            ],
            "merkle_root": chunk_merkle_root(digests),
            "witness": {"logits_digest": Digest.of_bytes(logits_bytes), "dtype": "float32", "shape": [32]},
            "verification": None
            if verdict is None
            else {"verifier": verifier, "verdict": verdict, "evidence": {"answer": text.split()[-1]}},
            "annotations": {"title": title, "question": question},
            "created": "2026-11-29T12:00:00Z",
            "kvreg_version": "0.1.0",
        }
        manifest = Manifest.from_dict(doc)
        envelope = sign_envelope(manifest.raw_bytes, self.key)
        objects = {Digest.of_bytes(b): b for b in [*chunks, tokens_bytes, text_bytes, logits_bytes]}
        objects[manifest.digest] = manifest.raw_bytes
        for digest, data in objects.items():
            r = self.api("PUT", f"/namespaces/{namespace}/objects/{digest}", token, content=data)
            assert r.status_code in (200, 201), r.text
        r = self.api(
            "PUT",
            f"/namespaces/{namespace}/envelopes/{manifest.digest}",
            token,
            content=envelope.to_json_bytes(),
        )
        assert r.status_code in (200, 201), r.text
        r = self.api("GET", f"/namespaces/{namespace}/refs/{ref}", token)
        headers = {"If-Match": r.headers["etag"]} if r.status_code == 200 else {"If-None-Match": "*"}
        r = self.api(
            "PUT",
            f"/namespaces/{namespace}/refs/{ref}",
            token,
            json={"digest": manifest.digest},
            headers=headers,
        )
        assert r.status_code in (200, 201), r.text
        return Published(namespace, ref, manifest.digest, manifest, text)


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
