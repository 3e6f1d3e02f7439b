"""How a pull plans its downloads (``kvreg.remote.staging.fetch_units``) and reads a fetch pack's
listing (``kvreg.remote.api.objects.parse_fetch_listing``). The downloads themselves run against
the real registry in ``tests/integration`` (test_push_pull, test_resume, test_refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, RemoteError
from kvreg.remote.api.objects import parse_fetch_listing
from kvreg.remote.session import Download, ProgressCallback
from kvreg.remote.staging import fetch_units

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
