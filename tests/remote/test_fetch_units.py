"""How a pull plans its downloads (``kvreg.remote.staging.fetch_units``), reads a fetch pack's
listing (``kvreg.remote.api.objects.parse_fetch_listing``) and its answer
(``ObjectsApi.get_objects_to``, against the scriptable HTTP server of ``helpers``: cut off,
re-framed in chunks, to retry, lying about sizes). Pulls through packs against the real registry
are in ``tests/integration`` (test_push_pull, test_resume, test_refusals, test_adversarial)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, RemoteError
from kvreg.remote.api.objects import parse_fetch_listing
from kvreg.remote.session import Download, ProgressCallback
from kvreg.remote.staging import fetch_units

from .helpers import serve

MIB = 1 << 20
D = [Digest.of_bytes(b"%d" % i) for i in range(40)]


class _Source:
    """What fetch_units reads of a source: its published limits (and, with packs, that it has
    get_objects_to). Nothing is downloaded."""

    remote_name = None

    def __init__(self, limits: dict[str, int]) -> None:
        self.limits = limits

    def limit(self, name: str, default: int) -> int:
        return self.limits.get(name, default)

    def get_object_to(self, namespace: str, digest: Digest, dest: Path, **kw: object) -> Download:
        raise AssertionError("not called")


class _PackingSource(_Source):
    def get_objects_to(
        self,
        namespace: str,
        items: list[tuple[Digest, Path, int | None]],
        progress_cb: ProgressCallback | None = None,
    ) -> list[Download]:
        raise AssertionError("not called")


def test_packs_only_where_the_source_offers_them() -> None:
    digests, sizes = D[:6], dict.fromkeys(D[:6], 4096)
    singles = [[d] for d in digests]
    assert fetch_units(_Source({"max_fetch_objects": 256}), digests, sizes, 4) == singles  # an OCI registry
    assert fetch_units(_PackingSource({}), digests, sizes, 4) == singles  # not published (S3 redirect)
    assert fetch_units(_PackingSource({"max_fetch_objects": 1}), digests, sizes, 4) == singles
    packed = fetch_units(_PackingSource({"max_fetch_objects": 256}), digests, sizes, 2)
    assert packed == [digests[:3], digests[3:]]


def test_objects_of_unstated_size_go_first_and_alone_and_every_object_once() -> None:
    digests = D[:30]
    sizes = {d: 16 * MIB + 7 for i, d in enumerate(digests) if i % 10}
    units = fetch_units(_PackingSource({"max_fetch_objects": 5}), digests, sizes, 4)
    unstated = [d for d in digests if d not in sizes]
    assert units[: len(unstated)] == [[d] for d in unstated]
    assert all(1 <= len(u) <= 5 for u in units)
    assert [d for u in units[len(unstated) :] for d in u] == [d for d in digests if d in sizes]


def test_chunks_just_over_16_mib_make_full_packs() -> None:
    """1 GiB of chunks a little over 16 MiB with 4 jobs: 8 packs of 8, two full rounds."""
    digests = D[:32] + [Digest.of_bytes(b"c%d" % i) for i in range(32)]
    sizes = dict.fromkeys(digests, 16 * MIB + 4000)
    units = fetch_units(_PackingSource({"max_fetch_objects": 256}), digests, sizes, 4)
    assert [len(u) for u in units] == [8] * 8


def test_the_listing_must_name_the_objects_asked_in_order() -> None:
    a, b = D[0], D[1]
    assert parse_fetch_listing(f"{a}=10,{b}=0", [a, b], [10, None]) == [10, 0]
    assert parse_fetch_listing("", [], []) == []
    for value in (None, f"{a}=10", f"{b}=0,{a}=10", f"{a}=10,{b}=x", f"{a}=10,{b}=0,{a}=1", f"{a}=-1,{b}=0"):
        with pytest.raises(RemoteError):
            parse_fetch_listing(value, [a, b], [None, None])


def test_a_listed_size_over_the_manifests_is_refused_as_not_the_object() -> None:
    a, b = D[0], D[1]
    with pytest.raises(DigestMismatchError) as e:
        parse_fetch_listing(f"{a}=10,{b}=11", [a, b], [10, 10])
    assert str(b) in e.value.message


# --- a fetch pack's answer, read by the client (ObjectsApi.get_objects_to) -------------------------

BLOBS = [bytes((i * 7 + k) % 256 for i in range(size)) for k, size in enumerate((300_000, 0, 2_000_000, 5))]
DIGESTS = [Digest.of_bytes(b) for b in BLOBS]
FETCH = "/api/v1/namespaces/ns/objects/fetch"


def _client(url: str) -> Any:
    from kvreg.remote.http import RegistryClient

    token = "kvreg_" + "t" * 43
    return RegistryClient(url, token, remote_name="origin", retries=1, backoff=0.001, timeout=10)


def _items(tmp_path: Path, caps: list[int | None] | None = None) -> list[tuple[Digest, Path, int | None]]:
    caps = caps or [len(b) for b in BLOBS]
    return [(d, tmp_path / f"{d.hex}.incomplete", cap) for d, cap in zip(DIGESTS, caps, strict=True)]


def _route(srv: Any, **kw: Any) -> None:
    listing = ",".join(f"{d}={len(b)}" for d, b in zip(DIGESTS, BLOBS, strict=True))
    srv.route(FETCH, b"".join(BLOBS), method="POST", headers={"X-Kvreg-Objects": listing}, **kw)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_pack_is_cut_into_its_objects_each_hashed(tmp_path: Path, chunked: bool) -> None:
    with serve() as srv:
        _route(srv, chunked=chunked)
        with _client(srv.url) as c:
            moved: list[int] = []
            got = c.get_objects_to("ns", _items(tmp_path), progress_cb=moved.append)
        asked = json.loads(srv.requests("POST")[0].body)
    assert asked == {"digests": [str(d) for d in DIGESTS]}
    assert [(g.digest, g.size) for g in got] == [(d, len(b)) for d, b in zip(DIGESTS, BLOBS, strict=True)]
    for (_, path, _), data in zip(_items(tmp_path), BLOBS, strict=True):
        assert path.read_bytes() == data
    assert sum(moved) == sum(len(b) for b in BLOBS)


def test_a_pack_cut_off_returns_the_objects_finished_and_keeps_what_arrived(tmp_path: Path) -> None:
    cut = len(BLOBS[0]) + len(BLOBS[1]) + 123_456  # inside the third object
    with serve() as srv:
        srv.cut[FETCH] = [cut]
        _route(srv)
        with _client(srv.url) as c:
            got = c.get_objects_to("ns", _items(tmp_path))
    assert [g.digest for g in got] == DIGESTS[:2]
    partial = _items(tmp_path)[2][1]
    assert partial.read_bytes() == BLOBS[2][:123_456]  # written out: a ranged GET resumes from it
    assert not _items(tmp_path)[3][1].exists()


def test_an_answer_to_retry_leaves_the_pack_to_single_downloads(tmp_path: Path) -> None:
    with serve() as srv:
        srv.fail[FETCH] = [503]
        _route(srv)
        with _client(srv.url) as c:
            assert c.get_objects_to("ns", _items(tmp_path)) == []
        assert len(srv.requests("POST")) == 1  # not retried here: the pull fetches the rest one by one


def test_a_pack_that_states_more_than_the_manifest_is_refused_before_its_bytes(tmp_path: Path) -> None:
    with serve() as srv:
        _route(srv)
        with _client(srv.url) as c, pytest.raises(DigestMismatchError):
            c.get_objects_to("ns", _items(tmp_path, [len(BLOBS[0]), 0, len(BLOBS[2]) - 1, 5]))
    assert not any(path.exists() for _, path, _ in _items(tmp_path))


def test_a_body_longer_than_its_listing_is_refused(tmp_path: Path) -> None:
    listing = ",".join(f"{d}={len(b)}" for d, b in zip(DIGESTS, BLOBS, strict=True))
    for chunked in (False, True):
        with serve() as srv:
            srv.route(
                FETCH,
                b"".join(BLOBS) + b"extra",
                method="POST",
                headers={"X-Kvreg-Objects": listing},
                chunked=chunked,
            )
            with _client(srv.url) as c, pytest.raises(RemoteError):
                c.get_objects_to("ns", _items(tmp_path))
