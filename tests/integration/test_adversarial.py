"""A registry that lies (``lying_registry.LyingRegistry`` in front of a real one), and a client that
catches every lie with exit 3 and writes nothing.

The lies: a chunk with one flipped bit; two valid chunks of one artifact swapped; chunks
or the envelope of another artifact (mix-and-match); a ref served at the genuinely
signed value it had before it moved, with its genuine older log entry and a
consistent log (per-ref rollback); an old checkpoint and ref state replayed beyond the
remote's maximum checkpoint age (freeze); checkpoints signed with the registry's own
key that contradict what the client saw (a fork, a rewrite). The route lies
(``kvreg ask --remote`` offered another prompt's state, or an artifact whose signed
block keys are forged) are at the end: they must never graft, and fall back.

"Nothing written" is checked on the whole client store: every file's bytes before and
after (``cache/`` excepted, as elsewhere), so objects, manifests, envelopes, refs and
the remote's log state (checkpoint, ref high-water marks) are all covered.

These run on the SQLite+folder registry only: what is tested is the client, and the
lies are told above the storage (both backends serve the same answers, which the
rest of the integration suite checks).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cli.helpers import kvreg
from kvreg.core.checkpoint import Checkpoint, parse_checkpoint_body, sign_checkpoint
from kvreg.core.keys import SigningKey
from kvreg.fileio.keyfiles import load_signing_key, load_trust_policy, save_trust_policy

from .lying_registry import LyingRegistry
from .registry_server import Registry
from .test_ask_remote import _ask, _publish
from .test_push_pull import _pusher

DAY = 24 * 3600


# --- helpers --------------------------------------------------------------------------------------


def tree(home: Path) -> dict[str, str]:
    """Every file of a client store (but the rebuildable ``cache/``) and the SHA-256 of its bytes."""
    out: dict[str, str] = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home)
        if rel.parts[0] == "cache" or not path.is_file():
            continue
        out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def refused(home: Path, *args: str, code: str) -> dict[str, Any]:
    """Run a command that must exit 3 with ``code`` and leave every file of ``home`` as it was."""
    before = tree(home)
    run = kvreg(home, "--json", *args, expect=3)
    error = run.json["error"]
    assert error["code"] == code, run
    assert tree(home) == before, "a refused command must write nothing"
    return dict(error)


def make_client_home(
    path: Path, url: str, *, token: str | None = None, trust: dict[str, str] | None = None
) -> Path:
    """A client store with ``origin`` at ``url``, a token and trusted keys, written in-process (the
    same files ``kvreg remote add``, ``login`` and ``trust add`` write, without their start-up
    time); nothing is contacted, so nothing is pinned yet."""
    from kvreg.core.keys import PublicKey
    from kvreg.remote.remotes import Credentials, RemoteConfig
    from kvreg.store.home import Home

    path.mkdir(parents=True)
    home = Home(path)
    RemoteConfig(home).add("origin", url)
    if token is not None:
        Credentials(home).set("origin", token)
    policy = load_trust_policy(home.trust_path)
    for ns, key in (trust or {}).items():
        policy.allow(ns, PublicKey.from_text(key))
    save_trust_policy(policy, home.trust_path)
    return path


@pytest.fixture(scope="module")
def world(
    _registries: dict[str, Registry], depositor: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> SimpleNamespace:
    """The SQLite+folder registry with a public namespace holding src/p07 and src/other (pushed
    straight to it) and a pusher home for more. Tests add refs of their own names."""
    registry = _registries["sqlite-folder"]
    ns = registry.namespace(public=True)
    registry.register_key(ns, depositor["public_key"])
    root = tmp_path_factory.mktemp("adversarial")
    pusher = _pusher(
        depositor, make_client_home(root / "pusher", registry.url, token=registry.user({ns: "write"}))
    )
    for name in ("p07", "other"):
        kvreg(pusher, "push", "origin", f"src/{name}", "--as", f"{ns}/{name}")
    return SimpleNamespace(
        registry=registry,
        ns=ns,
        pusher=pusher,
        token=registry.user({ns: "read"}),
        key=depositor["public_key"],
        manifests=depositor["manifests"],
    )


@pytest.fixture
def proxy(world: SimpleNamespace) -> Iterator[LyingRegistry]:
    with LyingRegistry(world.registry.url) as p:
        yield p


@pytest.fixture
def reader(world: SimpleNamespace, proxy: LyingRegistry, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``reader(anonymous=False)``: a fresh home that reads through the proxy and trusts the depositor."""
    counter = iter(range(100))

    def make(*, anonymous: bool = False) -> Path:
        return make_client_home(
            tmp_path / f"reader{next(counter)}",
            proxy.url,
            token=None if anonymous else world.token,
            trust={world.ns: world.key},
        )

    return make


def _object(depositor: dict[str, Any], digest: Any) -> bytes:
    from kvreg.store.home import Home

    return Home(depositor["home"]).objects.read(digest)


def _log_key(registry: Registry) -> SigningKey:
    """The registry's own audit-log key: what an insider (or a thief of the key) signs with."""
    return load_signing_key(registry.root / "data" / "log.key")


def _checkpoint(proxy: LyingRegistry) -> Checkpoint:
    note = proxy.record("/api/v1/log/checkpoint").decode()
    return parse_checkpoint_body(note.split("\n\n")[0] + "\n")


# --- (1, 2, 5) the bytes: a flipped bit, two chunks swapped, another artifact's parts -------------


@pytest.mark.parametrize("lie", ["flipped-bit", "swapped-chunks", "chunk-of-another-artifact"])
def test_lying_chunks_are_refused_and_nothing_is_written(
    world: SimpleNamespace, proxy: LyingRegistry, reader, depositor: dict[str, Any], lie: str
) -> None:
    m, other = world.manifests["p07"], world.manifests["other"]
    c1, c2 = m.chunks[1].digest, m.chunks[2].digest
    if lie == "flipped-bit":
        data = bytearray(_object(depositor, c1))
        data[len(data) // 2] ^= 0x10
        proxy.replace_object(world.ns, str(c1), bytes(data))
    elif lie == "swapped-chunks":
        proxy.replace_object(world.ns, str(c1), _object(depositor, c2))
        proxy.replace_object(world.ns, str(c2), _object(depositor, c1))
    else:
        proxy.replace_object(world.ns, str(c1), _object(depositor, other.chunks[1].digest))
    home = reader()
    error = refused(home, "pull", "origin", f"{world.ns}/p07", code="DIGEST_MISMATCH")
    assert proxy.told >= 1
    assert str(c1) in json.dumps(error) or str(c2) in json.dumps(error)


def test_the_envelope_of_another_artifact_is_refused(
    world: SimpleNamespace, proxy: LyingRegistry, reader
) -> None:
    """Mix-and-match of metadata: the ref is genuine, the envelope served is another artifact's."""
    m, other = world.manifests["p07"], world.manifests["other"]
    genuine = proxy.record(f"/api/v1/namespaces/{world.ns}/envelopes/{other.digest}")
    proxy.serve("GET", rf"/api/v1/namespaces/{world.ns}/envelopes/{m.digest}", genuine)
    home = reader()
    error = refused(home, "pull", "origin", f"{world.ns}/p07", code="DIGEST_MISMATCH")
    assert str(other.digest) in error["message"] and proxy.told == 1


# --- (3) per-ref rollback -------------------------------------------------------------------------


def test_a_ref_rolled_back_to_its_older_signed_value_is_refused(
    world: SimpleNamespace, proxy: LyingRegistry, reader
) -> None:
    ns, ref_path = world.ns, f"/api/v1/namespaces/{world.ns}/refs/moving"
    kvreg(world.pusher, "push", "origin", "src/p07", "--as", f"{ns}/moving")
    before_move = proxy.record(ref_path)  # genuine: digest of p07, log_index of its ref.created entry
    kvreg(world.pusher, "push", "origin", "src/p07x", "--as", f"{ns}/moving")
    new = str(world.manifests["p07x"].digest)
    assert json.loads(before_move)["digest"] != new

    # An anonymous home (it cannot read log entries) sees the truth first: its store keeps the
    # ref's latest proven entry.
    anonymous = reader(anonymous=True)
    truth = kvreg(anonymous, "--json", "pull", "origin", f"{ns}/moving").json
    assert truth["digest"] == new
    assert truth["audit"]["entries"][0]["entry_checked"] is False  # it proved the leaf, unread

    proxy.serve("GET", ref_path, before_move)
    # (b) A home with a token (it can read entries) and no history: the entries after the
    # served one, authenticated against the signed checkpoint, show the ref moved later.
    error = refused(reader(), "pull", "origin", f"{ns}/moving", code="REF_ROLLBACK")
    assert "later change" in error["message"] and error["details"]["later_value"] == new
    # (a) The anonymous home cannot read entries, but remembers the newer entry it proved.
    error = refused(anonymous, "pull", "origin", f"{ns}/moving", code="REF_ROLLBACK")
    assert "proved entry" in error["message"] and error["details"]["seen_digest"] == new
    assert proxy.told == 2

    # What is out of reach, said plainly: an anonymous home with no history cannot tell.
    stranger = kvreg(reader(anonymous=True), "--json", "pull", "origin", f"{ns}/moving").json
    assert stranger["digest"] != new
    assert any("was not checked" in n for n in stranger["audit"]["notes"])


# --- (4) freeze -----------------------------------------------------------------------------------


def test_a_frozen_registry_is_refused_beyond_the_maximum_checkpoint_age(
    world: SimpleNamespace, proxy: LyingRegistry, reader
) -> None:
    ns, ref_path = world.ns, f"/api/v1/namespaces/{world.ns}/refs/frozen"
    kvreg(world.pusher, "push", "origin", "src/p07", "--as", f"{ns}/frozen")
    old_ref, old = proxy.record(ref_path), _checkpoint(proxy)
    # The checkpoint of that moment as the registry signed it two days ago (with its own key).
    stale = sign_checkpoint(old, _log_key(world.registry), old.origin, timestamp=int(time.time()) - 2 * DAY)
    kvreg(world.pusher, "push", "origin", "src/p07x", "--as", f"{ns}/frozen")

    # Homes: one with no history, one that verified the newest checkpoint, one with the check
    # turned off, one with a longer limit.
    fresh, seen, lax, patient = reader(), reader(), reader(), reader()
    kvreg(seen, "ls-remote", "origin", ns)
    kvreg(lax, "remote", "add", "origin", proxy.url, "--max-checkpoint-age", "off")
    kvreg(patient, "remote", "add", "origin", proxy.url, "--max-checkpoint-age", "3d")

    # The registry now withholds everything after that moment: its checkpoint and the ref.
    proxy.serve("GET", r"/api/v1/log/checkpoint", stale.encode())
    proxy.serve("GET", ref_path, old_ref)
    error = refused(fresh, "pull", "origin", f"{ns}/frozen", code="CHECKPOINT_STALE")
    assert error["details"]["age"] >= 2 * DAY and error["details"]["max_age"] == DAY
    assert "freeze" in error["message"]
    refused(seen, "pull", "origin", f"{ns}/frozen", code="CHECKPOINT_STALE")

    # The check is what catches it: with it turned off, the frozen state is served and accepted.
    pulled = kvreg(lax, "--json", "pull", "origin", f"{ns}/frozen").json
    assert pulled["digest"] == str(world.manifests["p07"].digest) != str(world.manifests["p07x"].digest)
    # A longer limit is a choice too: three days accept the two-day-old checkpoint.
    kvreg(patient, "ls-remote", "origin", ns)
    assert proxy.told >= 4


# --- (6) a checkpoint inconsistent with an earlier one, end to end --------------------------------


@pytest.mark.parametrize("lie", ["fork-same-size", "rewrite-larger"])
def test_a_checkpoint_that_contradicts_the_one_seen_before_is_refused(
    world: SimpleNamespace, proxy: LyingRegistry, reader, lie: str
) -> None:
    """Signed with the registry's own key (an insider): only the client's memory catches it.
    The database-level variants (truncated, reordered, reset) are tests/integration/test_audit_client.py's."""
    home = reader()
    kvreg(home, "pull", "origin", f"{world.ns}/p07")
    seen = _checkpoint(proxy)
    size = seen.size if lie == "fork-same-size" else seen.size + 3
    forged = Checkpoint(seen.origin, size, hashlib.sha256(b"another history").digest())
    note = sign_checkpoint(forged, _log_key(world.registry), seen.origin, timestamp=int(time.time()))
    proxy.serve("GET", r"/api/v1/log/checkpoint", note.encode())
    if lie == "rewrite-larger":  # the registry's real proofs do not reach that size: answer one
        body = {
            "first": seen.size,
            "size": size,
            "root": base64.b64encode(forged.root).decode(),
            "hashes": [],
        }
        proxy.serve("GET", r"/api/v1/log/proof/consistency", json.dumps(body).encode())
    error = refused(home, "pull", "origin", f"{world.ns}/other", code="LOG_INCONSISTENT")
    assert (
        ("forked" in error["message"]) if lie == "fork-same-size" else ("does not extend" in error["message"])
    )


# --- (7) routing: another prompt's state is never grafted -----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("registry", ["sqlite-folder"], indirect=True)
def test_another_prompts_state_is_never_grafted(
    registry: Registry,
    library: dict[str, Any],
    make_home,
    tmp_path: Path,
) -> None:
    """``kvreg ask --remote`` misled two ways; both times it pulls what it is offered (genuine,
    trusted), grafts nothing and generates plainly.

    1. The registry's route endpoint lies: for one question it offers another question's
       artifact as if every block matched. The client's own index does not match it.
    2. A trusted signer publishes an artifact whose *signed* block keys are another prompt's
       (colliding keys, as a hash collision or a lying depositor would make): the registry
       routes to it honestly and the client's index matches it, but the token-by-token
       comparison refuses it (``ROUTE_MISMATCH``).
    """
    from kvreg.core.canonical import canonical_json
    from kvreg.core.envelope import sign_envelope
    from kvreg.store.home import Home

    ns = _publish(registry, library, make_home)
    (p0, p1), (m0, m1) = library["problems"][:2], library["manifests"][:2]
    other_ref = f"add-{p1.a}-{p1.b}"
    short = ("--max-new-tokens", "2")

    def swap(status: int, body: bytes, _m: Any) -> tuple[int, bytes] | None:
        doc = json.loads(body)
        if status != 200 or not doc["candidates"]:
            return None
        for c in doc["candidates"]:
            c.update(manifest_digest=str(m1.digest), refs=[other_ref])
        return status, json.dumps(doc).encode()

    with LyingRegistry(registry.url) as proxy:
        proxy.lie("POST", r"/api/v1/route", swap)
        asking = make_client_home(
            tmp_path / "asking",
            proxy.url,
            token=registry.user({ns: "read"}),
            trust={ns: library["public_key"]},
        )
        out = _ask(asking, tmp_path, p0.question(), *short)
        assert proxy.told == 1
    assert [p["ref"] for p in out["remote"]["pulled"]] == [f"{ns}/{other_ref}"]  # the lie was acted on
    assert out["mode"] != "knowledge" and out["fallback"] is True
    assert out["artifact"] is None or out["artifact"]["manifest_digest"] != str(m1.digest)

    # 2. p1's artifact with p0's block keys, signed by the trusted key; p0's own ref removed.
    doc = json.loads(m1.raw_bytes)
    for i in range(min(len(m0.chunks), len(m1.chunks))):
        doc["chunks"][i]["block_key"] = str(m0.chunks[i].block_key)
    env = sign_envelope(canonical_json(doc), load_signing_key(Path(library["home"]) / "keys" / "default.key"))
    forged = str(env.manifest_digest)
    with registry.admin() as c:
        assert c.put(f"/namespaces/{ns}/envelopes/{forged}", content=env.to_json_bytes()).is_success
        r = c.put(f"/namespaces/{ns}/refs/forged", json={"digest": forged}, headers={"If-None-Match": "*"})
        assert r.status_code == 201, r.text
        genuine = f"/namespaces/{ns}/refs/add-{p0.a}-{p0.b}"
        assert c.delete(genuine, headers={"If-Match": f'"{m0.digest}"'}).is_success
    fresh = make_client_home(
        tmp_path / "fresh", registry.url, token=registry.user({ns: "read"}), trust={ns: library["public_key"]}
    )
    out = _ask(fresh, tmp_path, p0.question(), *short)
    assert f"{ns}/forged" in [p["ref"] for p in out["remote"]["pulled"]], out["remote"]
    assert out["mode"] != "knowledge" and out["fallback"] is True
    refused = [s.get("code") for s in out["skipped"]]
    refused += [(m.get("error") or {}).get("code") for m in out["refused_modes"]]
    assert "ROUTE_MISMATCH" in refused, out
    assert (out.get("artifact") or {}).get("manifest_digest") != forged
    assert Home(fresh).objects.has(env.manifest_digest)  # pulled (its signature is fine), never grafted
