"""The demo's registry act: log in to the embedded registry, push, pull into a second home, graft there.

:class:`RegistryAct` bootstraps the registry's data folder and starts the server
(:meth:`~RegistryAct.prepare`, early, so that it starts while other acts run),
then :meth:`~RegistryAct.run` adds the remote and logs in (an admin in the demo's
home, a reader in a second, fresh home that trusts only the demo signer), pushes
the solution, pulls it into the second home, grafts it there with the check,
pushes it again (nothing is sent) and pushes and pulls the longer artifact (only
its new chunks travel). The checked graft in the second home sends its graft receipt
(signed with the demo key, as ``kvreg graft --check --receipt REMOTE`` signs with
the host's key) with the reader's token, so the registry's artifact page shows the
byte-exact evidence. :meth:`~RegistryAct.flywheel` runs the flywheel act over
the same registry and sends a receipt for each checked graft of its second exam.
Leaving the ``with`` block stops the server. Nothing here prints.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kvreg.app.demo.flywheel_act import run_flywheel_act
from kvreg.app.demo.rows import graft_row
from kvreg.app.demo.server import Server, Tokens, bootstrap, stored
from kvreg.app.demo.texts import (
    ADMIN_USER,
    DECODE_STEPS,
    FLYWHEEL_NAMESPACE,
    NAMESPACE,
    READER_USER,
    REMOTE,
    TRANSFER_JOBS,
)
from kvreg.app.discovery import RemoteSource
from kvreg.app.flywheel.gsm8k import user_content
from kvreg.app.flywheel.loop import FlywheelSpec, Progress, Registry
from kvreg.app.graft_receipt import host_of
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.engine.check import check_graft
from kvreg.engine.graft import continue_decoding, graft
from kvreg.engine.runtime import LoadedModel
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.remote.auditlog import RemoteLog
from kvreg.remote.http import RegistryClient
from kvreg.remote.pulling import PullReport, pull
from kvreg.remote.pushing import PushReport, push
from kvreg.remote.receipts import build_receipt, send_receipt
from kvreg.remote.remotes import Credentials, RemoteConfig
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home


def _login(home: Home, url: str, token: str) -> dict[str, Any]:
    """``kvreg remote add`` and ``kvreg login`` (the token is checked with whoami first)."""
    remote = RemoteConfig(home).add(REMOTE, url)
    with RegistryClient(remote.url, token, remote_name=REMOTE, retries=2) as client:
        who = client.whoami()
    Credentials(home).set(REMOTE, token)
    return who


def _client(home: Home) -> RegistryClient:
    """A client for the demo remote with the token ``kvreg login`` stored (not ``$KVREG_TOKEN``)."""
    remote = RemoteConfig(home).get(REMOTE)
    auth = Credentials(home, environ={}).auth_for(REMOTE)
    return RegistryClient(remote.url, None if auth is None else auth.token, remote_name=REMOTE, retries=2)


def _send_receipt(
    client: RegistryClient, lm: LoadedModel, ref: RefName, digest: str, row: dict[str, Any], key: SigningKey
) -> dict[str, Any]:
    """Send the receipt of the checked graft ``row`` (a :func:`graft_row`) of ``ref``, signed with ``key``."""
    receipt = build_receipt(
        namespace=ref.namespace,
        ref=ref.name,
        digest=digest,
        host=host_of(lm),
        witness="skipped" if row["probe"] is None else "pass",
        check=row["check"],
        graft={
            "graft_tokens": row["graft_tokens"],
            "prompt_tokens": row["prompt_tokens"],
            "decoded_tokens": row["decoded_tokens"],
            "whole": row["whole"],
        },
        key=key,
    )
    sent = send_receipt(client, receipt, key)
    return {
        **sent.to_dict(),
        "ref": str(ref),
        "digest": digest,
        "byte_exact": receipt.byte_exact,
        "signer": key.public_key.keyid,
    }


def _send_exam_receipts(
    client: RegistryClient, asking: Home, report: dict[str, Any], key: SigningKey
) -> list[dict[str, Any]]:
    """A graft receipt for each checked graft of the flywheel's second exam, sent from the asking home.

    The exam records, per answer, the artifact's ref, the tokens grafted and decoded and whether
    every decode step had SHA-256-equal logits to a fresh computation; not whether a witness
    probe ran (the receipt says ``skipped``) nor, for a graft that was not byte-exact, how many
    steps were (the receipt leaves it out)."""
    out: list[dict[str, Any]] = []
    for answer in report["answers"]["after"]:
        ref, exact = answer.get("artifact"), answer.get("byte_exact")
        if answer.get("mode") == "off" or not ref or "/" not in ref or exact is None:
            continue
        artifact = open_artifact(asking, ref)
        steps = int(answer["decoded_tokens"])
        check: dict[str, Any] = {"byte_exact": bool(exact), "steps": steps}
        if exact:
            check["sha256_equal_steps"] = steps
        receipt = build_receipt(
            namespace=ref.split("/", 1)[0],
            ref=ref.split("/", 1)[1],
            digest=str(artifact.digest),
            host=report["host"],
            witness="skipped",
            check=check if steps > 0 else None,
            graft=None,
            key=key,
        )
        sent = send_receipt(client, receipt, key)
        out.append({**sent.to_dict(), "ref": ref, "byte_exact": receipt.byte_exact})
    return out


def _timed(report: PushReport | PullReport, started: float) -> dict[str, Any]:
    return {**report.to_dict(), "seconds": round(time.perf_counter() - started, 4)}


class RegistryAct:
    """The registry act: :meth:`prepare` bootstraps the data folder and starts the server,
    :meth:`run` does the rest; leaving the ``with`` block stops the server."""

    def __init__(self, work: Path, home: Home, key: SigningKey, say: Progress) -> None:
        self.work = work
        self.home = home
        self.key = key
        self.say = say
        self.root = work / "registry"
        self.data_dir = self.root / "data"
        self.server = Server(self.data_dir, self.root / "server.log")
        self.tokens = Tokens(admin="", reader="")
        self.bootstrap_seconds = 0.0

    def __enter__(self) -> RegistryAct:
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
        self.tokens = bootstrap(self.data_dir, self.key)
        self.bootstrap_seconds = time.perf_counter() - t
        self.say("starting it in the background: kvreg serve on 127.0.0.1 (SQLite + object folder)")
        self.server.start()

    def flywheel(self, spec: FlywheelSpec, threads: int, failures: list[str]) -> dict[str, Any]:
        """The flywheel act: library pushed by this home, second exam in a fresh home that pulls on demand."""
        asking = Home(self.work / "flywheel-home").ensure()
        policy = TrustPolicy()
        policy.allow(FLYWHEEL_NAMESPACE, self.key.public_key)
        save_trust_policy(policy, asking.trust_path)
        url, _ = self.server.wait()
        self.say(
            f"flywheel: a fresh home logs in as {READER_USER} and trusts only the demo key for "
            f"{FLYWHEEL_NAMESPACE}; its exam pulls what it grafts on demand"
        )
        _login(asking, url, self.tokens.reader)
        if all(r.name != REMOTE for r in RemoteConfig(self.home).list()):  # run() has not logged in
            _login(self.home, url, self.tokens.admin)
        with _client(self.home) as client, _client(asking) as reader:
            audit = RemoteLog(asking, REMOTE, reader)
            registry = Registry(
                push_client=client, reader=RemoteSource(client=reader, audit=audit), home=asking
            )
            report = run_flywheel_act(self.home, self.key, spec, threads, registry, self.say, failures)
            audit.save()
        report["registry"] = {
            "url": url,
            "namespace": FLYWHEEL_NAMESPACE,
            "asking_home": str(asking.root),
            "data": str(self.data_dir),
        }
        with _client(asking) as reader:
            report["receipts"] = _send_exam_receipts(reader, asking, report, self.key)
        if spec.task == "addition" and not all(r["created"] for r in report["receipts"]):
            failures.append("the registry did not store every receipt of the flywheel's grafts")
        repeat, _ = spec.problems()
        if spec.task == "gsm8k" and repeat:
            # The first repeat question as `kvreg ask --chat --prompt-file` takes it (one user turn).
            question = self.work / "question.txt"
            question.write_text(user_content(repeat[0].question), encoding="utf-8")
            report["registry"]["question_file"] = str(question)
        return report

    def run(self, lm: LoadedModel, refs: list[RefName], failures: list[str]) -> dict[str, Any]:
        started = time.perf_counter()
        say, home, key = self.say, self.home, self.key
        ref, longer = refs
        second = Home(self.work / "second-home").ensure()
        policy = TrustPolicy()
        policy.allow(NAMESPACE, key.public_key)
        save_trust_policy(policy, second.trust_path)

        url, waited = self.server.wait()
        say(f"registry up at {url}; remote add + login ({ADMIN_USER} here, {READER_USER} in a second home)")
        who = _login(home, url, self.tokens.admin)
        who_reader = _login(second, url, self.tokens.reader)
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
            grafted = graft_row(
                "pulled artifact", lm, outcome, decoded, check_graft(lm, outcome.plan, decoded)
            )
            say(f"sending the graft receipt of {ref} to the registry (signed with the demo key)")
            receipt = _send_receipt(reader, lm, ref, str(artifact.digest), grafted, key)

            say(f"pushing {ref} again")
            t = time.perf_counter()
            again = _timed(push(home, client, ref, jobs=TRANSFER_JOBS), t)
            say(f"pushing and pulling {longer}, which shares its first chunks with {ref}")
            t = time.perf_counter()
            pushed_longer = _timed(push(home, client, longer, jobs=TRANSFER_JOBS), t)
            t = time.perf_counter()
            pulled_longer = _timed(pull(second, reader, longer, jobs=TRANSFER_JOBS), t)
        stored_objects = stored(self.data_dir)

        if pulled["digest"] != pushed["digest"]:
            failures.append("the pulled manifest digest differs from the pushed one")
        if not grafted["check"]["byte_exact"]:
            failures.append("the graft of the pulled artifact is not byte-exact")
        if not receipt["created"] or receipt["log_index"] is None:
            failures.append("the registry did not store the graft receipt as a new entry")
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
            "receipt": receipt,
            "second_push": again,
            "push_longer": pushed_longer,
            "pull_longer": pulled_longer,
            "stored": stored_objects,
            # bootstrap, then this act after the server was started (the acts between excluded)
            "seconds": round(self.bootstrap_seconds + time.perf_counter() - started, 3),
        }
