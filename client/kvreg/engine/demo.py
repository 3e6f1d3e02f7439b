"""The library part of ``kvreg demo``: the whole story on embedded defaults, offline.

In a work folder of its own (its own store, its own key), :func:`run_demo`
builds a small seeded Llama model directory, deposits a verified solution (the
question as prompt), deposits a longer text that shares its prefix (only the new
blocks are stored), grafts the first artifact and checks it against a fresh
computation over 32 decode steps, grafts at a block boundary with a new suffix
and checks that too, shows the refusal of a model with one weight changed,
recomputes the artifact (``verify --recompute``), and compares restore time with
prefill time.

Then, unless ``registry=False``, the registry act: it bootstraps a registry's
embedded defaults (SQLite and an object folder under ``<workdir>/registry``) with
the functions ``kvreg-admin`` calls (an admin user and token, a private
namespace ``demo`` that accepts the demo signer's key, a ``reader`` user with the
read role), starts ``kvreg serve`` as a subprocess on 127.0.0.1 and a free port,
adds it as a remote and logs in, pushes the solution, pulls it into a second,
fresh home that trusts only the demo signer for ``demo``, grafts it there with
the check, pushes it again (nothing is sent), and pushes and pulls the longer
artifact (only its new chunks travel). The server is stopped whatever happens
(errors, Ctrl-C), and dies with the demo's process on Linux if that is killed.

It returns a plain dict; the CLI renders it. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvreg.core.errors import FingerprintMismatchError, KvregError, UnavailableError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import WILDCARD, TrustPolicy
from kvreg.engine.check import check_graft, recompute_artifact
from kvreg.engine.deposit import deposit
from kvreg.engine.graft import continue_decoding, graft
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import load_model, new_cache, prefill
from kvreg.engine.tiny import build_model_dir, perturb_one_weight
from kvreg.fileio.atomicfile import atomic_write_bytes
from kvreg.fileio.keyfiles import save_signing_key, save_trust_policy
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

ARCH = "llama"
SEED = 0
BLOCK_SIZE = 16
DECODE_STEPS = 32
TIMING_REPEATS = 3

QUESTION = (
    "Problem 7. Find the number of ordered pairs of positive integers (a, b) such that a + b = 1000 "
    "and neither a nor b has a zero digit."
)
SOLUTION = (
    " Solution: count the numbers from 1 to 999 without a zero digit, then subtract the pairs whose "
    "partner contains a zero. Step 1: one-digit numbers contribute 9. Step 2: two-digit numbers without "
    "zero contribute 81. Step 3: three-digit numbers contribute 729. The answer is 738."
)
EXTENSION = (
    " Check: an exhaustive checker enumerated every pair (a, 1000 - a) and counted 738 pairs with no zero "
    "digit. Verified by an exhaustive checker: pass."
)
FOLLOW_UP = " Now the same question for a + b = 2000: Step 1:"
ANSWER = "738"

# The registry act.
NAMESPACE = "demo"
FLYWHEEL_NAMESPACE = "flywheel"
REMOTE = "demo-registry"
ADMIN_USER = "admin"
READER_USER = "reader"
SERVER_START_TIMEOUT = 60.0
SERVER_STOP_TIMEOUT = 10.0
TRANSFER_JOBS = 4
FLYWHEEL_BLOCK_SIZE = 8


def _noop(_: str) -> None:
    pass


def _deposit_row(result: Any) -> dict[str, Any]:
    d = result.to_dict()
    return {
        k: d[k]
        for k in (
            "ref",
            "manifest_digest",
            "token_count",
            "chunk_count",
            "new_chunks",
            "bytes_written",
            "bytes_new",
            "prefill_seconds",
        )
    }


def _graft_row(name: str, lm: Any, outcome: Any, decoded: Any, comparison: Any) -> dict[str, Any]:
    plan = outcome.plan
    return {
        "name": name,
        "prompt_tokens": len(plan.prompt),
        "graft_tokens": plan.graft_tokens,
        "prefill_tokens": plan.prefill_tokens,
        "chunks_read": plan.chunks,
        "decoded_tokens": len(decoded.tokens),
        "probe": outcome.probe,
        "timings": {k: round(v, 6) for k, v in outcome.timings.items()},
        "output_text": lm.decode(decoded.tokens),
        "check": comparison.to_dict(),
    }


def run_demo(
    workdir: str | Path,
    *,
    threads: int = 2,
    registry: bool = True,
    flywheel: Any = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the demo in ``workdir`` (which should be empty); return the report.

    ``registry=False`` leaves out the registry act (``report["registry"]`` is None).
    ``flywheel`` (a ``kvreg.flywheel.loop.FlywheelSpec``) adds the flywheel act: with the
    registry, the library is pushed and the second exam runs in a fresh home that pulls
    on demand; without it, everything happens in the demo's home.
    """
    say = progress or _noop
    started = time.perf_counter()
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []

    say(f"building a seeded {ARCH} model directory")
    model_dir = build_model_dir(work / f"tiny-{ARCH}", ARCH, seed=SEED)
    home = Home(work / "home").ensure()
    key = SigningKey.generate()
    save_signing_key(key, home.keys_dir / "default.key")
    atomic_write_bytes(home.keys_dir / "default.pub", (key.public_key.to_text() + "\n").encode("ascii"))
    policy = TrustPolicy()
    policy.allow(WILDCARD, key.public_key)
    save_trust_policy(policy, home.trust_path)

    settings = EngineSettings(
        dtype="float32", attn_implementation="sdpa", threads=threads, block_size=BLOCK_SIZE
    )
    say("loading the model under the pinned config")
    lm = load_model(model_dir, settings, cache_dir=home.cache_dir)

    say("depositing the verified solution")
    ref = RefName("demo", "p07")
    first = deposit(
        lm,
        home,
        text=SOLUTION,
        prompt=QUESTION,
        ref=ref,
        key=key,
        verification={"verifier": "exhaustive-checker", "verdict": "pass", "evidence": {"answer": ANSWER}},
        annotations={
            "title": "Pairs without zero digits summing to 1000",
            "answer": ANSWER,
            "tags": ["demo"],
        },
    )
    say("depositing a longer text that shares its prefix")
    longer = deposit(
        lm,
        home,
        text=SOLUTION + EXTENSION,
        prompt=QUESTION,
        ref=RefName("demo", "p07-checked"),
        key=key,
        verification={"verifier": "exhaustive-checker", "verdict": "pass", "evidence": {"answer": ANSWER}},
        annotations={"title": "The same solution, with its check"},
    )
    a_chunks = [c.digest for c in first.manifest.chunks]
    b_chunks = [c.digest for c in longer.manifest.chunks]
    shared = 0
    while shared < min(len(a_chunks), len(b_chunks)) and a_chunks[shared] == b_chunks[shared]:
        shared += 1
    new_chunk_bytes = sum(c.size for c in longer.manifest.chunks if c.digest not in set(a_chunks))
    dedupe = {
        "shared_chunks": shared,
        "new_chunks": longer.new_chunks,
        "chunk_count": len(b_chunks),
        "bytes_written": longer.write.bytes_written,
        "bytes_new": longer.write.bytes_new,
        "new_chunk_bytes": new_chunk_bytes,
    }
    if shared == 0 or longer.new_chunks >= len(b_chunks):
        failures.append("the longer artifact shares no stored block with the first")

    artifact = open_artifact(home, str(ref))
    manifest = artifact.manifest
    tokens = read_tokens(home, manifest)

    say(f"grafting {ref} and checking {DECODE_STEPS} decode steps against a fresh computation")
    outcome = graft(lm, home, manifest, tokens)
    decoded = continue_decoding(lm, outcome, DECODE_STEPS)
    whole = _graft_row("whole artifact", lm, outcome, decoded, check_graft(lm, outcome.plan, decoded))

    blocks = max(1, manifest.token_count // BLOCK_SIZE - 1)
    say(f"grafting the first {blocks} blocks and prefilling a new suffix")
    prompt = tokens + lm.encode(FOLLOW_UP, first=False)
    outcome2 = graft(lm, home, manifest, tokens, prompt, blocks=blocks)
    decoded2 = continue_decoding(lm, outcome2, DECODE_STEPS)
    boundary = _graft_row(
        f"first {blocks} blocks + new suffix",
        lm,
        outcome2,
        decoded2,
        check_graft(lm, outcome2.plan, decoded2),
    )
    for row in (whole, boundary):
        if not row["check"]["byte_exact"]:
            failures.append(f"graft '{row['name']}' is not byte-exact")

    say("timing restore against prefill")
    prefill_times: list[float] = []
    restore_times: list[float] = []
    for _ in range(TIMING_REPEATS):
        t = time.perf_counter()
        prefill(lm, new_cache(lm), tokens, 0)
        prefill_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        graft(lm, home, manifest, tokens, probe=False)
        restore_times.append(time.perf_counter() - t)
    timing = {
        "tokens": len(tokens),
        "prefill_seconds": min(prefill_times),
        "restore_seconds": min(restore_times),
        "ratio": min(prefill_times) / max(min(restore_times), 1e-9),
    }

    shared_registry: dict[str, Any] | None = None
    with contextlib.ExitStack() as stack:
        act: _RegistryAct | None = None
        if registry:
            act = stack.enter_context(_RegistryAct(work, home, key, say))
            try:
                act.prepare()  # the server starts while the next two acts run
            except KvregError as e:
                failures.append(f"the registry act failed: {e.code}: {e.message}")
                shared_registry, act = {"error": e.to_dict()}, None

        say("showing a refusal: the same model with one weight changed")
        perturbed_dir = perturb_one_weight(model_dir, work / f"tiny-{ARCH}-one-weight-changed")
        refusal: dict[str, Any] | None = None
        perturbed = load_model(perturbed_dir, settings, cache_dir=home.cache_dir)
        try:
            graft(perturbed, home, manifest, tokens)
        except FingerprintMismatchError as e:
            refusal = {"code": e.code, "message": e.message, "differs": e.details.get("differs")}
        except KvregError as e:
            failures.append(f"the perturbed model failed with {e.code} instead of FINGERPRINT_MISMATCH")
        else:
            failures.append("a model with one weight changed was not refused")
        del perturbed

        say("recomputing the artifact (verify --recompute)")
        recompute = recompute_artifact(lm, manifest, tokens).to_dict()
        if not recompute["byte_exact"]:
            failures.append("recomputing the artifact gave other chunks")

        if act is not None:
            try:
                shared_registry = act.run(lm, [ref, RefName("demo", "p07-checked")], failures)
            except KvregError as e:
                failures.append(f"the registry act failed: {e.code}: {e.message}")
                shared_registry = {"error": e.to_dict()}
                act = None

        flywheel_report: dict[str, Any] | None = None
        if flywheel is not None:
            try:
                if act is not None:
                    flywheel_report = act.flywheel(flywheel, threads, failures)
                else:
                    flywheel_report = _flywheel(home, key, flywheel, threads, None, say, failures)
            except KvregError as e:
                failures.append(f"the flywheel act failed: {e.code}: {e.message}")
                flywheel_report = {"error": e.to_dict()}
        if act is not None:
            say("stopping the registry")
            act.server.stop()

    return {
        "workdir": str(work),
        "home": str(home.root),
        "model": {"dir": str(model_dir), "fingerprint": str(lm.model_fp), **lm.info},
        "config": {
            "fingerprint": str(lm.config.fingerprint),
            "block_size": BLOCK_SIZE,
            "threads": threads,
            "dtype": settings.dtype,
            "attn_implementation": settings.attn_implementation,
            "profile": settings.profile,
        },
        "question": QUESTION,
        "deposits": [_deposit_row(first), _deposit_row(longer)],
        "dedupe": dedupe,
        "grafts": [whole, boundary],
        "timing": timing,
        "refusal": refusal,
        "recompute": recompute,
        "registry": shared_registry,
        "flywheel": flywheel_report,
        "failures": failures,
        "ok": not failures,
        "seconds": round(time.perf_counter() - started, 3),
    }


# --- the flywheel act --------------------------------------------------------------------


def _flywheel(
    home: Home,
    key: SigningKey,
    spec: Any,
    threads: int,
    registry: Any,
    say: Progress,
    failures: list[str],
) -> dict[str, Any]:
    """Run the flywheel on the bundled model (``kvreg.flywheel.loop``); record what failed."""
    from kvreg.flywheel.loop import run_flywheel
    from kvreg.flywheel.model import model_path

    say("flywheel: loading the bundled arithmetic model (blocks of 8 tokens)")
    settings = EngineSettings(threads=threads, block_size=FLYWHEEL_BLOCK_SIZE)
    lm = load_model(model_path(), settings, cache_dir=home.cache_dir)
    report = run_flywheel(lm, home, key, spec, registry=registry, progress=lambda m: say(f"flywheel: {m}"))
    data = report.to_dict()
    m = data["metrics"]
    if m["wrong_grafts"]:
        failures.append(f"the flywheel made {m['wrong_grafts']} wrong grafts")
    if m["unseen_knowledge_grafts"]:
        failures.append("an unseen question was answered from another question's artifact")
    if m["byte_exact_passed"] != m["byte_exact_checks"]:
        failures.append(
            f"{m['byte_exact_checks'] - m['byte_exact_passed']} flywheel answers were not byte-exact"
        )
    if not m["accuracy_goal_met"]:
        failures.append(
            "the flywheel's accuracy with the library is below baseline + repeat questions missed"
        )
    data["model"] = {"dir": str(model_path()), "fingerprint": str(lm.model_fp), **lm.info}
    data["config_fingerprint"] = str(lm.config.fingerprint)
    return data


# --- the registry act --------------------------------------------------------------------

# Run in the server's process before ``kvreg serve``: on Linux, ask the kernel to send
# SIGTERM when the demo's process dies (even by SIGKILL), so that no server outlives it;
# exit at once if the demo is already gone. prctl(PR_SET_PDEATHSIG = 1) survives exec.
_SERVER_LAUNCHER = """
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
os.execv(sys.executable, [sys.executable, "-m", "kvreg", *sys.argv[2:]])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip() or "(empty log)"
    except OSError:
        return "(no log)"


class _Server:
    """``kvreg serve --data DATA_DIR`` on 127.0.0.1 and a free port, as a subprocess.

    :meth:`start` launches it and returns at once (it starts while the demo does
    other work); :meth:`wait` returns its URL once ``GET /api/v1/`` answers, and
    launches it again on another port if it exited (another process took the free
    port first); :meth:`stop` (also on leaving the ``with`` block) terminates it,
    then kills it if it does not stop. The server gets the embedded defaults
    whatever ``KVREG_*`` variables are set in this process.
    """

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
        env["KVREG_DATA"] = str(self.data_dir)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = ["serve", "--data", str(self.data_dir), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--log-level", "warning"]
        with self.log_path.open("ab") as server_log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER_LAUNCHER, str(os.getpid()), *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=server_log,
                stderr=subprocess.STDOUT,
            )

    def wait(self) -> tuple[str, float]:
        """The server's URL once it answers, and the seconds this call waited for it."""
        import httpx

        waited = time.perf_counter()
        if self.proc is None:
            self.start()
        for attempt in range(3):
            deadline = time.monotonic() + SERVER_START_TIMEOUT
            with httpx.Client(trust_env=False, timeout=2.0) as http:
                while self.proc is not None and time.monotonic() < deadline and self.proc.poll() is None:
                    with contextlib.suppress(httpx.HTTPError):
                        if http.get(f"{self.url}/api/v1/").status_code == 200:
                            return self.url, time.perf_counter() - waited
                    time.sleep(0.05)
            if self.proc is not None and self.proc.poll() is None:
                self.stop()
                raise UnavailableError(
                    f"the demo registry did not answer within {SERVER_START_TIMEOUT:.0f} s:\n"
                    + _log_tail(self.log_path)
                )
            code = None if self.proc is None else self.proc.returncode
            log.info("the demo registry exited with %s (attempt %d)", code, attempt + 1)
            self.start()
        self.stop()
        raise UnavailableError(f"the demo registry did not start:\n{_log_tail(self.log_path)}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(SERVER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("the demo registry did not stop within %.0f s; killing it", SERVER_STOP_TIMEOUT)
            proc.kill()
            proc.wait()


def _bootstrap(data_dir: Path, key: SigningKey) -> dict[str, Any]:
    """What an operator does with ``kvreg-admin`` before the first start: returns the tokens."""
    from kvreg_registry.admin import ACTOR
    from kvreg_registry.app import open_state
    from kvreg_registry.services import accounts
    from kvreg_registry.settings import Settings

    state = open_state(Settings(data_dir=data_dir))  # the embedded defaults; migrates to head
    try:
        with state.db.write() as s:
            accounts.create_user(s, ACTOR, ADMIN_USER, admin=True)
            admin_token = accounts.create_token(s, ACTOR, ADMIN_USER, label="kvreg demo").token
            accounts.create_namespace(s, ACTOR, NAMESPACE, description="kvreg demo")
            accounts.register_key(s, ACTOR, NAMESPACE, key.public_key.to_text())
            accounts.create_namespace(
                s, ACTOR, FLYWHEEL_NAMESPACE, public=True, description="kvreg demo: the flywheel's library"
            )
            accounts.register_key(s, ACTOR, FLYWHEEL_NAMESPACE, key.public_key.to_text())
            accounts.create_user(s, ACTOR, READER_USER)
            accounts.set_role(s, ACTOR, NAMESPACE, READER_USER, "read")
            reader_token = accounts.create_token(s, ACTOR, READER_USER, label="kvreg demo").token
    finally:
        state.db.dispose()
    return {"admin": admin_token, "reader": reader_token}


def _login(home: Home, url: str, token: str) -> dict[str, Any]:
    """``kvreg remote add`` and ``kvreg login`` (the token is checked with whoami first)."""
    from kvreg.remote.http import RegistryClient
    from kvreg.remote.remotes import Credentials, RemoteConfig

    remote = RemoteConfig(home).add(REMOTE, url)
    with RegistryClient(remote.url, token, remote_name=REMOTE, retries=2) as client:
        who = client.whoami()
    Credentials(home).set(REMOTE, token)
    return who


def _client(home: Home) -> Any:
    """A client for the demo remote with the token ``kvreg login`` stored (not ``$KVREG_TOKEN``)."""
    from kvreg.remote.http import RegistryClient
    from kvreg.remote.remotes import Credentials, RemoteConfig

    remote = RemoteConfig(home).get(REMOTE)
    auth = Credentials(home, environ={}).auth_for(REMOTE)
    return RegistryClient(remote.url, None if auth is None else auth.token, remote_name=REMOTE, retries=2)


def _timed(report: Any, started: float) -> dict[str, Any]:
    return {**report.to_dict(), "seconds": round(time.perf_counter() - started, 4)}


def _stored(data_dir: Path) -> dict[str, int]:
    """Objects and bytes in the registry's object folder (each stored once)."""
    files = [p for p in (data_dir / "objects" / "objects").rglob("*") if p.is_file()]
    return {"objects": len(files), "bytes": sum(p.stat().st_size for p in files)}


class _RegistryAct:
    """The registry act: :meth:`prepare` bootstraps the data folder and starts the server,
    :meth:`run` does the rest; leaving the ``with`` block stops the server."""

    def __init__(self, work: Path, home: Home, key: SigningKey, say: Progress) -> None:
        self.work = work
        self.home = home
        self.key = key
        self.say = say
        self.root = work / "registry"
        self.data_dir = self.root / "data"
        self.server = _Server(self.data_dir, self.root / "server.log")
        self.tokens: dict[str, str] = {}
        self.bootstrap_seconds = 0.0

    def __enter__(self) -> _RegistryAct:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.say(
            f"bootstrapping a registry in {self.data_dir} with kvreg-admin's functions "
            f"(admin user and token, namespace {NAMESPACE}, the demo key, a reader)"
        )
        t = time.perf_counter()
        self.tokens = _bootstrap(self.data_dir, self.key)
        self.bootstrap_seconds = time.perf_counter() - t
        self.say("starting it in the background: kvreg serve on 127.0.0.1 (SQLite + object folder)")
        self.server.start()

    def flywheel(self, spec: Any, threads: int, failures: list[str]) -> dict[str, Any]:
        """The flywheel act: library pushed by this home, second exam in a fresh home that pulls on demand."""
        from kvreg.app.ask import RemoteSource
        from kvreg.flywheel.loop import Registry
        from kvreg.remote.auditlog import RemoteLog

        asking = Home(self.work / "flywheel-home").ensure()
        policy = TrustPolicy()
        policy.allow(FLYWHEEL_NAMESPACE, self.key.public_key)
        save_trust_policy(policy, asking.trust_path)
        url, _ = self.server.wait()
        self.say(
            f"flywheel: a fresh home logs in as {READER_USER} and trusts only the demo key for "
            f"{FLYWHEEL_NAMESPACE}; its exam pulls what it grafts on demand"
        )
        _login(asking, url, self.tokens["reader"])
        with _client(self.home) as client, _client(asking) as reader:
            audit = RemoteLog(asking, REMOTE, reader)
            registry = Registry(
                push_client=client, reader=RemoteSource(client=reader, audit=audit), home=asking
            )
            report = _flywheel(self.home, self.key, spec, threads, registry, self.say, failures)
            audit.save()
        report["registry"] = {
            "url": url,
            "namespace": FLYWHEEL_NAMESPACE,
            "asking_home": str(asking.root),
            "data": str(self.data_dir),
        }
        return report

    def run(self, lm: Any, refs: list[RefName], failures: list[str]) -> dict[str, Any]:
        from kvreg.remote.pulling import pull
        from kvreg.remote.pushing import push

        started = time.perf_counter()
        say, home, key = self.say, self.home, self.key
        ref, longer = refs
        second = Home(self.work / "second-home").ensure()
        policy = TrustPolicy()
        policy.allow(NAMESPACE, key.public_key)
        save_trust_policy(policy, second.trust_path)

        url, waited = self.server.wait()
        say(f"registry up at {url}; remote add + login ({ADMIN_USER} here, {READER_USER} in a second home)")
        who = _login(home, url, self.tokens["admin"])
        who_reader = _login(second, url, self.tokens["reader"])
        with _client(home) as client, _client(second) as reader:
            say(f"pushing {ref}")
            t = time.perf_counter()
            pushed = _timed(push(home, client, ref, jobs=TRANSFER_JOBS), t)
            say(f"pulling {ref} into the second home")
            t = time.perf_counter()
            pulled = _timed(pull(second, reader, ref, jobs=TRANSFER_JOBS), t)

            say(f"grafting {ref} in the second home and checking {DECODE_STEPS} decode steps")
            artifact = open_artifact(second, str(ref))
            tokens = read_tokens(second, artifact.manifest)
            outcome = graft(lm, second, artifact.manifest, tokens)
            decoded = continue_decoding(lm, outcome, DECODE_STEPS)
            grafted = _graft_row(
                "pulled artifact", lm, outcome, decoded, check_graft(lm, outcome.plan, decoded)
            )

            say(f"pushing {ref} again")
            t = time.perf_counter()
            again = _timed(push(home, client, ref, jobs=TRANSFER_JOBS), t)
            say(f"pushing and pulling {longer}, which shares its first chunks with {ref}")
            t = time.perf_counter()
            pushed_longer = _timed(push(home, client, longer, jobs=TRANSFER_JOBS), t)
            t = time.perf_counter()
            pulled_longer = _timed(pull(second, reader, longer, jobs=TRANSFER_JOBS), t)
        stored = _stored(self.data_dir)

        if pulled["digest"] != pushed["digest"]:
            failures.append("the pulled manifest digest differs from the pushed one")
        if not grafted["check"]["byte_exact"]:
            failures.append("the graft of the pulled artifact is not byte-exact")
        if again["objects_sent"] != 0 or again["bytes_sent"] != 0:
            failures.append("pushing the same artifact again sent objects")
        if pushed_longer["objects_sent"] >= pushed_longer["objects_total"]:
            failures.append("pushing the longer artifact sent its shared chunks again")
        if pulled_longer["objects_downloaded"] >= pulled_longer["objects_total"]:
            failures.append("pulling the longer artifact downloaded its shared chunks again")

        return {
            "url": url,
            "backend": "sqlite+folder",
            "data": str(self.data_dir),
            "log": str(self.server.log_path),
            "startup_wait_seconds": round(waited, 3),
            "bootstrap": {
                "seconds": round(self.bootstrap_seconds, 3),
                "namespace": NAMESPACE,
                "public": False,
                "key_id": key.public_key.keyid,
                "admin_user": ADMIN_USER,
                "reader_user": READER_USER,
                "whoami": {"home": who, "second_home": who_reader},
            },
            "remote": REMOTE,
            "second_home": str(second.root),
            "same_manifest": pulled["digest"] == pushed["digest"],
            "byte_exact": grafted["check"]["byte_exact"],
            "push": pushed,
            "pull": pulled,
            "graft": grafted,
            "second_push": again,
            "push_longer": pushed_longer,
            "pull_longer": pulled_longer,
            "stored": stored,
            # bootstrap, then this act after the server was started (the acts between excluded)
            "seconds": round(self.bootstrap_seconds + time.perf_counter() - started, 3),
        }
