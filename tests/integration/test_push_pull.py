"""push → pull → graft against a real registry, on SQLite+folder and PostgreSQL+S3.

The acceptance flows of the registry issue: a pulled artifact grafts byte-exactly
on another home; a second artifact sharing a prefix sends only its new chunks
(bytes counted); concurrent pushes of overlapping artifacts both succeed and store
each object once; a ref compare-and-swap race has exactly one winner.
"""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path
from typing import Any

import httpx

from cli.helpers import SUFFIX, kvreg

from .conftest import object_sizes, read_manifest
from .registry_server import Registry


def _writer(registry: Registry, depositor: dict[str, Any], *, public: bool = False) -> tuple[str, str]:
    ns = registry.namespace(public=public)
    registry.register_key(ns, depositor["public_key"])
    return ns, registry.user({ns: "write"})


def test_push_pull_graft_is_byte_exact(
    registry: Registry, depositor: dict[str, Any], make_home, llama: Path, tmp_path: Path
) -> None:
    ns, token = _writer(registry, depositor)
    home = _pusher(depositor, make_home(registry, token))
    push = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07").json
    sizes = object_sizes(depositor["home"], depositor["manifests"]["p07"])
    assert push["objects_total"] == len(sizes)
    assert push["bytes_sent"] == sum(sizes.values())
    assert push["ref_changed"] is True and push["old"] is None

    reader = registry.user({ns: "read"})
    dst = make_home(registry, reader, trust={ns: depositor["public_key"]})
    pull = kvreg(dst, "--json", "pull", "origin", f"{ns}/p07").json
    assert pull["digest"] == push["digest"]
    assert pull["objects_downloaded"] == len(sizes)
    assert pull["bytes_downloaded"] == sum(sizes.values())
    kvreg(dst, "fsck")

    prompt = tmp_path / "suffix.txt"
    prompt.write_text(SUFFIX, encoding="utf-8")
    graft = kvreg(
        dst,
        "--json",
        "graft",
        f"{ns}/p07",
        "--model",
        llama,
        "--append-file",
        prompt,
        "--max-new-tokens",
        "4",
        "--check",
    ).json
    assert graft["check"]["byte_exact"] is True
    assert graft["check"]["sha256_equal_steps"] == graft["check"]["steps"]

    # A second pull has nothing to fetch.
    again = kvreg(dst, "--json", "pull", "origin", f"{ns}/p07").json
    assert again["objects_downloaded"] == 0 and again["bytes_downloaded"] == 0


def _pusher(depositor: dict[str, Any], client_home: Path) -> Path:
    """``client_home`` with the depositor's objects, envelopes, refs and keys (a copy of the store)."""
    import shutil

    for sub in ("objects", "envelopes", "refs", "keys", "trust.json"):
        src = depositor["home"] / sub
        dst = client_home / sub
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dst)
    return client_home


def test_shared_prefix_sends_only_new_chunks(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns, token = _writer(registry, depositor)
    home = _pusher(depositor, make_home(registry, token))
    first = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/p07").json
    second = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/p07x").json

    base = object_sizes(depositor["home"], depositor["manifests"]["p07"])
    extended = object_sizes(depositor["home"], depositor["manifests"]["p07x"])
    new_objects = {d: s for d, s in extended.items() if d not in base}
    shared_chunks = [c for c in depositor["manifests"]["p07x"].chunks if str(c.digest) in base]
    assert shared_chunks, "the extended artifact must share chunks with the base"
    assert second["objects_missing"] == len(new_objects)
    assert second["bytes_sent"] == sum(new_objects.values())
    assert second["bytes_sent"] < second["bytes_total"]
    assert first["bytes_sent"] == sum(base.values())

    # Pushing again sends nothing, and leaves the ref where it is.
    again = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/p07x").json
    assert again["bytes_sent"] == 0 and again["ref_changed"] is False


def test_concurrent_overlapping_pushes_store_each_object_once(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns, token = _writer(registry, depositor)
    homes = [_pusher(depositor, make_home(registry, token)) for _ in range(2)]
    before = registry.stored_digests()
    jobs = [(homes[0], "src/p07", f"{ns}/a"), (homes[1], "src/p07x", f"{ns}/b")]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(lambda j: kvreg(j[0], "--json", "push", "origin", j[1], "--as", j[2]).json, jobs)
        )
    assert all(r["ref_changed"] for r in results)

    wanted: dict[str, int] = {}
    for name in ("p07", "p07x"):
        wanted.update(object_sizes(depositor["home"], depositor["manifests"][name]))
    stored = registry.stored_digests()
    for digest, size in wanted.items():
        assert stored.get(digest) == size
    # Content addressing: one stored copy per digest; nothing but these objects (and the two
    # manifests) was added by the two pushes.
    added = set(stored) - set(before)
    manifests = {r["digest"] for r in results}
    assert added <= set(wanted) | manifests
    for name, ref in (("p07", f"{ns}/a"), ("p07x", f"{ns}/b")):
        dst = make_home(registry, token, trust={ns: depositor["public_key"]})
        kvreg(dst, "pull", "origin", ref)
        assert read_manifest(dst, ref).digest == depositor["manifests"][name].digest


def test_ref_cas_race_has_one_winner(registry: Registry, depositor: dict[str, Any], make_home) -> None:
    ns, token = _writer(registry, depositor)
    home = _pusher(depositor, make_home(registry, token))
    a = kvreg(home, "--json", "push", "origin", "src/p07", "--as", f"{ns}/race").json["digest"]
    b = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/other").json["digest"]
    c = kvreg(home, "--json", "push", "origin", "src/other", "--as", f"{ns}/third").json["digest"]

    for attempt in range(5):
        current = a if attempt % 2 == 0 else b
        targets = [b, c] if current == a else [a, c]
        barrier = threading.Barrier(2)

        def move(target: str, current: str = current, barrier: threading.Barrier = barrier) -> httpx.Response:
            with registry.http(token) as client:
                barrier.wait()
                return client.put(
                    f"/namespaces/{ns}/refs/race",
                    json={"digest": target},
                    headers={"If-Match": f'"{current}"'},
                )

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(move, targets))
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 409], [r.text for r in answers]
        loser = next(r for r in answers if r.status_code == 409)
        assert loser.json()["error"]["code"] == "REF_CONFLICT"
        winner = next(r for r in answers if r.status_code == 200)
        with registry.http(token) as client:
            now = client.get(f"/namespaces/{ns}/refs/race").json()["digest"]
        assert now == winner.json()["digest"]
        # Put the ref back where the next round expects it.
        nxt = b if attempt % 2 == 0 else a
        if now != nxt:
            with registry.http(token) as client:
                r = client.put(
                    f"/namespaces/{ns}/refs/race", json={"digest": nxt}, headers={"If-Match": f'"{now}"'}
                )
                assert r.status_code == 200, r.text
