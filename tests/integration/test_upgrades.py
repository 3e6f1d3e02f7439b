"""Upgrades from every earlier schema, with data, on SQLite and on PostgreSQL; and a rollback.

A real ``kvreg serve`` at head is filled through its API (``source``): two namespaces (one
with a Markdown description edited after its creation) and an empty one, a reader, a writer
and a token revoked, the signing key registered with a label in both, three artifacts pushed
by ``kvreg push`` (a ref moved, a tag), a legal hold, a retention policy, the audit log with
its checkpoints, and a client that verified the whole log and pinned its checkpoint. Then, for
each earlier revision R (``schema_history``): a fresh database migrated to R receives those
rows with SQL, as R's schema holds them; it is upgraded to head (on SQLite by ``kvreg serve``
itself, which migrates on start; on PostgreSQL by ``kvreg-admin migrate``, then servers
started with ``KVREG_MIGRATE_ON_START=0``, as docs/deployment.md says for several servers) and
served with the old storage and log key:

- every row is what the migrations must give back (``expected_after_upgrade``);
- the OCI rows a revision before 0007 lacks are written at the first ``/v2/`` miss;
- search finds an artifact by a word of its title; the reader's token works, the revoked one
  does not;
- every ref pulls (signature against the trust policy, every object against its digest) and
  its objects are the ones pushed;
- ``kvreg audit verify`` verifies the whole log, consistent with the checkpoint the client
  pinned before the upgrade; a push after the upgrade appends to it, and it verifies again;
- ``kvreg-admin fsck`` finds no problem.

The rollback: from head, ``alembic downgrade`` one revision at a time to 0001 (every
migration has a downgrade): at each step the database holds exactly what that revision's
schema can of the data; then ``kvreg-admin migrate`` forward again and the same checks as
an upgrade from 0001. Code meeting a schema newer than it knows refuses to start.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.helpers import kvreg
from core.manifest_helpers import Built, signed_artifact
from kvreg.core.envelope import Envelope
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.artifacts import store_artifact
from kvreg.store.home import Home
from kvreg_registry.db.engine import upgrade

from .registry_server import BACKENDS, Registry, running_registry
from .schema_history import (
    Rows,
    Schema,
    differences,
    earlier_revisions,
    expected_after_upgrade,
    project,
    read_rows,
    revisions,
    schema,
    write_rows,
)

REPO = Path(__file__).resolve().parents[2]
WORD = "heliotrope"  # in the titles: what search must find after an upgrade


@dataclass
class Source:
    """The registry at head whose rows every older database is built from (stopped; its
    storage, log key and accounts serve every upgraded database)."""

    registry: Registry
    key: SigningKey
    artifacts: dict[str, Built]  # by local name
    refs: dict[str, str]  # "ns/name" -> the local name of the artifact it points at
    reader: str
    writer: str
    revoked: str
    auditor: Path  # a client home that verified the whole log and pinned its checkpoint
    pinned_size: int
    rows: Rows = field(default_factory=dict)
    schema: Schema = field(default_factory=dict)

    @property
    def backend(self) -> str:
        return self.registry.backend

    @property
    def namespaces(self) -> list[str]:
        return sorted({ref.partition("/")[0] for ref in self.refs})


def database_url(reg: Registry) -> str:
    return (
        reg.env.get("KVREG_DATABASE_URL") or f"sqlite:///{Path(reg.env['KVREG_DATA']) / 'registry.sqlite3'}"
    )


def artifact(key: SigningKey, name: str, seed: int) -> Built:
    """A small signed artifact with a prompt (three chunks of 32 KiB), titled with ``WORD``."""
    return signed_artifact(
        key,
        [(seed * 7919 + i) % 5000 + 1 for i in range(12)],
        [bytes([seed, i]) * (16 << 10) for i in range(3)],
        text=f"upgrade artifact {name}".encode(),
        logits=bytes(range(seed, seed + 64)),
        prompt=(f"prompt {name}".encode(), 4),
        block_size=4,
        evidence={"expected": "0"},
        annotations={"title": f"{WORD} {name}"},
    )


def depositor(root: Path, key: SigningKey, artifacts: dict[str, Built]) -> Path:
    home = Home(root)
    home.ensure()
    for name, built in artifacts.items():
        envelope = Envelope.from_json_bytes(built.envelope_bytes)
        store_artifact(home, built.objects, built.manifest, envelope, RefName.parse(f"local/{name}"))
    save_trust_policy(TrustPolicy({"local": [key.public_key]}), home.trust_path)
    return root


def client(root: Path, url: str, token: str, trust: dict[str, str] | None = None) -> Path:
    kvreg(root, "remote", "add", "origin", url)
    kvreg(root, "login", "origin", "--token", token)
    for ns, key in (trust or {}).items():
        kvreg(root, "trust", "add", ns, key)
    return root


def ok(response: httpx.Response, status: int) -> Any:
    assert response.status_code == status, f"{response.request.url}: {response.status_code} {response.text}"
    return response.json() if response.content else None


def fill(reg: Registry, root: Path) -> Source:
    """Everything the upgrade tests expect to find, made through the registry's API."""
    key = SigningKey.generate()
    public = key.public_key.to_text()
    private, open_ns = reg.namespace(), reg.namespace(public=True)
    reg.namespace()  # one with no envelope: never flagged for the OCI backfill
    with reg.admin() as c:
        for ns in (private, open_ns):
            ok(c.post(f"/namespaces/{ns}/keys", json={"public_key": public, "label": "release signer"}), 201)
        ok(c.put(f"/namespaces/{private}/retention", json={"keep_versions": 5}), 200)
        description = "Solutions **verified** by `exact-match`.\n\n- one\n- two"
        ok(c.patch(f"/namespaces/{private}", json={"description": description}), 200)
        leaver = f"u{uuid.uuid4().hex[:10]}"
        ok(c.post("/users", json={"name": leaver}), 201)
        gone = ok(c.post(f"/users/{leaver}/tokens", json={"label": "old laptop"}), 201)
        ok(c.delete(f"/tokens/{gone['id']}"), 204)
    reader = reg.user({private: "read", open_ns: "read"})
    writer = reg.user({private: "write", open_ns: "write"})
    artifacts = {name: artifact(key, name, seed) for seed, name in enumerate(("a1", "a2", "a3"), start=1)}
    pusher = client(depositor(root / "depositor", key, artifacts), reg.url, writer)
    refs = {f"{private}/x": "a1"}
    kvreg(pusher, "push", "origin", "local/a1", "--as", f"{private}/x")
    kvreg(pusher, "push", "origin", "local/a2", "--as", f"{private}/x")  # the ref moves
    kvreg(pusher, "push", "origin", "local/a3", "--as", f"{private}/y")
    kvreg(pusher, "push", "origin", "local/a1", "--as", f"{open_ns}/v1", "--tag")
    refs = {f"{private}/x": "a2", f"{private}/y": "a3", f"{open_ns}/v1": "a1"}
    with reg.admin() as c:
        ok(c.post(f"/namespaces/{private}/holds", json={"ref": "y", "reason": "a matter"}), 201)
    auditor = client(root / "auditor", reg.url, reader)
    verified = kvreg(auditor, "--json", "audit", "verify", "origin").json
    return Source(reg, key, artifacts, refs, reader, writer, gone["token"], auditor, verified["size"])


@pytest.fixture(scope="module", params=BACKENDS)
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    root = tmp_path_factory.mktemp(f"upgrade-source-{request.param}")
    with running_registry(request.param, root / "registry") as reg:
        src = fill(reg, root)
        reg.stop()
        src.rows, src.schema = read_rows(database_url(reg)), schema(database_url(reg))
        yield src  # the database and the storage are dropped after the module's last test


@contextmanager
def fresh_database(src: Source, root: Path) -> Iterator[str]:
    if src.backend == "sqlite-folder":
        root.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{root / 'registry.sqlite3'}"
        return
    from services import fresh_pg_database

    with fresh_pg_database() as url:
        yield url


def upgraded_registry(src: Source, url: str, root: Path, *, migrate: str) -> Registry:
    """A running registry on the database at ``url``, with the source's storage, log key and
    accounts, migrated by ``migrate``: ``"on start"`` (``kvreg serve`` does it) or
    ``"kvreg-admin"`` (``kvreg-admin migrate``, then ``KVREG_MIGRATE_ON_START=0``). The caller
    stops it."""
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **src.registry.env,
        "KVREG_DATA": str(root / "data"),
        "KVREG_DATABASE_URL": url,
        "KVREG_STORAGE": src.registry.storage_url,
        "KVREG_LOG_KEY_FILE": str(Path(src.registry.env["KVREG_DATA"]) / "log.key"),
    }
    reg = Registry(
        src.backend,
        root,
        env,
        admin_token=src.registry.admin_token,
        storage_url=src.registry.storage_url,
        s3=src.registry.s3,
    )
    if migrate == "kvreg-admin":
        assert reg.admin_cli("migrate")["revision"] == "head"
        reg.env["KVREG_MIGRATE_ON_START"] = "0"
    else:
        reg.env["KVREG_MIGRATE_ON_START"] = "1"
    reg.start()
    return reg


def check_upgraded(src: Source, reg: Registry, url: str, revision: str, old: Schema, tmp: Path) -> None:
    """Everything an upgrade from ``revision`` (schema ``old``) must give back, on the running ``reg``."""
    # the rows, before any request changed them
    expected = expected_after_upgrade(src.rows, src.schema, old, revision)
    assert differences(expected, read_rows(url)) == []

    # the OCI manifests a revision before 0007 lacks: written at the first miss of /v2/
    admin = {"Authorization": f"Bearer {reg.admin_token}"}
    for ns in src.namespaces:
        miss = f"{reg.url}/v2/{ns}/manifests/sha256:{'0' * 64}"
        assert httpx.get(miss, headers=admin, timeout=30).status_code == 404
    rows = read_rows(url)
    assert rows["oci_manifests"] == src.rows["oci_manifests"]
    assert not any(n["oci_backfill_pending"] for n in rows["namespaces"])

    # search, tokens
    with reg.http(src.reader) as c:
        found = ok(c.get("/artifacts", params={"q": WORD}), 200)
        ok(c.get("/whoami"), 200)
    digests = {str(src.artifacts[name].manifest.digest) for name in src.refs.values()}
    assert digests <= {a["digest"] for a in found["artifacts"]}, found
    with reg.http(src.revoked) as c:
        assert c.get("/whoami").status_code == 401

    # every ref pulls, every object the one pushed
    trust = {ns: src.key.public_key.to_text() for ns in src.namespaces}
    puller = client(tmp / "puller", reg.url, src.reader, trust)
    for ref, name in src.refs.items():
        pulled = kvreg(puller, "--json", "pull", "origin", ref).json
        built = src.artifacts[name]
        assert pulled["digest"] == str(built.manifest.digest)
        objects = Home(puller).objects
        assert {d: objects.read(d) for d in built.objects} == built.objects

    # the audit log: consistent with the checkpoint pinned before the upgrade, and it grows
    auditor = tmp / "auditor"
    shutil.copytree(src.auditor, auditor)
    config = json.loads((auditor / "config.json").read_text())
    config["remotes"]["origin"]["url"] = reg.url  # the registry moved; the pin stays
    (auditor / "config.json").write_text(json.dumps(config))
    verified = kvreg(auditor, "--json", "audit", "verify", "origin").json
    assert verified["previous_size"] == src.pinned_size
    assert verified["entries_checked"] == verified["size"] >= src.pinned_size
    new = {"a4": artifact(src.key, "a4", 4)}
    pusher = client(depositor(tmp / "pusher", src.key, new), reg.url, src.writer)
    ns = src.namespaces[0]
    kvreg(pusher, "push", "origin", "local/a4", "--as", f"{ns}/x")
    assert kvreg(puller, "--json", "pull", "origin", f"{ns}/x").json["digest"] == str(
        new["a4"].manifest.digest
    )
    again = kvreg(auditor, "--json", "audit", "verify", "origin").json
    assert again["entries_checked"] == again["size"] > verified["size"]

    fsck = reg.admin_cli("fsck")
    assert fsck["ok"] is True and fsck["problems"] == [], fsck["problems"]


@pytest.mark.parametrize("revision", earlier_revisions())
def test_upgrade_from_an_earlier_revision_with_data(source: Source, revision: str, tmp_path: Path) -> None:
    with fresh_database(source, tmp_path / "db") as url:
        upgrade(url, revision)
        old = schema(url)
        write_rows(url, source.rows)
        assert differences(project(source.rows, old), read_rows(url)) == []  # what R held
        migrate = "on start" if source.backend == "sqlite-folder" else "kvreg-admin"
        reg = upgraded_registry(source, url, tmp_path / "registry", migrate=migrate)
        try:
            check_upgraded(source, reg, url, revision, old, tmp_path)
        finally:
            reg.stop()


def alembic(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``alembic`` command of docs/deployment.md, run in the source tree."""
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url={url}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_upgrade_rollback_one_revision_at_a_time_then_forward_again(source: Source, tmp_path: Path) -> None:
    history = revisions()
    with fresh_database(source, tmp_path / "schemas") as scratch:  # each revision's schema, empty
        schemas = {}
        for revision in history:
            upgrade(scratch, revision)
            schemas[revision] = schema(scratch)
    assert schemas[history[-1]] == source.schema
    with fresh_database(source, tmp_path / "db") as url:
        upgrade(url)
        write_rows(url, source.rows)
        assert differences(source.rows, read_rows(url)) == []
        for revision in reversed(history[:-1]):
            done = alembic(url, "downgrade", revision)
            assert done.returncode == 0, done.stderr
            assert schema(url) == schemas[revision], revision
            assert differences(project(source.rows, schemas[revision]), read_rows(url)) == [], revision
        reg = upgraded_registry(source, url, tmp_path / "registry", migrate="kvreg-admin")
        try:
            check_upgraded(source, reg, url, history[0], schemas[history[0]], tmp_path)
        finally:
            reg.stop()

        # code that meets a schema newer than it knows (a rollback of the code without a
        # downgrade of the schema first) refuses to start, and kvreg-admin to migrate
        _set_revision(url, "9999")
        (tmp_path / "stale").mkdir()
        stale = Registry(source.backend, tmp_path / "stale", {**reg.env, "KVREG_MIGRATE_ON_START": "1"})
        with pytest.raises(RuntimeError, match="Can't locate revision identified by '9999'"):
            stale.start()
        with pytest.raises(RuntimeError, match="9999"):
            stale.admin_cli("migrate")


def _set_revision(url: str, revision: str) -> None:
    from sqlalchemy import text

    from .schema_history import engine_of

    with engine_of(url) as engine, engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
