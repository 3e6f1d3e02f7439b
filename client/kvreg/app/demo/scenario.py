"""``kvreg demo``'s scenario: the whole story on embedded defaults, offline.

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

It returns a :class:`DemoReport` (``to_dict`` for JSON); the CLI renders it.
Nothing here prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app.demo.flywheel_act import run_flywheel_act
from kvreg.app.demo.registry_act import RegistryAct
from kvreg.app.demo.rows import deposit_row, graft_row
from kvreg.app.demo.texts import (
    ANSWER,
    ARCH,
    BLOCK_SIZE,
    DECODE_STEPS,
    EXTENSION,
    FOLLOW_UP,
    QUESTION,
    SEED,
    SOLUTION,
    TIMING_REPEATS,
)
from kvreg.app.flywheel.loop import FlywheelSpec, Progress
from kvreg.core.errors import FingerprintMismatchError, KvregError
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


@dataclass
class DemoReport:
    """What the demo did and found; ``to_dict`` is ``kvreg demo --json``'s document.

    The parts are the plain dicts the JSON shows (``registry`` and ``flywheel`` are
    None when left out, or ``{"error": ...}`` when their act failed); the demo
    passed when ``failures`` is empty.
    """

    workdir: str
    home: str
    model: dict[str, Any]
    config: dict[str, Any]
    question: str
    deposits: list[dict[str, Any]]
    dedupe: dict[str, Any]
    grafts: list[dict[str, Any]]
    timing: dict[str, Any]
    refusal: dict[str, Any] | None
    recompute: dict[str, Any]
    registry: dict[str, Any] | None
    flywheel: dict[str, Any] | None
    failures: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "seconds"}
        return {**data, "ok": self.ok, "seconds": self.seconds}


def _noop(_: str) -> None:
    pass


def run_demo(
    workdir: str | Path,
    *,
    threads: int = 2,
    registry: bool = True,
    flywheel: FlywheelSpec | None = None,
    progress: Progress | None = None,
) -> DemoReport:
    """Run the demo in ``workdir`` (which should be empty); return the report.

    ``registry=False`` leaves out the registry act (``report.registry`` is None).
    ``flywheel`` (a :class:`~kvreg.app.flywheel.loop.FlywheelSpec`) adds the flywheel act: with the
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
    whole = graft_row("whole artifact", lm, outcome, decoded, check_graft(lm, outcome.plan, decoded))

    blocks = max(1, manifest.token_count // BLOCK_SIZE - 1)
    say(f"grafting the first {blocks} blocks and prefilling a new suffix")
    prompt = tokens + lm.encode(FOLLOW_UP, first=False)
    outcome2 = graft(lm, home, manifest, tokens, prompt, blocks=blocks)
    decoded2 = continue_decoding(lm, outcome2, DECODE_STEPS)
    boundary = graft_row(
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
        act: RegistryAct | None = None
        if registry:
            act = stack.enter_context(RegistryAct(work, home, key, say))
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
                    flywheel_report = run_flywheel_act(home, key, flywheel, threads, None, say, failures)
            except KvregError as e:
                failures.append(f"the flywheel act failed: {e.code}: {e.message}")
                flywheel_report = {"error": e.to_dict()}
        if act is not None:
            say("stopping the registry")
            act.server.stop()

    return DemoReport(
        workdir=str(work),
        home=str(home.root),
        model={"dir": str(model_dir), "fingerprint": str(lm.model_fp), **lm.info},
        config={
            "fingerprint": str(lm.config.fingerprint),
            "block_size": BLOCK_SIZE,
            "threads": threads,
            "dtype": settings.dtype,
            "attn_implementation": settings.attn_implementation,
            "profile": settings.profile,
        },
        question=QUESTION,
        deposits=[deposit_row(first), deposit_row(longer)],
        dedupe=dedupe,
        grafts=[whole, boundary],
        timing=timing,
        refusal=refusal,
        recompute=recompute,
        registry=shared_registry,
        flywheel=flywheel_report,
        failures=failures,
        seconds=round(time.perf_counter() - started, 3),
    )
