"""Pull: verification before download, staging, resume, and no trace after tampering.

The "registry" here is ``helpers.FileServer`` answering the GET endpoints with
static bytes (as the real registry would for a stored artifact); tampering is
done by serving other bytes. Push needs the real registry and is tested with it.
"""

from __future__ import annotations

import threading

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    EXIT_INTEGRITY,
    DigestMismatchError,
    ObjectNotFoundError,
    RefNotFoundError,
    SignatureError,
    StoreError,
    TagImmutableError,
    UnavailableError,
    UntrustedKeyError,
)
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.remote.http import RegistryClient
from kvreg.remote.pulling import pull
from kvreg.remote.pushing import push
from kvreg.remote.staging import staging_dir
from kvreg.store.artifacts import open_artifact
from kvreg.store.home import Home

from .helpers import FileServer, build_artifact, publish, serve, store_built

REF = RefName("ns", "a")


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total_bytes = self.total_objects = self.bytes = self.objects = 0
        self.started = 0

    def start(self, total_bytes: int, total_objects: int) -> None:
        self.started += 1
        self.total_bytes, self.total_objects = total_bytes, total_objects

    def advance(self, n: int) -> None:
        with self.lock:
            self.bytes += n

    def object_done(self) -> None:
        with self.lock:
            self.objects += 1


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def home(tmp_path, key) -> Home:
    h = Home(tmp_path / "home").ensure()
    save_trust_policy(TrustPolicy({"*": [key.public_key]}), h.trust_path)
    return h


@pytest.fixture
def built(key):
    return build_artifact(key, token_count=10, block_size=4, chunk_bytes=200_000)


@pytest.fixture
def registry(built, key):
    with serve() as srv:
        publish(srv, built, REF, key=key)
        yield srv


def client(srv: FileServer, **kw) -> RegistryClient:
    kw.setdefault("retries", 2)
    kw.setdefault("backoff", 0.001)
    return RegistryClient(srv.url, remote_name="origin", **kw)


def object_gets(srv: FileServer) -> list[str]:
    return [s.path.rsplit("/", 1)[1] for s in srv.requests("GET", "/api/v1/namespaces/ns/objects/")]


def store_files(home: Home) -> list[str]:
    return sorted(str(p.relative_to(home.root)) for p in home.root.rglob("*") if p.is_file())


def test_pull_verifies_stages_and_sets_the_ref(home, built, registry):
    progress = Recorder()
    with client(registry) as c:
        report = pull(home, c, REF, jobs=3, progress=progress)
    assert report.digest == built.digest
    assert report.local_ref == "ns/a" and report.ref_changed and report.old is None
    assert report.objects_total == len(built.objects) == report.objects_downloaded
    assert report.objects_local == 0 and report.objects_staged == 0
    assert report.bytes_downloaded == sum(len(b) for b in built.objects.values())
    assert report.signer is not None and report.tag is False
    artifact = open_artifact(home, "ns/a")
    assert artifact.digest == built.digest
    for d, data in built.objects.items():
        assert home.objects.read(d) == data
    assert home.envelopes.get(built.digest) == built.envelope_bytes
    assert not staging_dir(home, built.digest).exists()
    assert progress.started == 1 and progress.total_objects == len(built.objects)
    assert progress.objects == len(built.objects)
    assert progress.bytes == report.bytes_downloaded


def test_pull_again_downloads_nothing(home, built, registry):
    with client(registry) as c:
        pull(home, c, REF)
        again = pull(home, c, REF)
    assert again.objects_downloaded == 0 and again.objects_local == len(built.objects)
    assert again.ref_changed is False and again.old == built.digest
    assert len(object_gets(registry)) == len(built.objects)


def test_objects_already_local_are_not_fetched(home, built, registry):
    first = built.manifest.chunks[0].digest
    home.objects.put_bytes(built.objects[first])
    with client(registry) as c:
        report = pull(home, c, REF)
    assert report.objects_local == 1
    assert first not in object_gets(registry)


def test_pull_under_another_name(home, built, registry):
    with client(registry) as c:
        report = pull(home, c, REF, local_ref=RefName("mine", "copy"))
    assert report.local_ref == "mine/copy"
    assert home.refs.get(RefName("mine", "copy")) == built.digest
    assert home.refs.entry(REF) is None


def test_remote_tag_becomes_a_local_tag(home, built, key):
    with serve() as srv:
        publish(srv, built, REF, key=key, tag=True)
        with client(srv) as c:
            report = pull(home, c, REF)
    assert report.tag is True
    entry = home.refs.entry(REF)
    assert entry is not None and entry.tag and entry.digest == built.digest


def test_unknown_ref(home, registry):
    registry.route(
        "/api/v1/namespaces/ns/refs/zz", {"error": {"code": "REF_UNKNOWN", "message": "no"}}, status=404
    )
    with client(registry) as c, pytest.raises(RefNotFoundError) as e:
        pull(home, c, RefName("ns", "zz"))
    assert "kvreg ls-remote origin ns" in (e.value.hint or "")


def test_tampered_object_leaves_no_trace(home, built, registry):
    before = store_files(home)
    victim = built.manifest.chunks[1].digest
    data = bytearray(built.objects[victim])
    data[len(data) // 2] ^= 1
    registry.route(f"/api/v1/namespaces/ns/objects/{victim}", bytes(data), ranges=True)
    with client(registry) as c, pytest.raises(DigestMismatchError) as e:
        pull(home, c, REF, jobs=4)
    assert e.value.exit_code == EXIT_INTEGRITY
    assert store_files(home) == before
    assert not staging_dir(home, built.digest).exists()
    assert home.refs.entry(REF) is None
    assert not any(home.objects.has(d) for d in built.objects)


def test_oversized_object_is_refused(home, built, registry):
    victim = built.manifest.chunks[0].digest
    registry.route(f"/api/v1/namespaces/ns/objects/{victim}", built.objects[victim] + b"x", ranges=True)
    with client(registry) as c, pytest.raises(DigestMismatchError, match="more than"):
        pull(home, c, REF)
    assert not staging_dir(home, built.digest).exists()


def test_objects_of_unstated_size_are_capped_by_the_registry_limit(home, built, registry):
    registry.route("/api/v1/", {"api": 1, "limits": {"max_object_bytes": 100}})  # the witness is 128 bytes
    with client(registry) as c, pytest.raises(DigestMismatchError, match="more than 100 bytes"):
        pull(home, c, REF)


def test_untrusted_signer_is_named_and_nothing_is_downloaded(home, built, registry):
    other = SigningKey.generate()
    save_trust_policy(TrustPolicy({"*": [other.public_key]}), home.trust_path)
    with client(registry) as c, pytest.raises(UntrustedKeyError) as e:
        pull(home, c, REF)
    assert e.value.exit_code == EXIT_INTEGRITY
    assert e.value.details["keyid"] in e.value.message
    assert "kvreg trust add ns" in (e.value.hint or "")
    assert object_gets(registry) == []
    assert not staging_dir(home, built.digest).exists()


def test_unknown_signer_without_registry_keys(home, built, registry):
    save_trust_policy(TrustPolicy({"*": [SigningKey.generate().public_key]}), home.trust_path)
    registry.route("/api/v1/namespaces/ns/keys", {"keys": []})
    with client(registry) as c, pytest.raises(SignatureError):
        pull(home, c, REF)
    assert object_gets(registry) == []


def test_envelope_of_another_manifest_is_refused(home, built, key, registry):
    other = build_artifact(key, seed=5)
    registry.route(f"/api/v1/namespaces/ns/envelopes/{built.digest}", other.envelope_bytes)
    with client(registry) as c, pytest.raises(DigestMismatchError):
        pull(home, c, REF)
    assert object_gets(registry) == []


def test_local_tag_elsewhere_is_refused_before_downloading(home, built, registry):
    home.refs.tag(REF, Digest.of_bytes(b"other"))
    with client(registry) as c, pytest.raises(TagImmutableError):
        pull(home, c, REF)
    assert object_gets(registry) == []


def test_interrupted_pull_resumes(home, built, registry):
    chunks = [c.digest for c in built.manifest.chunks]
    cut_path = f"/api/v1/namespaces/ns/objects/{chunks[1]}"
    registry.cut[cut_path] = [70_000]
    with client(registry, retries=0) as c, pytest.raises(UnavailableError):
        pull(home, c, REF, jobs=1)
    folder = staging_dir(home, built.digest)
    assert (folder / chunks[0].hex).is_file()
    partial = folder / f"{chunks[1].hex}.incomplete"
    assert 0 < partial.stat().st_size <= 70_000
    assert home.refs.entry(REF) is None
    assert not any(home.objects.has(d) for d in built.objects)
    kept = partial.stat().st_size

    with client(registry) as c:
        report = pull(home, c, REF, jobs=1)
    assert report.objects_staged == 1
    assert report.objects_downloaded == len(built.objects) - 1
    assert object_gets(registry).count(chunks[0]) == 1  # staged: not fetched again
    resumed = [s for s in registry.requests("GET", cut_path)][-1]
    assert resumed.headers["Range"] == f"bytes={kept}-"
    assert open_artifact(home, "ns/a").digest == built.digest
    assert not folder.exists()


def test_a_damaged_partial_file_is_caught_and_discarded(home, built, registry):
    chunk = built.manifest.chunks[0].digest
    folder = staging_dir(home, built.digest)
    folder.mkdir(parents=True)
    (folder / f"{chunk.hex}.incomplete").write_bytes(b"\x00" * 1000)
    with client(registry) as c, pytest.raises(DigestMismatchError):
        pull(home, c, REF)
    assert not folder.exists()
    with client(registry) as c:  # the next pull starts clean and succeeds
        pull(home, c, REF)


def test_every_object_is_fsynced_before_it_gets_its_staged_name(home, built, registry, monkeypatch):
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    with client(registry) as c:
        pull(home, c, REF, jobs=3)
    folder = staging_dir(home, built.digest)
    for d in built.objects:  # under its .incomplete name: the rename to <hex> comes after
        assert synced.count(str(folder / f"{d.hex}.incomplete")) == 1, d
    assert open_artifact(home, "ns/a").digest == built.digest


def test_a_whole_object_left_unsettled_is_hashed_not_downloaded(home, built, registry):
    """A pull killed after a download but before Staging.settle leaves the whole object as
    .incomplete: the next pull hashes it and keeps it, with no request."""
    chunk = built.manifest.chunks[0].digest
    folder = staging_dir(home, built.digest)
    folder.mkdir(parents=True)
    (folder / f"{chunk.hex}.incomplete").write_bytes(built.objects[chunk])
    with client(registry) as c:
        report = pull(home, c, REF)
    assert report.objects_staged == 1
    assert report.objects_downloaded == len(built.objects) - 1
    assert chunk not in object_gets(registry)
    assert home.objects.read(chunk) == built.objects[chunk]


def test_a_whole_size_partial_file_with_other_bytes_is_downloaded_again(home, built, registry):
    chunk = built.manifest.chunks[0].digest
    folder = staging_dir(home, built.digest)
    folder.mkdir(parents=True)
    (folder / f"{chunk.hex}.incomplete").write_bytes(b"\x00" * len(built.objects[chunk]))
    with client(registry) as c:
        report = pull(home, c, REF)
    assert report.objects_staged == 0 and report.objects_downloaded == len(built.objects)
    fetched = registry.requests("GET", f"/api/v1/namespaces/ns/objects/{chunk}")
    assert len(fetched) == 1 and "Range" not in fetched[0].headers
    assert home.objects.read(chunk) == built.objects[chunk]


def test_a_damaged_staged_object_is_caught_on_install(home, built, registry):
    chunk = built.manifest.chunks[0].digest
    folder = staging_dir(home, built.digest)
    folder.mkdir(parents=True)
    (folder / chunk.hex).write_bytes(b"\x00" * len(built.objects[chunk]))
    with client(registry) as c, pytest.raises(DigestMismatchError):
        pull(home, c, REF)
    assert not folder.exists()
    assert not home.objects.has(chunk)


def test_concurrent_pull_of_the_same_manifest_is_refused(home, built, registry):
    from kvreg.remote.staging import Staging

    with Staging(home, built.digest), client(registry) as c, pytest.raises(StoreError, match="another pull"):
        pull(home, c, REF)


def test_jobs_must_be_sane(home, registry):
    with client(registry) as c, pytest.raises(Exception, match="jobs"):
        pull(home, c, REF, jobs=0)


# --- push: what is checked before the registry is contacted -----------------------------------


def test_push_refuses_an_incomplete_local_artifact(home, built, key):
    store_built(home, built, REF)
    victim = built.manifest.chunks[0].digest
    home.objects.remove(victim)
    with serve() as srv, client(srv) as c:
        with pytest.raises(ObjectNotFoundError, match="incomplete"):
            push(home, c, REF)
        assert srv.requests() == []


def test_push_refuses_an_untrusted_local_artifact(home, built):
    store_built(home, built, REF)
    save_trust_policy(TrustPolicy(), home.trust_path)
    with serve() as srv, client(srv) as c:
        with pytest.raises(SignatureError):
            push(home, c, REF)
        assert srv.requests() == []


def test_push_of_a_missing_ref(home):
    with serve() as srv, client(srv) as c, pytest.raises(RefNotFoundError):
        push(home, c, REF)
