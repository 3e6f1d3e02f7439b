"""A library larger than the store budget: evicted objects come back on demand, verified.

Against a real registry: pull an artifact into a home with a tiny ``store.max-bytes``,
evict, then ``kvreg.remote.ondemand.ensured`` fetches exactly the objects a prefix
graft of k blocks reads (and nothing else), keeps them through the eviction that
follows, and the graft succeeds; bytes the registry alters are refused.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import BLOCK, kvreg

from .registry_server import Registry
from .test_push_pull import _pusher, _writer


def _pulled(registry: Registry, depositor: dict[str, Any], make_home) -> tuple[Path, str]:
    ns, token = _writer(registry, depositor)
    src = _pusher(depositor, make_home(registry, token))
    kvreg(src, "push", "origin", "src/p07", "--as", f"{ns}/p07")
    dst = make_home(registry, registry.user({ns: "read"}), trust={ns: depositor["public_key"]})
    kvreg(dst, "pull", "origin", f"{ns}/p07")
    return dst, ns


def test_graft_pulls_what_it_needs_from_a_library_larger_than_the_budget(
    registry: Registry, depositor: dict[str, Any], make_home, llama: Path
) -> None:
    from kvreg.core.names import RefName
    from kvreg.remote.http import connect
    from kvreg.remote.ondemand import ensured, needed_for_graft
    from kvreg.store import access_log, eviction, settings_file
    from kvreg.store.artifacts import open_artifact
    from kvreg.store.home import Home

    dst, ns = _pulled(registry, depositor, make_home)
    home = Home(dst)
    ref = f"{ns}/p07"
    manifest = open_artifact(home, ref).manifest
    total = home.objects.usage().bytes
    settings_file.set_value(home, settings_file.MAX_BYTES_KEY, total // 4)  # the library is 4x the budget
    k = 2
    needed = needed_for_graft(manifest, k)
    # everything else was used since: the chunks a k-block graft needs are the least recent
    others = [d for d in manifest.object_digests() if d not in needed]
    access_log.touch(home, others, now=time.time() + 60)
    evicted = eviction.evict(home)
    assert home.objects.usage().bytes <= total // 4
    assert not any(home.objects.has(c.digest) for c in manifest.chunks[:k])
    with connect(home, "origin") as client, ensured(home, client, ns, manifest, needed) as report:
        assert all(home.objects.has(d) for d in needed)
        missing_before = [str(d) for d in needed if str(d) in {e["digest"] for e in evicted.evicted}]
        assert sorted(report.fetched) == sorted(missing_before)
        assert {str(c.digest) for c in manifest.chunks[:k]} <= set(report.fetched)
        assert report.bytes_fetched >= sum(c.size for c in manifest.chunks[:k])
        assert not set(report.fetched) - {str(d) for d in needed}  # nothing else was fetched
        assert not {e["digest"] for e in report.evicted} & {str(d) for d in needed}
    assert home.objects.usage().bytes <= total // 4 + sum(home.objects.size(d) for d in needed)

    out = kvreg(
        dst, "--json", "graft", ref, "--model", llama, "--blocks", str(k), "--max-new-tokens", "4"
    ).json
    assert out["graft_tokens"] == k * int(BLOCK)
    assert home.refs.get(RefName.parse(ref)) == manifest.digest  # the ref never went away


def test_on_demand_refuses_objects_the_manifest_does_not_name(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    from kvreg.core.digest import Digest
    from kvreg.core.errors import UsageError
    from kvreg.remote.http import connect
    from kvreg.remote.ondemand import ensure_objects
    from kvreg.store.artifacts import open_artifact
    from kvreg.store.home import Home

    dst, ns = _pulled(registry, depositor, make_home)
    home = Home(dst)
    manifest = open_artifact(home, f"{ns}/p07").manifest
    with connect(home, "origin") as client, pytest.raises(UsageError, match="not named"):
        ensure_objects(home, client, ns, manifest, [Digest.of_bytes(b"something else")])
