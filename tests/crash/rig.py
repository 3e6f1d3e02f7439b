"""Plumbing of the crash-consistency tests: a registry that can be killed and restarted on its
port, client commands run as killable subprocesses, and the checks every test makes after a crash.

The registry is a real ``kvreg serve`` (``tests/integration/registry_server.py``) on one of the
two backends. Crashes come from ``kvreg.fileio.faults`` (``KVREG_CRASH_AT`` / ``KVREG_STOP_AT``
in the environment of the process that should die or freeze) or from ``kill -9`` sent by the
test at a seeded random time. After each crash the tests check, with the same tools an
operator has:

- the registry: ``kvreg-admin fsck`` (database, storage and audit log agree);
- the client store: ``kvreg fsck``;
- the audit log: ``kvreg audit verify`` (every entry, against a fresh signed checkpoint
  consistent with the one the client pinned before);
- atomicity: the ref is at the old or the new digest, and the log has the ref's and the
  envelope's entry exactly when the change is there.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.helpers import kvreg_env
from integration.registry_server import Registry
from kvreg.fileio.keyfiles import load_trust_policy, save_trust_policy

# A crash point that is never reached must fail the test, not hang it.
WAIT_S = 120.0


@dataclass(frozen=True)
class Artifact:
    """A depositor artifact: its local ref, manifest digest and object digests."""

    ref: str
    digest: str
    objects: tuple[str, ...]


def artifact(depositor: dict[str, Any], name: str) -> Artifact:
    from kvreg.core.names import RefName
    from kvreg.store.home import Home

    manifest = depositor["manifests"][name]
    digest = Home(depositor["home"]).refs.get(RefName.parse(f"src/{name}"))
    return Artifact(f"src/{name}", str(digest), tuple(str(d) for d in manifest.object_digests()))


def copy_store(src: Path, dst: Path) -> Path:
    """``dst`` with ``src``'s objects, envelopes, refs, keys and trust policy."""
    for sub in ("objects", "envelopes", "refs", "keys", "trust.json"):
        s, d = src / sub, dst / sub
        if s.is_dir():
            shutil.copytree(s, d, symlinks=True, dirs_exist_ok=True)
        elif s.is_file():
            shutil.copy2(s, d)
    return dst


def wait_stopped(proc: subprocess.Popen[str], timeout: float = WAIT_S) -> None:
    """Wait until ``proc`` is stopped by SIGSTOP (state ``T`` in /proc); fail if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"process exited ({proc.returncode}) before it stopped:\n{out}\n{err}")
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("T", "t"):
            return
        time.sleep(0.02)
    raise AssertionError("the process never reached its stop point")


def kill(proc: subprocess.Popen[Any]) -> None:
    """``kill -9`` a process of ours (if it still runs) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)


class CrashRig:
    """One registry that tests crash and restart, and the namespaces and homes they use on it."""

    def __init__(self, registry: Registry, depositor: dict[str, Any], tmp: Path) -> None:
        self.reg = registry
        self.depositor = depositor
        self.tmp = tmp
        self.port = int(registry.url.rsplit(":", 1)[1])
        self.old = artifact(depositor, "p07")
        self.new = artifact(depositor, "other")
        self._homes = 0
        self.crash_file = tmp / "crash-at"
        self.crash_file.write_text("")
        self._state: Any = None
        # From now on the server reads its crash points from ``crash_file`` (kvreg.fileio.faults).
        self.restart()

    def close(self) -> None:
        if self._state is not None:
            self._state.db.dispose()
            self._state = None

    # --- the server ----------------------------------------------------------------------

    def restart(self) -> None:
        """Stop the server (if it runs) and start it again on its port, disarmed."""
        self.disarm()
        self.reg.stop()
        saved = self.reg.env
        self.reg.env = {**saved, "KVREG_CRASH_FILE": str(self.crash_file)}
        try:
            self.reg.start(self.port)
        finally:
            self.reg.env = saved

    def arm(self, point: str) -> None:
        """Make the running server kill itself at ``point`` (``NAME`` or ``NAME:N``)."""
        self.crash_file.write_text(point)

    def disarm(self) -> None:
        self.crash_file.write_text("")

    def ensure_up(self) -> None:
        """Restart the server if it is not running."""
        self.disarm()
        if self.reg.proc is None or self.reg.proc.poll() is not None:
            self.restart()

    def wait_server_death(self) -> None:
        """Wait for the server to kill itself at its crash point; it must die by SIGKILL."""
        proc = self.reg.proc
        assert proc is not None
        try:
            rc = proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError("the server never reached its crash point") from None
        assert rc == -signal.SIGKILL, f"server exited with {rc}, not by SIGKILL:\n{self.reg.log_tail()}"

    def admin(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``kvreg-admin --json ARGS`` as a subprocess (whatever its exit code)."""
        return subprocess.run(
            [sys.executable, "-m", "kvreg_registry.admin", "--json", *args],
            env={**self.reg.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )

    def fsck_cli(self) -> dict[str, Any]:
        """``kvreg-admin fsck`` as an operator runs it: must pass."""
        proc = self.admin("fsck")
        assert proc.returncode == 0, (
            f"registry fsck failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
        report: dict[str, Any] = json.loads(proc.stdout)
        assert report["ok"] is True
        return report

    def fsck(self, *, leftovers: bool = True) -> dict[str, Any]:
        """The registry's fsck (``kvreg-admin fsck``'s function, in this process: a subprocess
        costs seconds of imports): must pass; with ``leftovers=False`` there must be none either."""
        from kvreg_registry.services.fsck import check_registry

        st = self._open_state()
        report = check_registry(st.db, st.storage, st.log).to_dict()
        assert report["ok"] is True, report["problems"]
        if not leftovers:
            assert report["leftovers"] == [], report["leftovers"]
        return report

    def _open_state(self) -> Any:
        from dataclasses import replace

        from kvreg_registry.settings import Settings
        from kvreg_registry.state import open_state

        if self._state is None:
            self._state = open_state(replace(Settings.from_env(self.reg.env), migrate_on_start=False))
        return self._state

    def gc(self, *, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.admin("gc", "--grace-seconds", "0", extra_env=extra_env)

    def spawn_gc_stopped_at(self, point: str) -> subprocess.Popen[str]:
        """``kvreg-admin --json gc --grace-seconds 0`` started with ``KVREG_STOP_AT=point``: the
        caller waits for it to stop (:func:`wait_stopped`), then resumes or kills it."""
        return subprocess.Popen(
            [sys.executable, "-m", "kvreg_registry.admin", "--json", "gc", "--grace-seconds", "0"],
            env={**self.reg.env, "KVREG_STOP_AT": point},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    # --- namespaces and client homes ---------------------------------------------------------

    def namespace(self) -> tuple[str, str]:
        """A new namespace that accepts the depositor's key, and a writer's token for it."""
        ns = self.reg.namespace()
        self.reg.register_key(ns, self.depositor["public_key"])
        return ns, self.reg.user({ns: "write"})

    def home(self, token: str, *, store: bool, ns: str) -> Path:
        """A client home with ``origin`` and ``token``, trusting the depositor for ``ns``; with
        ``store`` a copy of the depositor's store (to push from)."""
        from kvreg.core.keys import PublicKey
        from kvreg.remote.remotes import Credentials, RemoteConfig
        from kvreg.store.home import Home

        self._homes += 1
        home = self.tmp / f"home{self._homes}-{uuid.uuid4().hex[:6]}"
        home.mkdir()
        if store:
            copy_store(self.depositor["home"], home)
        # What ``kvreg remote add``, ``kvreg login`` and ``kvreg trust add`` do (three subprocesses
        # would cost seconds per test).
        h = Home(home)
        RemoteConfig(h).add("origin", self.reg.url)
        Credentials(h).set("origin", token)
        policy = load_trust_policy(h.trust_path)
        policy.allow(ns, PublicKey.from_text(self.depositor["public_key"]))
        save_trust_policy(policy, h.trust_path)
        return home

    # --- client commands -------------------------------------------------------------------------

    @staticmethod
    def spawn(home: Path, *args: str, **extra_env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "kvreg", *args],
            env={**kvreg_env(home), **extra_env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
        out, err = proc.communicate(timeout=WAIT_S)
        return proc.returncode, out, err

    # --- what the registry says ------------------------------------------------------------------

    def remote_ref(self, ns: str, name: str) -> str | None:
        with self.reg.admin() as c:
            r = c.get(f"/namespaces/{ns}/refs/{name}")
            if r.status_code == 404:
                return None
            assert r.status_code == 200, r.text
            return str(r.json()["digest"])

    def has_envelope(self, ns: str, digest: str) -> bool:
        with self.reg.admin() as c:
            r = c.get(f"/namespaces/{ns}/envelopes/{digest}")
            assert r.status_code in (200, 404), r.text
            return r.status_code == 200

    def held(self, ns: str, digests: tuple[str, ...]) -> set[str]:
        with self.reg.admin() as c:
            r = c.post(f"/namespaces/{ns}/objects/missing", json={"digests": list(digests)})
            assert r.status_code == 200, r.text
            return set(digests) - set(r.json()["missing"])

    def log_size(self) -> int:
        with self.reg.admin() as c:
            r = c.get("/log/entries", params={"start": 0, "end": 0})
            assert r.status_code == 200, r.text
            return int(r.json()["size"])

    def entries(self, ns: str | None = None, *, since: int = 0) -> list[dict[str, Any]]:
        """The audit log's entries from ``since`` on (of namespace ``ns`` if given), decoded."""
        out: list[dict[str, Any]] = []
        with self.reg.admin() as c:
            start = since
            while True:
                r = c.get("/log/entries", params={"start": start, "end": start + 1000})
                assert r.status_code == 200, r.text
                page = r.json()["entries"]
                out += [json.loads(base64.b64decode(e["entry"])) for e in page]
                start += len(page)
                if not page or start >= r.json()["size"]:
                    break
        return [e for e in out if ns is None or e.get("namespace") == ns]

    # --- the checks after a crash ----------------------------------------------------------------

    def check_push_atomic(self, ns: str, name: str, old: str | None, new: Artifact) -> str | None:
        """The ref is at ``old`` or ``new``; the log has an entry for each change that is there and
        none for one that is not. Returns where the ref is."""
        at = self.remote_ref(ns, name)
        assert at in (old, new.digest), f"{ns}/{name} is at {at}, neither {old} nor {new.digest}"
        entries = self.entries(ns)
        ref = f"{ns}/{name}"
        moves = [
            e
            for e in entries
            if e["type"] in ("ref.created", "ref.moved")
            and e["details"].get("ref") == ref
            and e["new"] == new.digest
        ]
        assert len(moves) == (1 if at == new.digest else 0), moves
        stored = self.has_envelope(ns, new.digest)
        envelope_entries = [
            e for e in entries if e["type"] == "envelope.stored" and e["subjects"] == [new.digest]
        ]
        assert len(envelope_entries) == (1 if stored else 0), envelope_entries
        if at == new.digest:
            assert stored
        held = self.held(ns, new.objects)
        logged = {e["subjects"][0] for e in entries if e["type"] == "object.held"}
        assert held & set(new.objects) == logged & set(new.objects), (held, logged)
        if stored:
            assert held == set(new.objects)
        return at

    @staticmethod
    def audit_verify(home: Path) -> int:
        """``kvreg audit verify origin``'s function, in this process; returns the log's size."""
        from kvreg.remote.auditexport import verify_remote_log
        from kvreg.remote.auditlog import contact
        from kvreg.store.home import Home

        with contact(Home(home), "origin") as (_client, audit):
            return verify_remote_log(audit).checkpoint.size

    @staticmethod
    def push(home: Path, src: str, dst: str, *, retries: int | None = None) -> dict[str, Any]:
        """``kvreg push origin SRC --as DST``'s function, in this process; ``retries`` (default: the
        client's) is how often a failed request is retried (0: a dead server fails it at once)."""
        from kvreg.core.names import RefName
        from kvreg.remote.auditlog import contact
        from kvreg.remote.pushing import push
        from kvreg.store.home import Home

        h = Home(home)
        options = {} if retries is None else {"retries": retries}
        with contact(h, "origin", **options) as (client, audit):
            return push(h, client, RefName.parse(src), remote_ref=RefName.parse(dst), audit=audit).to_dict()

    @staticmethod
    def pull(home: Path, ref: str) -> dict[str, Any]:
        """``kvreg pull origin REF``'s function, in this process."""
        from kvreg.core.names import RefName
        from kvreg.remote.auditlog import contact
        from kvreg.remote.pulling import pull
        from kvreg.store.home import Home

        h = Home(home)
        with contact(h, "origin") as (client, audit):
            return pull(h, client, RefName.parse(ref), audit=audit).to_dict()

    @staticmethod
    def client_fsck(home: Path) -> None:
        """``kvreg fsck``'s function, in this process, without quarantining: must find nothing."""
        from kvreg.store.fsck import fsck
        from kvreg.store.home import Home

        report = fsck(Home(home), quarantine=False)
        assert report.ok, [p.to_dict() for p in report.problems]

    @staticmethod
    def local_ref(home: Path, ref: str) -> str | None:
        from kvreg.core.names import RefName
        from kvreg.store.home import Home

        d = Home(home).refs.get_or_none(RefName.parse(ref))
        return None if d is None else str(d)

    def wait_for_entry(self, ns: str, type_: str, running: Callable[[], bool], *, since: int) -> None:
        """Wait until the log has an entry ``type_`` in ``ns`` at or after ``since`` (a command's
        first change), while ``running()`` says the command still runs."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if any(e["type"] == type_ for e in self.entries(ns, since=since)):
                return
            if not running():
                raise AssertionError(f"the command ended before any {type_} entry in {ns}")
            time.sleep(0.02)
        raise AssertionError(f"no {type_} entry in {ns}")

    # --- garbage for GC --------------------------------------------------------------------------

    def upload_garbage(self, ns: str, token: str, count: int) -> list[str]:
        """``count`` random objects uploaded to ``ns`` that no envelope references, their upload
        session closed: what a push that died before its envelope leaves once the session ends."""
        from kvreg.core.digest import Digest

        blobs = [os.urandom(64 + i) for i in range(count)]
        digests = [str(Digest.of_bytes(b)) for b in blobs]
        with self.reg.http(token) as c:
            r = c.post(f"/namespaces/{ns}/uploads", json={"digests": digests})
            assert r.status_code == 201, r.text
            upload = r.json()["upload"]
            for d, b in zip(digests, blobs, strict=True):
                r = c.put(f"/namespaces/{ns}/objects/{d}", content=b, headers={"X-Kvreg-Upload": upload})
                assert r.status_code == 201, r.text
            assert c.delete(f"/namespaces/{ns}/uploads/{upload}").status_code == 204
        return digests

    def orphan_bytes(self, data: bytes | None = None) -> str:
        """Bytes in storage that no row claims (what a server killed between storage and
        database leaves), written straight into the storage; random unless ``data`` is given."""
        from kvreg.core.digest import Digest

        data = os.urandom(100) if data is None else data
        d = Digest.of_bytes(data)
        with self._open_state().storage.begin_upload() as pending:
            pending.write(data)
            pending.commit(d)
        return str(d)

    def stored(self) -> set[str]:
        return {str(o.digest) for o in self._open_state().storage.iter_objects()}

    def collect_garbage(self) -> dict[str, Any]:
        """``kvreg-admin gc --grace-seconds 0``'s function, in this process."""
        from kvreg_registry.admin import ACTOR
        from kvreg_registry.services.gc import collect_garbage

        st = self._open_state()
        return collect_garbage(st.db, st.storage, ACTOR, grace_seconds=0).to_dict()


@contextlib.contextmanager
def killed_on_exit(*procs: subprocess.Popen[Any]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            kill(p)
