"""Legal holds, retention and graft receipts against a real ``kvreg serve``, on both backends.

- a held artifact survives GC (grace 0) and delete attempts, which answer
  ``403 LEGAL_HOLD`` and are logged; lifting is logged; after it, deleting works and
  leaves a tombstone entry, and GC frees the objects;
- retention deletes exactly the envelopes no rule keeps (never a referenced or held
  one), each with a tombstone, and GC then frees their objects;
- graft receipts are stored, listed, and refused when the signature is bad, the
  digest unknown or the caller anonymous; ``kvreg graft --receipt`` and
  ``receipts.always`` send them;
- every call that changes state appends exactly one entry; refused attempts on held
  things one each; reads and no-ops none.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.helpers import flip_bit, kvreg, object_path
from kvreg.core.canonical import canonical_json
from kvreg.core.digest import Digest
from kvreg.core.envelope import sign_envelope
from kvreg.core.keys import SigningKey
from kvreg.core.receipt import RECEIPT_PAYLOAD_TYPE, Receipt, format_time

from .http_helpers import envelope_bytes, error_code, upload_objects
from .registry_server import Registry
from .test_push_pull import _pusher


def log_size(registry: Registry) -> int:
    with registry.admin() as c:
        return int(c.get("/log/entries", params={"start": 0, "end": 0}).json()["size"])


def log_entries(registry: Registry, start: int) -> list[dict[str, Any]]:
    with registry.admin() as c:
        doc = c.get("/log/entries", params={"start": start}).json()
    return [json.loads(base64.b64decode(e["entry"])) for e in doc["entries"]]


@contextmanager
def logs(registry: Registry, expected: int | None, *types: str):  # type: ignore[no-untyped-def]
    """The block appends exactly ``expected`` entries (of ``types``, in order, if given);
    ``expected`` None: among the block's entries, each of ``types`` exactly once."""
    before = log_size(registry)
    yield
    new = [e["type"] for e in log_entries(registry, before)]
    if expected is None:
        assert all(new.count(t) == 1 for t in types), new
        return
    assert len(new) == expected, new
    if types:
        assert new == list(types)


def store(c: httpx.Client, ns: str, depositor: dict[str, Any], name: str, ref: str | None = None) -> str:
    """Upload artifact ``name`` of the depositor into ``ns`` by hand; its manifest digest."""
    m = depositor["manifests"][name]
    upload_objects(c, ns, depositor["home"], m)
    r = c.put(f"/namespaces/{ns}/envelopes/{m.digest}", content=envelope_bytes(depositor["home"], m))
    assert r.status_code in (200, 201), r.text
    if ref is not None:
        r = c.put(
            f"/namespaces/{ns}/refs/{ref}", json={"digest": str(m.digest)}, headers={"If-None-Match": "*"}
        )
        assert r.status_code == 201, r.text
    return str(m.digest)


def setup(registry: Registry, depositor: dict[str, Any]) -> tuple[str, str, str, str]:
    """A namespace with the depositor's key; tokens of a writer, a namespace admin and a reader."""
    ns = registry.namespace()
    registry.register_key(ns, depositor["public_key"])
    return ns, registry.user({ns: "write"}), registry.user({ns: "admin"}), registry.user({ns: "read"})


def test_a_held_artifact_survives_gc_and_deletes_until_the_hold_is_lifted(
    registry: Registry, depositor: dict[str, Any]
) -> None:
    ns, writer, ns_admin, reader = setup(registry, depositor)
    m = depositor["manifests"]["p07"]
    with registry.http(writer) as w:
        digest = store(w, ns, depositor, "p07", ref="p07")
        other = store(w, ns, depositor, "other")

    with registry.http(ns_admin) as a, registry.http(writer) as w, registry.http(reader) as rd:
        # Only a namespace admin places, lists and lifts holds.
        r = w.post(f"/namespaces/{ns}/holds", json={"ref": "p07", "reason": "x"})
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
        assert rd.get(f"/namespaces/{ns}/holds").status_code == 403
        r = a.post(f"/namespaces/{ns}/holds", json={"ref": "p07", "reason": ""})
        assert r.status_code == 400 and error_code(r) == "REQUEST_INVALID"
        r = a.post(f"/namespaces/{ns}/holds", json={"ref": "nope", "reason": "x"})
        assert r.status_code == 404 and error_code(r) == "REF_UNKNOWN"
        with logs(registry, 1, "hold.placed"):
            r = a.post(f"/namespaces/{ns}/holds", json={"ref": "p07", "reason": "matter 42"})
        assert r.status_code == 201, r.text
        hold = r.json()
        assert hold["active"] and hold["digest"] == digest and hold["ref"] == "p07"
        assert hold["log_index"] == log_size(registry) - 1
        with logs(registry, 1, "hold.placed"):
            ns_hold = a.post(f"/namespaces/{ns}/holds", json={"ref": None, "reason": "litigation"}).json()
        with logs(registry, 0):
            listed = a.get(f"/namespaces/{ns}/holds", params={"active": True}).json()["holds"]
            assert [h["id"] for h in listed] == [hold["id"], ns_hold["id"]]
            assert a.get(f"/namespaces/{ns}/holds/{hold['id']}").json()["reason"] == "matter 42"

        # Every attempt is refused with 403 LEGAL_HOLD, and logged once.
        with logs(registry, 1, "ref.move.refused"):
            r = w.put(
                f"/namespaces/{ns}/refs/p07", json={"digest": other}, headers={"If-Match": f'"{digest}"'}
            )
        assert r.status_code == 403 and error_code(r) == "LEGAL_HOLD"
        assert r.json()["error"]["details"]["holds"] == [hold["id"]]
        with logs(registry, 1, "ref.delete.refused"):
            r = a.delete(f"/namespaces/{ns}/refs/p07", headers={"If-Match": f'"{digest}"'})
        assert r.status_code == 403 and error_code(r) == "LEGAL_HOLD"
        for target in (digest, other):
            with logs(registry, 1, "envelope.delete.refused"):
                r = a.delete(f"/namespaces/{ns}/envelopes/{target}")
            assert r.status_code == 403 and error_code(r) == "LEGAL_HOLD", r.text
            assert "legal hold" in r.json()["error"]["message"]
        refused = log_entries(registry, log_size(registry) - 1)[0]
        assert refused["actor"] and refused["subjects"] == [other]
        assert refused["details"]["holds"] == [ns_hold["id"]]
        # A writer lacks the role to delete: a plain 403, not an attempt on the hold, not logged.
        with logs(registry, 0):
            r = w.delete(f"/namespaces/{ns}/envelopes/{other}")
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN"

    # GC with no grace period: everything the holds reach stays.
    with registry.admin() as admin:
        report = admin.post("/gc", json={"grace_seconds": 0}).json()
        for d in [digest, other, *m.object_digests()]:
            assert admin.head(f"/namespaces/{ns}/objects/{d}").status_code == 200, (d, report)
        assert admin.get(f"/namespaces/{ns}/envelopes/{other}").status_code == 200

    with registry.http(ns_admin) as a:
        with logs(registry, 1, "hold.lifted"):
            r = a.delete(f"/namespaces/{ns}/holds/{ns_hold['id']}", params={"reason": "settled"})
        assert r.status_code == 200 and not r.json()["active"] and r.json()["lift_reason"] == "settled"
        with logs(registry, 0):  # lifting again changes nothing
            assert a.delete(f"/namespaces/{ns}/holds/{ns_hold['id']}").status_code == 200
        assert error_code(a.delete(f"/namespaces/{ns}/holds/999999")) == "HOLD_UNKNOWN"
        # The ref hold is still there: the ref and its envelope stay protected.
        assert error_code(a.delete(f"/namespaces/{ns}/refs/p07", headers={"If-Match": f'"{digest}"'})) == (
            "LEGAL_HOLD"
        )
        with logs(registry, 1, "envelope.deleted"):
            assert (
                a.delete(f"/namespaces/{ns}/envelopes/{other}", params={"reason": "dup"}).status_code == 204
            )
        with logs(registry, 1, "hold.lifted"):
            assert a.delete(f"/namespaces/{ns}/holds/{hold['id']}").status_code == 200
        with logs(registry, 1, "ref.deleted"):
            assert (
                a.delete(f"/namespaces/{ns}/refs/p07", headers={"If-Match": f'"{digest}"'}).status_code == 204
            )
        with logs(registry, 1, "envelope.deleted"):
            assert a.delete(f"/namespaces/{ns}/envelopes/{digest}").status_code == 204
    tomb = log_entries(registry, log_size(registry) - 1)[0]
    assert tomb["subjects"] == [digest] and tomb["details"] == {"reason": "request"}
    assert tomb["old"]["digest"] == digest and tomb["old"]["title"] == "p07"
    assert tomb["old"]["stored_log_index"] is not None and tomb["actor"]
    lifted = [e for e in log_entries(registry, 0) if e["type"] == "hold.lifted" and e["namespace"] == ns]
    assert [e["details"]["reason"] for e in lifted] == ["settled", ""]
    with registry.admin() as admin:
        admin.post("/gc", json={"grace_seconds": 0})
        for d in m.object_digests():
            assert admin.head(f"/namespaces/{ns}/objects/{d}").status_code == 404


def test_push_to_a_held_ref_is_refused_clearly(
    registry: Registry, depositor: dict[str, Any], make_home
) -> None:
    ns, writer, ns_admin, _reader = setup(registry, depositor)
    home = _pusher(depositor, make_home(registry, writer))
    kvreg(home, "push", "origin", "src/p07", "--as", f"{ns}/p07")
    with registry.http(ns_admin) as a:
        hold = a.post(f"/namespaces/{ns}/holds", json={"ref": "p07", "reason": "frozen"}).json()
    with logs(registry, None, "ref.move.refused"):
        run = kvreg(home, "--json", "push", "origin", "src/p07x", "--as", f"{ns}/p07", expect=1)
    err = run.json["error"]
    assert err["code"] == "LEGAL_HOLD" and err["details"]["holds"] == [hold["id"]]
    assert "legal hold" in err["message"] and "lift" in err["hint"]
    with registry.http(writer) as w:
        assert w.get(f"/namespaces/{ns}/refs/p07").json()["digest"] == str(
            depositor["manifests"]["p07"].digest
        )


def test_retention_deletes_exactly_the_unkept_envelopes_and_gc_frees_them(
    registry: Registry, depositor: dict[str, Any]
) -> None:
    ns, writer, ns_admin, reader = setup(registry, depositor)
    manifests = depositor["manifests"]
    with registry.http(writer) as w:
        oldest = store(w, ns, depositor, "other", ref="pinned")  # the oldest, but a ref points at it
        middle = store(w, ns, depositor, "p07")
        newest = store(w, ns, depositor, "p07x")
    with registry.http(writer) as w, registry.http(ns_admin) as a, registry.http(reader) as rd:
        r = w.put(f"/namespaces/{ns}/retention", json={"keep_versions": 1})
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
        r = a.put(f"/namespaces/{ns}/retention", json={})
        assert r.status_code == 400 and error_code(r) == "REQUEST_INVALID"
        r = a.put(f"/namespaces/{ns}/retention", json={"keep_versions": 0})
        assert r.status_code == 400
        with logs(registry, 1, "retention.set"):
            r = a.put(f"/namespaces/{ns}/retention", json={"keep_versions": 1, "keep_days": None})
        assert r.status_code == 200 and r.json()["keep_versions"] == 1 and r.json()["log_index"] is not None
        with logs(registry, 0):  # the same policy again
            assert a.put(f"/namespaces/{ns}/retention", json={"keep_versions": 1}).json()["log_index"] is None
            assert rd.get(f"/namespaces/{ns}/retention").json()["keep_versions"] == 1
        hold = a.post(f"/namespaces/{ns}/holds", json={"reason": "audit"}).json()

    with registry.admin() as admin:
        dry = admin.post("/gc", json={"grace_seconds": 0, "dry_run": True}).json()
        assert dry["retention_deleted"] == 0 and dry["retention_held"] == 1
        with logs(registry, 1, "gc.run"):
            report = admin.post("/gc", json={"grace_seconds": 0}).json()
        assert report["retention_deleted"] == 0 and report["retention_held"] == 1
        gc_entry = log_entries(registry, log_size(registry) - 1)[0]
        assert gc_entry["details"]["retention_held_digests"] == [middle]
        assert admin.get(f"/namespaces/{ns}/envelopes/{middle}").status_code == 200
    with registry.http(ns_admin) as a:
        assert a.delete(f"/namespaces/{ns}/holds/{hold['id']}").status_code == 200
    with registry.admin() as admin:
        dry = admin.post("/gc", json={"grace_seconds": 0, "dry_run": True}).json()
        assert dry["retention_deleted"] == 1
        assert admin.get(f"/namespaces/{ns}/envelopes/{middle}").status_code == 200, (
            "a dry run deletes nothing"
        )
        with logs(registry, 2, "envelope.deleted", "gc.run"):
            report = admin.post("/gc", json={"grace_seconds": 0}).json()
        # Its objects leave the namespace (other tests' namespaces may still hold the same bytes).
        assert report["retention_deleted"] == 1 and report["links_removed"] >= 1
        for kept in (oldest, newest):
            assert admin.get(f"/namespaces/{ns}/envelopes/{kept}").status_code == 200
        assert admin.get(f"/namespaces/{ns}/envelopes/{middle}").status_code == 404
        # Its own objects are gone from the namespace; those it shared with the kept envelopes stay.
        kept_objects = {str(d) for n in ("other", "p07x") for d in manifests[n].object_digests()}
        own = {str(d) for d in manifests["p07"].object_digests()} - kept_objects
        assert own, "p07 has objects p07x does not share (its tokens, text, witness)"
        for d in own | {middle}:
            assert admin.head(f"/namespaces/{ns}/objects/{d}").status_code == 404
        for d in kept_objects:
            assert admin.head(f"/namespaces/{ns}/objects/{d}").status_code == 200
    with registry.http(ns_admin) as a, logs(registry, 1, "retention.cleared"):
        assert a.delete(f"/namespaces/{ns}/retention").status_code == 204
    with registry.http(ns_admin) as a, logs(registry, 0):
        assert a.delete(f"/namespaces/{ns}/retention").status_code == 204
        assert a.get(f"/namespaces/{ns}/retention").json()["keep_versions"] is None


HOST = {
    "config_fingerprint": str(Digest.of_bytes(b"config")),
    "model_fingerprint": str(Digest.of_bytes(b"model")),
    "tokenizer_fingerprint": str(Digest.of_bytes(b"tokenizer")),
    "hostname": "worker-3",
}


def _receipt_doc(key: SigningKey, ns: str, digest: str, **over: Any) -> dict[str, Any]:
    return {
        "schema": "kvreg.receipt/v1",
        "artifact": {"namespace": ns, "ref": "p07", "digest": digest},
        "host": HOST,
        "witness": "pass",
        "check": {"byte_exact": True, "steps": 4},
        "time": format_time(dt.datetime.now(dt.UTC)),
        "signer": key.public_key.to_text(),
        **over,
    }


def _receipt(key: SigningKey, ns: str, digest: str, **over: Any) -> bytes:
    return Receipt.from_doc(_receipt_doc(key, ns, digest, **over)).sign(key).to_json_bytes()


def test_receipts_are_stored_listed_and_refused(registry: Registry, depositor: dict[str, Any]) -> None:
    from kvreg.remote.http import RegistryClient
    from kvreg.remote.receipts import build_receipt, send_receipt

    ns, writer, _ns_admin, reader = setup(registry, depositor)
    with registry.http(writer) as w:
        digest = store(w, ns, depositor, "p07", ref="p07")
    host = SigningKey.generate()
    body = _receipt(host, ns, digest)
    with registry.http(reader) as rd:
        with logs(registry, 1, "graft.receipt"):
            r = rd.post(f"/namespaces/{ns}/receipts", content=body)
        assert r.status_code == 201, r.text
        first = r.json()
        with logs(registry, 0):
            r = rd.post(f"/namespaces/{ns}/receipts", content=body)
        assert r.status_code == 200 and r.json()["id"] == first["id"] and r.json()["created"] is False

        # Refused: nothing stored, nothing logged.
        with logs(registry, 0):
            forged = json.loads(body)
            forged["signatures"] = json.loads(_receipt(SigningKey.generate(), ns, digest))["signatures"]
            r = rd.post(f"/namespaces/{ns}/receipts", content=json.dumps(forged))
            assert r.status_code == 422 and error_code(r) == "SIGNATURE_INVALID"
            r = rd.post(f"/namespaces/{ns}/receipts", content=_receipt(host, ns, str(Digest.of_bytes(b"?"))))
            assert r.status_code == 422 and error_code(r) == "MANIFEST_UNKNOWN"
            bad = canonical_json(_receipt_doc(host, ns, digest, witness="probably"))
            env = sign_envelope(bad, host, payload_type=RECEIPT_PAYLOAD_TYPE).to_json_bytes()
            r = rd.post(f"/namespaces/{ns}/receipts", content=env)
            assert r.status_code == 422 and error_code(r) == "RECEIPT_INVALID"
            assert "witness" in r.json()["error"]["message"]
        with logs(registry, 0), registry.http() as anonymous:
            assert anonymous.post(f"/namespaces/{ns}/receipts", content=body).status_code == 401
        stranger = registry.user()
        with logs(registry, 0), registry.http(stranger) as s:
            r = s.post(f"/namespaces/{ns}/receipts", content=body)
            assert r.status_code == 404 and error_code(r) == "NAMESPACE_UNKNOWN"

    # The client module sends the same way, and lists where and when the artifact was grafted.
    key = SigningKey.generate()
    with RegistryClient(registry.url, reader) as client:
        receipt = build_receipt(
            namespace=ns,
            ref="p07",
            digest=digest,
            host=HOST,
            witness="skipped",
            check=None,
            graft={"graft_tokens": 64, "prompt_tokens": 70, "decoded_tokens": 4, "whole": True},
            key=key,
        )
        with logs(registry, 1, "graft.receipt"):
            sent = send_receipt(client, receipt, key)
        assert sent.created and sent.log_index == log_size(registry) - 1
        listed = client.list_receipts(ns, digest=digest)
    assert listed["total"] == 2
    newest, older = listed["receipts"]
    assert newest["id"] == sent.id and newest["witness"] == "skipped" and newest["check"] is None
    assert newest["graft"]["decoded_tokens"] == 4 and newest["submitted_by"]
    assert older["id"] == first["id"] and older["host"]["hostname"] == "worker-3"
    assert (
        older["check"] == {"byte_exact": True, "steps": 4}
        and older["signer_key"] == host.public_key.to_text()
    )
    assert older["signer_registered"] is False and older["log_index"] == first["log_index"]
    assert older["envelope"] == json.loads(body)
    entry = log_entries(registry, first["log_index"])[0]
    assert entry["type"] == "graft.receipt" and entry["subjects"] == [digest]
    assert entry["new"]["receipt"] == first["receipt_digest"] and entry["new"]["time"] == older["time"]
    with registry.http(reader) as rd:
        assert rd.get(f"/namespaces/{ns}/receipts/{first['id']}").json()["digest"] == digest
        assert error_code(rd.get(f"/namespaces/{ns}/receipts/999999")) == "RECEIPT_UNKNOWN"
        assert (
            rd.get(f"/namespaces/{ns}/receipts", params={"digest": str(Digest.of_bytes(b"x"))}).json()[
                "total"
            ]
            == 0
        )


@pytest.mark.slow
def test_graft_sends_receipts(registry: Registry, depositor: dict[str, Any], make_home, llama: Path) -> None:
    ns, writer, _ns_admin, reader = setup(registry, depositor)
    pusher = _pusher(depositor, make_home(registry, writer))
    kvreg(pusher, "push", "origin", "src/p07", "--as", f"{ns}/p07")
    dst = make_home(registry, reader, trust={ns: depositor["public_key"]})
    kvreg(dst, "pull", "origin", f"{ns}/p07")
    kvreg(dst, "keys", "generate")
    graft = ["graft", f"{ns}/p07", "--model", str(llama), "--max-new-tokens", "4", "--json"]

    # No key, no remote, a bad combination: refused before the model loads.
    bare = make_home(registry, reader, trust={ns: depositor["public_key"]})
    kvreg(bare, "pull", "origin", f"{ns}/p07")
    assert kvreg(bare, *graft, "--receipt", "origin", expect=1).json["error"]["code"] == "KEY_INVALID"
    assert kvreg(dst, *graft, "--receipt", "nowhere", expect=1).json["error"]["code"] == "NOT_FOUND"
    assert kvreg(dst, *graft, "--receipt", "origin", "--no-receipt", expect=2).rc == 2

    out = kvreg(dst, *graft, "--receipt", "origin", "--check").json
    assert out["check"]["byte_exact"] is True
    sent = out["receipt"]
    assert sent["sent"] is True and sent["created"] is True and sent["remote"] == "origin"
    with registry.http(reader) as rd:
        listed = rd.get(f"/namespaces/{ns}/receipts", params={"digest": out["manifest_digest"]}).json()
    (receipt,) = listed["receipts"]
    manifest = depositor["manifests"]["p07"]
    assert receipt["id"] == sent["id"] and receipt["witness"] == "pass" and receipt["ref"] == "p07"
    assert receipt["check"]["byte_exact"] is True and receipt["check"]["steps"] == out["check"]["steps"]
    assert receipt["host"]["config_fingerprint"] == str(manifest.config.fingerprint)
    assert receipt["host"]["model_fingerprint"] == str(manifest.model.fingerprint)
    assert receipt["graft"]["decoded_tokens"] == 4 and receipt["graft"]["whole"] is True
    local_key = kvreg(dst, "keys", "export").out.strip()
    assert receipt["signer_key"] == local_key

    # receipts.always: sent without the option, and --no-receipt overrides it.
    config = dst / "config.json"
    doc = json.loads(config.read_text())
    doc["receipts"] = {"always": "origin"}
    config.write_text(json.dumps(doc))
    out = kvreg(dst, *graft, "--no-probe").json
    assert out["receipt"]["sent"] is True
    assert "receipt" not in kvreg(dst, *graft, "--no-receipt").json
    with registry.http(reader) as rd:
        listed = rd.get(f"/namespaces/{ns}/receipts", params={"digest": out["manifest_digest"]}).json()
    assert [r["witness"] for r in listed["receipts"]] == ["skipped", "pass"]

    # receipts.always skips artifacts the remote does not have (namespace "src" is not there).
    pconfig = pusher / "config.json"
    pdoc = json.loads(pconfig.read_text())
    pdoc["receipts"] = {"always": "origin"}
    pconfig.write_text(json.dumps(pdoc))
    out = kvreg(pusher, "graft", "src/p07", "--model", str(llama), "--max-new-tokens", "2", "--json").json
    assert out["receipt"]["sent"] is False and "NAMESPACE_UNKNOWN" in out["receipt"]["skipped"]

    # A receipt that should go and cannot: the graft's result is printed, and the command fails.
    kvreg(dst, "login", "origin", "--token", registry.user())
    run = kvreg(dst, *graft, "--receipt", "origin", expect=1)
    assert run.json["output_text"] and run.json["receipt"]["sent"] is False
    assert run.json["error"]["code"] == "NAMESPACE_UNKNOWN"
    assert "the graft succeeded, but its receipt was not sent" in run.json["error"]["message"]
    with registry.http(reader) as rd:
        assert rd.get(f"/namespaces/{ns}/receipts").json()["total"] == 2

    # A failed witness probe is reported too, before the graft fails with it (exit 3).
    kvreg(dst, "login", "origin", "--token", reader)
    last_chunk = str(manifest.chunks[-1].digest)
    flip_bit(dst, last_chunk, offset=len(object_path(dst, last_chunk).read_bytes()) - 3)
    run = kvreg(dst, *graft, "--trust-store", "--receipt", "origin", expect=3)
    assert run.json["error"]["code"] == "WITNESS_MISMATCH"
    with registry.http(reader) as rd:
        newest = rd.get(f"/namespaces/{ns}/receipts").json()["receipts"][0]
    assert newest["witness"] == "fail" and newest["check"] is None and newest["graft"] is None
