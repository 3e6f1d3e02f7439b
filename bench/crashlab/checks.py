"""What must hold after any crash: the checks run on each crash state's copy of the roots.

Both checks use kvreg's own tools, in this process (a state costs a fraction of a second, not
the seconds of a fresh ``kvreg`` process), on the copy, and return one line per violated
invariant. The invariants:

- nothing acknowledged is lost: every ref, artifact and audit checkpoint a marker reported
  before the crash point is there, at the value acknowledged last, or at the value the workload
  acknowledged next for it: a ref being moved when the power went (by a command that had not
  reported it done yet) may hold its new value, whole, before its acknowledgement, never a third
  one (ALICE's checker likewise wants durability once the workload has said "done", atomicity
  before: the old value or the new);
- nothing half-written is visible: every stored object hashes to its name (``kvreg fsck``,
  ``kvreg-admin fsck``), no ref names a missing or damaged object;
- recovery needs no human: the registry starts (its lifespan: migrations, storage check, the
  log key) and its database passes SQLite's ``PRAGMA integrity_check``; nothing is repaired by
  hand before the checks (``kvreg fsck`` runs without quarantining, so that damage is reported).

**The client store** (:func:`check_client`): ``kvreg fsck`` (``kvreg.app.maintenance.check_store``)
must find no problem (an object that paging evicted is not one: its eviction is recorded, and
``kvreg pull`` fetches it again); each acknowledged ref must point at its acknowledged
manifest, which ``kvreg show`` opens verified (digest, signature, Merkle root) and ``kvreg verify``
re-hashes with every object and the tokens (an evicted object excepted). ``kvreg graft --check``
adds nothing here: it reads the same verified objects, and an object that hashes to the digest
its signed manifest names is the very byte string that was deposited. A pinned audit
checkpoint must not go back (``kvreg audit verify`` would refuse the registry otherwise).

**The registry** (:func:`check_registry`): the app starts on the copy (``create_app`` and its
lifespan, as ``kvreg serve`` runs them) and answers; ``kvreg-admin fsck``
(``kvreg_registry.services.fsck.check_registry``, objects re-hashed) finds no problem
(leftovers are fine); ``PRAGMA integrity_check`` says ``ok``; every acknowledged artifact is
pulled over the HTTP API (ref, envelope, manifest, every object; each hashed, the envelope's
signature checked with the depositor's key); the audit log is at least as long as every
acknowledged checkpoint and has the same root at its size, and signs a new checkpoint.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .explore import Checker

log = logging.getLogger(__name__)


def _latest(acked: list[dict[str, Any]], kind: str, root: str, key: str) -> dict[str, dict[str, Any]]:
    """The last acknowledgement of each ``key`` value among markers of ``kind`` for ``root``."""
    out: dict[str, dict[str, Any]] = {}
    for p in acked:
        if p.get("kind") == kind and p.get("root") == root:
            out[str(p[key])] = p
    return out


def allowed(
    acked: list[dict[str, Any]], later: list[dict[str, Any]], kind: str, root: str, key: str
) -> dict[str, list[dict[str, Any]]]:
    """For each ``key`` value (a ref) acknowledged before the crash point: the acknowledgements a
    crash state may match, the last one before the crash point and, if the workload acknowledged
    the same ref again later, the first of those (the update under way at the crash: it may have
    reached the disk before the workload acknowledged it; one after it had not begun)."""
    out = {k: [p] for k, p in _latest(acked, kind, root, key).items()}
    for p in later:
        if p.get("kind") == kind and p.get("root") == root:
            options = out.get(str(p[key]))
            if options is not None and len(options) == 1:
                options.append(p)
    return out


def _mismatch(ref: str, have: str | None, options: list[dict[str, Any]]) -> str:
    text = f"acknowledged ref {ref} is {have}, not {options[0].get('digest')}"
    if len(options) > 1:
        text += f" (nor {options[1].get('digest')}, the value it was being moved to)"
    return text


# --- the client store ------------------------------------------------------------------------


def check_client(
    home: Path, acked: list[dict[str, Any]], label: str, later: list[dict[str, Any]] | None = None
) -> list[str]:
    """Violations in the client store at ``home`` (markers for root ``label``; ``later``: those
    after the crash point, see :func:`allowed`)."""
    from kvreg.app.inspect import show_artifact
    from kvreg.app.maintenance import check_store
    from kvreg.app.verify import VerifyRequest, verify
    from kvreg.core.errors import KvregError, RefNotFoundError
    from kvreg.core.names import RefName
    from kvreg.store.home import Home

    problems: list[str] = []
    h = Home(home)
    report = check_store(h, quarantine=False).fsck
    problems += [f"kvreg fsck: {p.kind} {p.subject}: {p.message}" for p in report.problems]
    evicted = {p.subject for p in report.evicted}
    for ref, options in allowed(acked, later or [], "ref", label, "ref").items():
        try:
            have: str | None = str(h.refs.get(RefName.parse(ref)))
        except RefNotFoundError:
            have = None
        except KvregError as e:
            problems.append(f"acknowledged ref {ref} unreadable: {e.message}")
            continue
        if not any(have == m.get("digest") for m in options):
            problems.append(_mismatch(ref, have, options))
            continue
        if have is None:
            continue
        try:
            show_artifact(h, ref, with_text=False)
            checked = verify(h, VerifyRequest(ref=ref))
        except KvregError as e:
            problems.append(f"kvreg show/verify {ref}: {e.message}")
            continue
        missing = set(checked.objects.missing) - evicted
        tokens_bad = not checked.objects.tokens_ok and not set(checked.objects.missing) & evicted
        if missing or checked.objects.corrupt or tokens_bad:
            problems.append(
                f"kvreg verify {ref}: {len(missing)} missing (not evicted), "
                f"{len(checked.objects.corrupt)} damaged, tokens {checked.objects.tokens_message or 'ok'}"
            )
    for remote, mark in _latest(acked, "pin", label, "remote").items():
        problems += _check_pin(h, remote, int(mark["size"]))
    return problems


def _check_pin(h: Any, remote: str, size: int) -> list[str]:
    from kvreg.core.errors import KvregError
    from kvreg.store.audit_state import RemoteLogStore

    try:
        state = RemoteLogStore(h).load(remote)
    except KvregError as e:
        return [f"the audit state of {remote} is unreadable: {e.message}"]
    pinned = state.checkpoint.size if state is not None and state.checkpoint is not None else None
    if pinned is None or pinned < size:
        return [f"the checkpoint pinned for {remote} went back: {pinned} entries, {size} acknowledged"]
    return []


# --- the registry ----------------------------------------------------------------------------


def check_registry(
    data: Path, acked: list[dict[str, Any]], label: str, later: list[dict[str, Any]] | None = None
) -> list[str]:
    """Violations in the registry whose ``KVREG_DATA`` is ``data`` (markers for root ``label``;
    ``later``: those after the crash point, see :func:`allowed`)."""
    from fastapi.testclient import TestClient
    from sqlalchemy import text

    from kvreg_registry.app import create_app
    from kvreg_registry.services.fsck import check_registry as admin_fsck
    from kvreg_registry.settings import Settings

    settings = Settings.from_env({"KVREG_DATA": str(data)})
    app = create_app(settings)
    problems: list[str] = []
    try:
        client = TestClient(app, raise_server_exceptions=False)
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(client)
            except Exception as e:
                return [f"the registry does not start: {type(e).__name__}: {e}"]
            answer = client.get("/api/v1/")
            if answer.status_code != 200:
                problems.append(f"GET /api/v1/ answered {answer.status_code}")
            state = app.state.registry
            with state.db.engine.connect() as conn:
                integrity = [row[0] for row in conn.execute(text("PRAGMA integrity_check"))]
            if integrity != ["ok"]:
                problems.append(f"PRAGMA integrity_check: {integrity[:5]}")
            report = admin_fsck(state.db, state.storage, state.log)
            problems += [f"kvreg-admin fsck: {p.kind} {p.subject}: {p.message}" for p in report.problems]
            for options in allowed(acked, later or [], "artifact", label, "ref").values():
                problems += _pull(client, options)
            for mark in _latest(acked, "checkpoint", label, "hash").values():
                problems += _check_log(state, mark)
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return problems


def _pull(client: Any, options: list[dict[str, Any]]) -> list[str]:
    """Pull an acknowledged artifact through the API and check every byte of it (``options``:
    the acknowledgements its ref may match, see :func:`allowed`)."""
    from kvreg.core.digest import Digest
    from kvreg.core.envelope import Envelope, pae
    from kvreg.core.errors import KvregError
    from kvreg.core.keys import PublicKey
    from kvreg.core.manifest import Manifest

    ns, name = str(options[0]["ref"]).split("/", 1)
    api = f"/api/v1/namespaces/{ns}"
    r = client.get(f"{api}/refs/{name}")
    if r.status_code != 200:
        return [f"acknowledged ref {ns}/{name} answered {r.status_code}"]
    digest = r.json()["digest"]
    mark = next((m for m in options if m.get("digest") == digest), None)
    if mark is None:
        return [_mismatch(f"{ns}/{name}", digest, options)]
    env = client.get(f"{api}/envelopes/{digest}")
    if env.status_code != 200:
        return [f"the envelope of {ns}/{name} answered {env.status_code}"]
    try:
        envelope = Envelope.from_json_bytes(env.content)
        key = PublicKey.from_text(str(mark["key"]))
        message = pae(envelope.payload_type, envelope.payload)
        if not any(_verifies(key, s.sig, message) for s in envelope.signatures):
            return [f"the envelope of {ns}/{name} is not signed by the depositor's key"]
        if str(envelope.manifest_digest) != digest:
            return [f"the envelope of {ns}/{name} signs {envelope.manifest_digest}, not {digest}"]
        manifest = Manifest.from_bytes(envelope.payload)
    except KvregError as e:
        return [f"the envelope of {ns}/{name}: {e.message}"]
    out = []
    for d in [Digest(digest), *manifest.object_digests()]:
        got = client.get(f"{api}/objects/{d}")
        if got.status_code != 200:
            out.append(f"object {d} of {ns}/{name} answered {got.status_code}")
        elif "sha256:" + hashlib.sha256(got.content).hexdigest() != str(d):
            out.append(f"object {d} of {ns}/{name} does not hash to its name")
    return out


def _verifies(key: Any, sig: bytes, message: bytes) -> bool:
    from kvreg.core.errors import SignatureError

    try:
        key.verify(sig, message)
    except SignatureError:
        return False
    return True


def _check_log(state: Any, mark: dict[str, Any]) -> list[str]:
    """The log still extends an acknowledged checkpoint, and signs a new one."""
    from kvreg.core.errors import KvregError

    size = int(mark["size"])
    with state.db.read() as s:
        now = state.log.size(s)
        if now < size:
            return [f"the audit log has {now} entries, {size} were in an acknowledged checkpoint"]
        root = state.log.root(s, size)
    if base64.b64encode(root).decode() != mark["hash"]:
        return [f"the audit log's root at size {size} is not the acknowledged one: a fork"]
    try:
        state.log.checkpoint()
    except KvregError as e:
        return [f"the registry refuses to sign a checkpoint: {e.message}"]
    return []


@dataclass(frozen=True)
class Checks:
    """The checker of a workload whose roots are labelled ``label -> "client" | "registry"``
    (a plain object, so that checks can run in worker processes). kvreg's own logging is
    silenced: what the checks find is in their answer."""

    kinds: dict[str, str]

    def __call__(
        self, roots: dict[str, Path], acked: list[dict[str, Any]], later: list[dict[str, Any]]
    ) -> list[str]:
        for name in ("kvreg", "kvreg_registry", "alembic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        problems: list[str] = []
        for label, kind in self.kinds.items():
            run = check_client if kind == "client" else check_registry
            problems += [f"{label}: {p}" for p in run(roots[label], acked, label, later)]
        return problems


def checker_for(kinds: dict[str, str]) -> Checker:
    """The checks of roots labelled ``label -> "client" | "registry"``."""
    return Checks(dict(kinds))
