"""The HTTP client: error mapping, retries, streamed uploads, resumed and redirected downloads.

Error mapping uses real ``httpx.Response`` objects; everything else runs against a
real HTTP server on 127.0.0.1 (``helpers.FileServer``), not the registry.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import time

import httpx
import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    EXIT_INTEGRITY,
    DigestMismatchError,
    ForbiddenError,
    InternalServerError,
    NotFoundError,
    ObjectsMissingError,
    RefConflictError,
    RemoteError,
    StoreError,
    TagImmutableError,
    UnauthenticatedError,
    UnavailableError,
    error_classes,
)
from kvreg.fileio import directio
from kvreg.remote.errors import error_from_response
from kvreg.remote.http import RegistryClient

from .helpers import serve

TOKEN = "kvreg_" + "t" * 43
NS = "/api/v1/namespaces/ns"


def client(url: str, **kw) -> RegistryClient:
    kw.setdefault("retries", 3)
    kw.setdefault("backoff", 0.001)
    kw.setdefault("timeout", 10)
    return RegistryClient(url, kw.pop("token", TOKEN), remote_name="origin", **kw)


def body(code: str, message: str = "m", **extra) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


# --- error mapping -------------------------------------------------------------------------


@pytest.mark.parametrize("code", [c for c in error_classes() if c not in ("KVREG_ERROR",)])
def test_every_known_code_maps_to_its_class(code):
    err = error_from_response(httpx.Response(400, json=body(code, "boom", hint="h", details={"a": 1})))
    assert type(err) is error_classes()[code]
    assert err.code == code
    assert err.message == "boom"
    assert err.details["a"] == 1
    assert err.details["http_status"] == 400


def test_message_hint_and_details_are_kept():
    err = error_from_response(
        httpx.Response(
            422,
            json=body("OBJECTS_MISSING", "3 objects missing", hint="push them", details={"missing": ["x"]}),
        )
    )
    assert isinstance(err, ObjectsMissingError)
    assert err.hint == "push them"
    assert err.details["missing"] == ["x"]


def test_details_that_collide_with_arguments():
    err = error_from_response(
        httpx.Response(409, json=body("REF_CONFLICT", "moved", details={"message": "x", "hint": "y"}))
    )
    assert isinstance(err, RefConflictError)
    assert err.message == "moved"
    assert err.details["message"] == "x"


def test_unknown_code_is_a_remote_error():
    err = error_from_response(httpx.Response(418, json=body("TEAPOT", "short and stout")))
    assert type(err) is RemoteError
    assert err.details["remote_code"] == "TEAPOT"
    assert err.message == "short and stout"


def test_code_from_header_when_the_body_is_not_json():
    err = error_from_response(
        httpx.Response(409, content=b"<html>", headers={"X-Kvreg-Error-Code": "TAG_IMMUTABLE"})
    )
    assert isinstance(err, TagImmutableError)
    assert "409" in err.message


@pytest.mark.parametrize(
    ("status", "cls"),
    [(401, UnauthenticatedError), (403, ForbiddenError), (404, NotFoundError), (500, InternalServerError),
     (502, UnavailableError), (400, RemoteError)],
)  # fmt: skip
def test_status_fallbacks(status, cls):
    err = error_from_response(httpx.Response(status, content=b"oops"))
    assert type(err) is cls


def test_auth_hints_name_the_command():
    err = error_from_response(httpx.Response(401, json=body("UNAUTHENTICATED")), remote_name="origin")
    assert "kvreg login origin --token" in (err.hint or "")
    err = error_from_response(httpx.Response(403, json=body("FORBIDDEN")))
    assert "write role" in (err.hint or "")
    err = error_from_response(httpx.Response(403, json=body("FORBIDDEN", hint="needs write on ns")))
    assert err.hint == "needs write on ns"


def test_integrity_codes_exit_3():
    for code in ("DIGEST_MISMATCH", "SIGNATURE_INVALID", "PROOF_INVALID", "MANIFEST_INVALID"):
        assert error_from_response(httpx.Response(422, json=body(code))).exit_code == EXIT_INTEGRITY


# --- requests against a real HTTP server ------------------------------------------------------


def test_info_whoami_and_token_header():
    with serve() as srv:
        srv.route("/api/v1/", {"kvreg": "0.1.0", "api": 1, "limits": {"max_missing_digests": 2}})
        srv.route("/api/v1/whoami", {"user": "alice", "admin": False, "roles": {"ns": "write"}})
        with client(srv.url) as c:
            assert c.limit("max_missing_digests", 1000) == 2
            assert c.limit("max_object_bytes", 7) == 7
            assert c.whoami()["user"] == "alice"
            c.info()
        assert len(srv.requests("GET", "/api/v1/")) == 2  # info is cached
        assert all(s.headers["Authorization"] == f"Bearer {TOKEN}" for s in srv.seen)
        assert all(s.headers["User-Agent"].startswith("kvreg/") for s in srv.seen)


def test_other_api_version_is_refused():
    with serve() as srv:
        srv.route("/api/v1/", {"api": 2})
        with client(srv.url) as c, pytest.raises(RemoteError, match="API version"):
            c.info()


def test_retries_then_success():
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "alice"})
        srv.fail["/api/v1/whoami"] = [503, 502, 429]
        with client(srv.url) as c:
            assert c.whoami()["user"] == "alice"
        assert len(srv.requests("GET", "/api/v1/whoami")) == 4


def test_retries_exhausted_is_unavailable():
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "alice"})
        srv.fail["/api/v1/whoami"] = [503] * 10
        with client(srv.url, retries=2) as c, pytest.raises(UnavailableError) as e:
            c.whoami()
        assert e.value.details["attempts"] == 3
        assert len(srv.requests("GET", "/api/v1/whoami")) == 3


def test_connection_refused_is_unavailable():
    with serve() as srv:
        url = srv.url
    with client(url, retries=1) as c, pytest.raises(UnavailableError, match="ConnectError"):
        c.whoami()


def test_final_errors_are_not_retried():
    with serve() as srv:
        srv.route("/api/v1/whoami", body("UNAUTHENTICATED", "who are you"), status=401)
        with client(srv.url) as c, pytest.raises(UnauthenticatedError) as e:
            c.whoami()
        assert "kvreg login origin" in (e.value.hint or "")
        assert len(srv.requests()) == 1


def test_get_ref_absent_and_namespace_unknown():
    with serve() as srv:
        srv.route(f"{NS}/refs/gone", body("REF_UNKNOWN"), status=404)
        srv.route("/api/v1/namespaces/other/refs/x", body("NAMESPACE_UNKNOWN"), status=404)
        with client(srv.url) as c:
            assert c.get_ref("ns", "gone") is None
            with pytest.raises(NotFoundError) as e:
                c.get_ref("other", "x")
            assert e.value.code == "NAMESPACE_UNKNOWN"


def test_put_ref_preconditions():
    d1, d2 = Digest.of_bytes(b"1"), Digest.of_bytes(b"2")
    with serve() as srv:
        srv.route(f"{NS}/refs/r", {"ref": "ns/r", "digest": d2, "tag": False}, method="PUT", status=201)
        with client(srv.url) as c:
            assert c.put_ref("ns", "r", d2, None) is True
            c.put_ref("ns", "r", d2, d1, tag=True)
        first, second = srv.requests("PUT")
        assert first.headers["If-None-Match"] == "*" and "If-Match" not in first.headers
        assert second.headers["If-Match"] == f'"{d1}"'
        assert json.loads(second.body) == {"digest": d2, "tag": True}


def test_retried_ref_update_that_already_happened_is_success():
    d1, d2 = Digest.of_bytes(b"1"), Digest.of_bytes(b"2")
    with serve() as srv:
        # The first PUT "succeeded" but its answer was lost (503); the retry then conflicts.
        srv.fail[f"{NS}/refs/r"] = [503]
        srv.route(
            f"{NS}/refs/r", body("REF_CONFLICT", "moved", details={"current": d2}), method="PUT", status=409
        )
        srv.route(f"{NS}/refs/r", {"ref": "ns/r", "digest": d2, "tag": False})
        with client(srv.url) as c:
            c.put_ref("ns", "r", d2, d1)
            # Without a retry a conflict is a conflict, even if the ref happens to be there.
            with pytest.raises(RefConflictError):
                c.put_ref("ns", "r", d2, d1)
            # After a retry, a ref at another digest is still a conflict.
            srv.fail[f"{NS}/refs/r"] = [503]
            with pytest.raises(RefConflictError):
                c.put_ref("ns", "r", Digest.of_bytes(b"3"), d1)


def test_missing_is_batched_by_the_server_limit():
    digests = [Digest.of_bytes(bytes([i])) for i in range(5)]
    with serve() as srv:
        srv.route("/api/v1/", {"api": 1, "limits": {"max_missing_digests": 2}})
        srv.route(f"{NS}/objects/missing", {"missing": [digests[0]]}, method="POST")
        with client(srv.url) as c:
            assert c.missing("ns", digests) == [digests[0]] * 3
        sent = [json.loads(s.body)["digests"] for s in srv.requests("POST")]
        assert sent == [digests[0:2], digests[2:4], digests[4:5]]


def test_put_object_streams_the_file_with_its_length(tmp_path):
    data = bytes(range(256)) * 9000  # > 2 MiB: several blocks
    path = tmp_path / "obj"
    path.write_bytes(data)
    d = Digest.of_bytes(data)
    progress: list[int] = []
    with serve() as srv:
        srv.route(
            f"{NS}/objects/{d}", {"digest": d, "size": len(data), "stored": True}, method="PUT", status=201
        )
        srv.fail[f"{NS}/objects/{d}"] = [502]
        with client(srv.url) as c:
            result = c.put_object("ns", d, path, len(data), upload_id="u1", progress_cb=progress.append)
            assert result.stored is True and result.size == len(data)
            c.put_object("ns", d, io.BytesIO(data), len(data))
        puts = srv.requests("PUT")
        assert len(puts) == 3  # one 502, then two successes
        assert all(p.body == data for p in puts)
        assert puts[0].headers["Content-Length"] == str(len(data))
        assert puts[0].headers["X-Kvreg-Upload"] == "u1"
        assert puts[0].headers["Content-Type"] == "application/octet-stream"
    assert sum(progress) == len(data)  # the retry's bytes were counted once
    assert any(n < 0 for n in progress)


def test_put_objects_sends_one_body_with_the_header_and_retries_it_whole(tmp_path):
    blobs = [bytes(range(256)) * 9000, b"", b"small"]  # one > 2 MiB: several sendfile pieces
    items = []
    for i, data in enumerate(blobs):
        path = tmp_path / f"obj{i}"
        path.write_bytes(data)
        items.append((Digest.of_bytes(data), path, len(data)))
    answer = {"objects": [{"digest": d, "size": n, "stored": i != 1} for i, (d, _, n) in enumerate(items)]}
    url = f"{NS}/uploads/u1/objects"
    progress: list[int] = []
    with serve() as srv:
        srv.route(url, answer, method="POST")
        srv.fail[url] = [503]
        with client(srv.url) as c:
            result = c.put_objects("ns", "u1", items, progress_cb=progress.append)
        posts = srv.requests("POST", url)
        assert len(posts) == 2 and all(p.body == b"".join(blobs) for p in posts)
        assert posts[0].headers["Content-Length"] == str(sum(map(len, blobs)))
        assert posts[0].headers["X-Kvreg-Objects"] == ",".join(f"{d}={n}" for d, _, n in items)
    expected = [(d, n, i != 1) for i, (d, _, n) in enumerate(items)]
    assert [(r.digest, r.size, r.stored) for r in result] == expected
    assert sum(progress) == sum(map(len, blobs)) and any(n < 0 for n in progress)


def test_put_objects_refuses_an_answer_that_does_not_match(tmp_path):
    path = tmp_path / "obj"
    path.write_bytes(b"abc")
    d = Digest.of_bytes(b"abc")
    other = Digest.of_bytes(b"other")
    with serve() as srv:
        srv.route(f"{NS}/uploads/u1/objects", {"objects": [{"digest": other, "stored": True}]}, method="POST")
        with client(srv.url) as c, pytest.raises(RemoteError, match="does not name"):
            c.put_objects("ns", "u1", [(d, path, 3)])
        srv.route(f"{NS}/uploads/u1/objects", body("DIGEST_MISMATCH", "no"), method="POST", status=422)
        with client(srv.url) as c, pytest.raises(DigestMismatchError):
            c.put_objects("ns", "u1", [(d, path, 3)])


def test_put_object_of_a_file_with_the_wrong_size(tmp_path):
    path = tmp_path / "obj"
    path.write_bytes(b"short")
    with serve() as srv, client(srv.url) as c, pytest.raises(StoreError, match="ended after 5 of 10 bytes"):
        c.put_object("ns", Digest.of_bytes(b"short"), path, 10)


def test_put_object_digest_mismatch_is_integrity(tmp_path):
    path = tmp_path / "obj"
    path.write_bytes(b"abc")
    d = Digest.of_bytes(b"abc")
    with serve() as srv:
        srv.route(f"{NS}/objects/{d}", body("DIGEST_MISMATCH", "no"), method="PUT", status=422)
        with client(srv.url) as c, pytest.raises(DigestMismatchError) as e:
            c.put_object("ns", d, path, 3)
        assert e.value.exit_code == EXIT_INTEGRITY


# --- downloads ----------------------------------------------------------------------------------

DATA = bytes((i * 7) % 256 for i in range(3 * 1024 * 1024 + 17))
D = Digest.of_bytes(DATA)
OBJ = f"{NS}/objects/{D}"


def test_download_whole(tmp_path):
    dest = tmp_path / "x.incomplete"
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest)
    assert got.digest == D and got.size == len(DATA) and got.resumed_from == 0
    assert dest.read_bytes() == DATA


def test_download_of_an_empty_object_keeps_the_connection(tmp_path):
    empty = Digest.of_bytes(b"")
    path = f"{NS}/objects/{empty}"
    with serve() as srv:
        srv.route(path, b"", ranges=True)
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url) as c:
            got = c.get_object_to("ns", empty, tmp_path / "empty")
            again = c.get_object_to("ns", D, tmp_path / "after")
    assert got.digest == empty and got.size == 0 and (tmp_path / "empty").read_bytes() == b""
    assert again.digest == D


def test_download_resumes_from_a_partial_file(tmp_path):
    dest = tmp_path / "x.incomplete"
    dest.write_bytes(DATA[:1000])
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest, start=1000)
        assert srv.requests("GET")[0].headers["Range"] == "bytes=1000-"
    assert got.digest == D and got.resumed_from == 1000
    assert dest.read_bytes() == DATA


def test_download_hash_covers_the_whole_file(tmp_path):
    dest = tmp_path / "x.incomplete"
    dest.write_bytes(b"\xff" * 1000)  # a damaged partial file
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest, start=1000)
    assert got.digest != D
    assert got.digest == Digest.from_hex(hashlib.sha256(b"\xff" * 1000 + DATA[1000:]).hexdigest())


def test_download_server_ignoring_range_starts_over(tmp_path):
    dest = tmp_path / "x.incomplete"
    dest.write_bytes(DATA[:5000])
    progress: list[int] = []
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        srv.ignore_range.add(OBJ)
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest, start=5000, progress_cb=progress.append)
    assert got.digest == D and dest.read_bytes() == DATA
    assert sum(progress) == len(DATA) - 5000  # counted from where the caller said it started


def test_download_complete_partial_file_answered_416(tmp_path):
    dest = tmp_path / "x.incomplete"
    dest.write_bytes(DATA)
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest, start=len(DATA))
    assert got.digest == D


def test_download_cut_in_the_middle_resumes_with_range(tmp_path):
    dest = tmp_path / "x.incomplete"
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        srv.cut[OBJ] = [1_500_000, 100_000]
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest)
        gets = srv.requests("GET")
        assert len(gets) == 3
        assert "Range" not in gets[0].headers
        assert gets[1].headers["Range"].startswith("bytes=") and gets[1].headers["Range"] != "bytes=0-"
    assert got.digest == D and dest.read_bytes() == DATA


def test_download_cut_without_retries_keeps_the_partial_file(tmp_path):
    dest = tmp_path / "x.incomplete"
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        srv.cut[OBJ] = [1_500_000]
        with client(srv.url, retries=0) as c, pytest.raises(UnavailableError):
            c.get_object_to("ns", D, dest)
    assert 0 < dest.stat().st_size <= 1_500_000
    assert DATA.startswith(dest.read_bytes())


def test_download_that_stalls_writes_what_it_holds_and_then_the_rest_after_it(tmp_path):
    """A download idle for 0.2 s writes out what it holds while its read waits on the buffer
    (so a kill loses nothing that arrived); the bytes that arrive after it must follow them."""
    dest = tmp_path / "x.incomplete"
    held = 1_000_003

    def until_written() -> None:  # the server goes on once the client wrote what it holds
        deadline = time.monotonic() + 30
        while dest.stat().st_size < held and time.monotonic() < deadline:
            time.sleep(0.02)

    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        srv.pause[OBJ] = (held, until_written)
        with client(srv.url) as c:
            got = c.get_object_to("ns", D, dest)
    assert got.digest == D
    assert dest.read_bytes() == DATA


def test_download_onto_a_full_disk_keeps_only_bytes_that_reached_the_file(tmp_path, monkeypatch):
    """The disk fills up after 1 MiB (ENOSPC on a disk thread, then on every write): the download
    fails with that error, and the partial file, which a later call resumes from, holds no byte
    that was not written (no hole where the failed buffer was)."""
    monkeypatch.setattr(directio, "_DEFAULT_POOL", directio.BufferPool(256 * 1024))
    real = os.pwrite
    written = 0

    def full_after_a_mib(fd: int, data: memoryview, at: int) -> int:
        nonlocal written
        if written >= 1 << 20:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, data, at)
        written += n
        return n

    monkeypatch.setattr(directio.os, "pwrite", full_after_a_mib)
    dest = tmp_path / "x.incomplete"
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url, retries=0) as c, pytest.raises(OSError) as caught:
            c.get_object_to("ns", D, dest)
    assert caught.value.errno == errno.ENOSPC
    kept = dest.read_bytes()
    assert 1 << 20 <= len(kept) < len(DATA)
    assert DATA.startswith(kept)


def test_download_larger_than_allowed_is_refused(tmp_path):
    dest = tmp_path / "x.incomplete"
    with serve() as srv:
        srv.route(OBJ, DATA, ranges=True)
        with client(srv.url) as c, pytest.raises(DigestMismatchError, match="more than 1000 bytes"):
            c.get_object_to("ns", D, dest, max_size=1000)


def test_download_error_is_mapped(tmp_path):
    with serve() as srv:
        srv.route(OBJ, body("OBJECT_UNKNOWN", "not here"), status=404)
        with client(srv.url) as c, pytest.raises(NotFoundError) as e:
            c.get_object_to("ns", D, tmp_path / "x")
        assert e.value.code == "OBJECT_UNKNOWN"


def test_redirect_to_storage_without_the_token(tmp_path):
    dest = tmp_path / "x.incomplete"
    dest.write_bytes(DATA[:10])
    with serve() as registry, serve() as storage:
        storage.route("/bucket/obj?sig=abc", DATA, ranges=True)
        registry.route(OBJ, b"", status=307, headers={"Location": f"{storage.url}/bucket/obj?sig=abc"})
        with client(registry.url) as c:
            got = c.get_object_to("ns", D, dest, start=10)
        assert registry.requests()[0].headers["Authorization"] == f"Bearer {TOKEN}"
        (fetched,) = storage.requests()
        assert "Authorization" not in fetched.headers
        assert fetched.headers["Range"] == "bytes=10-"
    assert got.digest == D and dest.read_bytes() == DATA


def test_list_refs_keys_and_namespaces():
    d = Digest.of_bytes(b"m")
    from kvreg.core.keys import SigningKey

    key = SigningKey.generate().public_key
    with serve() as srv:
        srv.route(
            f"{NS}/refs", {"refs": [{"name": "b", "digest": d, "tag": True}, {"name": "a", "digest": d}]}
        )
        srv.route(
            f"{NS}/keys", {"keys": [{"keyid": key.keyid, "public_key": key.to_text()}, {"public_key": "x"}]}
        )
        srv.route("/api/v1/namespaces", {"namespaces": [{"name": "zz"}, {"name": "ns"}, {"name": "../x"}]})
        with client(srv.url) as c:
            refs = c.list_refs("ns")
            assert [str(r.ref) for r in refs] == ["ns/a", "ns/b"]
            assert refs[1].tag is True and refs[0].tag is False
            assert c.list_keys("ns") == [key]
            assert c.list_namespaces() == ["ns", "zz"]
            srv.route("/api/v1/namespaces", b'[{"name": "b", "public": true}, {"name": "a"}]')
            assert c.list_namespaces() == ["a", "b"]


def test_invalid_names_never_reach_the_server():
    with serve() as srv:
        with client(srv.url) as c:
            for bad in ("../x", "a/b", "UPPER"):
                with pytest.raises(Exception, match="invalid"):
                    c.list_refs(bad)
        assert srv.requests() == []


def test_no_token_no_header():
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": None})
        with RegistryClient(srv.url) as c:
            c.whoami()
        assert "Authorization" not in srv.requests()[0].headers
