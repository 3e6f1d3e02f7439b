"""Ask: answer a prompt from the best stored state — local, or fetched from a registry on demand.

This is what ``kvreg ask`` and the flywheel's exam call. One request runs:

1. **Discover** (only with a ``RemoteSource``, ``kvreg.app.discovery``): the prompt's block keys
   (``kvreg.core.blockkey``, under the local engine's fingerprints and block size)
   go to the registry's route endpoint — the tokens never leave the host. An OCI
   registry has no route endpoint: the candidates are the artifacts tagged in the
   namespaces the request names (``--namespace``), listed once and kept a while by a
   long-running source, and routing is local. Each
   useful candidate that is not in the local store yet is pulled *lazily*
   (``kvreg.remote.pulling.pull(lazy=True)``): its signature is checked against
   the local trust policy for its namespace and only the manifest and the tokens
   object are downloaded, verified, so the local router can compare tokens.
2. **Route** (``kvreg.app.router``) over the local store, in the mode asked:
   ``knowledge`` (a verified, trusted artifact that begins with the prompt, grafted
   whole), ``prefix`` (the longest block-aligned shared prefix; output identical to
   a run with no cache), ``auto`` (knowledge, then prefix) or ``off`` (no cache).
3. **Fetch** (with a remote): exactly the chunks the chosen graft reads
   (``kvreg.remote.ondemand``), each hashed against the signed manifest before it
   enters the store, and leased so that eviction leaves them alone during the graft.
4. **Graft and decode** (``kvreg.engine.router.generate_planned``), which compares the tokens
   once more right before the graft. Any refusal — misrouted tokens, another
   model or config, an unverified or untrusted artifact, a chunk that fails its
   digest or cannot be fetched — falls back to plain generation and says why.

:func:`answer` is the ``kvreg ask`` use case: load the model, open the registry
(with a remote), tokenize the prompt as ``graft --prompt-file`` does, ask, and
report the completion. The prompt may be chat messages (``kvreg.app.prompts``),
rendered with the model's template as a chat client renders them, so a repeat
question finds the artifact deposited from the same messages. Falling back to plain
generation is an answer, not a failure.

Nothing here prints; the results are plain objects the CLI renders. The engine
is imported inside the functions, once the model is loaded, so importing this
module never imports torch.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.app.discovery import RemoteReport, RemoteSource, discover, discover_again_after_miss, remote_source
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.loader import load_engine
from kvreg.app.prompts import Prompt, encode_prompt
from kvreg.app.router import MODES as ROUTE_MODES
from kvreg.app.router import route
from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, UsageError
from kvreg.core.names import RefName
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.remote.ondemand import ensured, needed_for_graft
from kvreg.store import access_log, probes
from kvreg.store.artifacts import Artifact
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.engine.router import RoutedGeneration, RoutePlan
    from kvreg.engine.runtime import Chooser, LoadedModel, TokenSink

log = logging.getLogger(__name__)

ASK_MODES: tuple[str, ...] = ("auto", *ROUTE_MODES, "off")
_TRY: dict[str, tuple[str, ...]] = {
    "auto": ("knowledge", "prefix"),
    "knowledge": ("knowledge",),
    "prefix": ("prefix",),
    "off": (),
}


@dataclass
class AskResult:
    requested_mode: str
    generation: RoutedGeneration
    completion_tokens: list[int]  # after the prompt: the artifact's rest (knowledge) + decoded
    refused: list[dict[str, Any]]  # the plans of modes tried before the one used, and why they fell back
    remote: RemoteReport | None
    timings: dict[str, float]
    remembered_probe: dict[str, Any] | None = None  # the passed probe that let this graft skip its own

    @property
    def plan(self) -> RoutePlan:
        return self.generation.plan

    @property
    def used_mode(self) -> str:
        """``knowledge`` or ``prefix`` when a graft was used; ``off`` when the prompt ran with no cache."""
        return "off" if self.generation.fallback else self.plan.mode

    @property
    def decoded_tokens(self) -> int:
        return len(self.generation.decoded.tokens)

    @property
    def grafted_tokens(self) -> int:
        return 0 if self.generation.fallback else self.plan.graft_tokens

    @property
    def prefilled_tokens(self) -> int:
        return self.plan.prompt_tokens if self.generation.fallback else self.plan.prefill_tokens

    def _probe(self) -> dict[str, Any] | None:
        outcome = self.generation.outcome
        if outcome is None:
            return None
        if outcome.probe is None and self.remembered_probe is not None:
            return {
                "skipped": True,
                "reason": "a probe of this artifact passed before under this config",
                "passed_at": self.remembered_probe.get("passed_at"),
                "remembered": self.remembered_probe.get("probe"),
            }
        return outcome.probe

    def to_dict(self, completion: str | None = None) -> dict[str, Any]:
        plan = self.plan.to_dict()
        return {
            "requested_mode": self.requested_mode,
            "mode": self.used_mode,
            "fallback": self.generation.fallback,
            "reason": plan["reason"],
            "error": plan["error"],
            "artifact": None if self.generation.fallback else plan["artifact"],
            "prompt_tokens": self.plan.prompt_tokens,
            "grafted_tokens": self.grafted_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "decoded_tokens": self.decoded_tokens,
            "blocks": 0 if self.generation.fallback else plan["blocks"],
            "probe": self._probe(),
            "completion": completion,
            "output_tokens": self.generation.decoded.tokens,
            "skipped": plan["skipped"],
            "refused_modes": self.refused,
            "remote": None if self.remote is None else self.remote.to_dict(),
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
        }


def ask(
    lm: LoadedModel,
    home: Home,
    prompt: Sequence[int],
    *,
    mode: str = "auto",
    remote: RemoteSource | None = None,
    max_new_tokens: int = 128,
    stop_at_eos: bool = True,
    trust: TrustPolicy | None = None,
    verify: bool = True,
    probe: bool = True,
    choose: Chooser | None = None,
    on_token: TokenSink | None = None,
    remember_probes: bool = False,
) -> AskResult:
    """Answer ``prompt`` (token ids, BOS included): discover, route, fetch, graft, decode.

    ``choose`` (sampling, ``kvreg.engine.sampling``) and ``on_token`` (told each completion
    token as it comes; False stops) go to the decoding; without them it is greedy, whole.
    With ``remember_probes``, a witness probe that passed is remembered in the store
    (``kvreg.store.probes``) and a later graft of the same artifact under the same config
    skips it; the result's ``probe`` then says so.
    """
    # Imported here, not at the top: the engine imports torch, and the model is loaded by now.
    from kvreg.engine.router import RoutePlan, generate_planned

    if mode not in ASK_MODES:
        raise UsageError(f"unknown ask mode {mode!r}", hint=f"choose one of: {', '.join(ASK_MODES)}")
    if max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be at least 1")
    prompt = list(prompt)
    if not prompt:
        raise UsageError("the prompt has no tokens")
    policy = trust if trust is not None else load_trust_policy(home.trust_path)
    tries = _TRY[mode]
    timings: dict[str, float] = {}
    started = time.perf_counter()
    report: RemoteReport | None = None
    if remote is not None and tries:
        t = time.perf_counter()
        report = discover(home, lm, prompt, tries, remote, policy)
        timings["discover_seconds"] = time.perf_counter() - t

    t = time.perf_counter()
    plans = _route_modes(home, lm, prompt, tries, policy, remote)
    if report is not None and remote is not None and plans and plans[-1].fallback:
        again = discover_again_after_miss(home, remote, policy)
        if again is not None and again.pulled:  # new artifacts on the registry: route once more
            report.merge(again)
            plans = _route_modes(home, lm, prompt, tries, policy, remote)
    timings["route_seconds"] = time.perf_counter() - t
    if not plans:
        chosen = RoutePlan(mode="off", prompt_tokens=len(prompt), reason="routing is off (--mode off)")
    else:
        chosen = plans[-1]
    refused = [p.to_dict() for p in plans[:-1]]

    options: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "verify": verify,
        "probe": probe,
        "stop_at_eos": stop_at_eos,
        "timings": timings,
        "choose": choose,
        "on_token": on_token,
    }
    remembered: dict[str, Any] | None = None
    chosen_digest = chosen.artifact.digest if chosen.artifact is not None else None
    if remember_probes and probe and chosen_digest is not None:
        remembered = probes.remembered(home, chosen_digest, lm.config.fingerprint)
        if remembered is not None:
            options["probe"] = False
    if remote is not None and chosen.artifact is not None and report is not None:
        generation = _fetch_and_generate(lm, home, prompt, chosen, remote, report, options)
    else:
        generation = generate_planned(lm, home, prompt, chosen, **options)
    outcome = generation.outcome
    passed = outcome.probe if outcome is not None else None  # it ran and passed (a failure refuses)
    if remember_probes and remembered is None and chosen_digest is not None and passed is not None:
        when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        probes.remember(home, chosen_digest, lm.config.fingerprint, passed, when=when)
    timings = dict(generation.timings)
    timings["total_seconds"] = time.perf_counter() - started
    generation.timings = timings
    completion = list(generation.tokens[len(prompt) :]) + list(generation.decoded.tokens)
    skipped_probe = remembered if outcome is not None and outcome.probe is None else None
    return AskResult(mode, generation, completion, refused, report, timings, skipped_probe)


def _route_modes(
    home: Home,
    lm: LoadedModel,
    prompt: list[int],
    tries: Sequence[str],
    policy: TrustPolicy,
    remote: RemoteSource | None,
) -> list[RoutePlan]:
    """The plans of the modes tried, in order, up to the first that does not fall back."""
    plans: list[RoutePlan] = []
    for m in tries:
        plan = route(home, lm, prompt, m, trust=policy, require_chunks=remote is None)
        plans.append(plan)
        if not plan.fallback:
            break
    return plans


def _source_namespace(home: Home, needed: Sequence[Digest], remote: str | None) -> str | None:
    """The registry namespace a lazy pull from ``remote`` left one of ``needed`` in (the pull's
    record, ``kvreg.store.access_log``): on an OCI registry, the repository to fetch from."""
    if all(home.objects.has(d) for d in needed):
        return None
    records = access_log.read_access_log(home)
    for d in needed:
        record = records.get(d.hex)
        deferred = None if record is None else record.deferred
        if deferred is not None and deferred.remote == remote:
            with contextlib.suppress(KvregError):
                return RefName.parse(deferred.remote_ref).namespace
    return None


@contextlib.contextmanager
def _objects_for(
    home: Home, artifact: Artifact, blocks: int, remote: RemoteSource, report: RemoteReport, probe: bool
) -> Iterator[None]:
    """Make the objects a graft of ``blocks`` chunks of ``artifact`` reads present, leased for the block."""
    manifest = artifact.manifest
    needed = needed_for_graft(manifest, blocks, witness=not probe)
    namespace = _source_namespace(home, needed, remote.client.remote_name)
    if namespace is None and artifact.ref is not None:
        namespace = artifact.ref.namespace
    if namespace is None:
        missing = [d for d in needed if not home.objects.has(d)]
        if missing:
            raise UsageError(
                f"artifact {manifest.digest.short()} has no local ref, so its registry namespace is unknown"
            )
        yield
        return
    with ensured(
        home, remote.client, namespace, manifest, needed, jobs=remote.jobs, progress=remote.progress
    ) as got:
        report.fetched_objects += len(got.fetched)
        report.fetched_bytes += got.bytes_fetched
        report.evicted += len(got.evicted)
        yield


def _fetch_and_generate(
    lm: LoadedModel,
    home: Home,
    prompt: list[int],
    plan: RoutePlan,
    remote: RemoteSource,
    report: RemoteReport,
    options: dict[str, Any],
) -> RoutedGeneration:
    """Fetch the chunks ``plan`` reads (leased while grafting), then graft; refuse → plain."""
    from kvreg.engine.router import generate_planned  # torch; the model is loaded by now

    timings: dict[str, float] = options["timings"]
    t = time.perf_counter()
    if plan.artifact is None:
        return generate_planned(lm, home, prompt, plan, **options)
    try:
        with _objects_for(home, plan.artifact, plan.blocks, remote, report, options["probe"]):
            timings["fetch_seconds"] = time.perf_counter() - t
            return generate_planned(lm, home, prompt, plan, **options)
    except KvregError as exc:
        log.warning("ask: cannot fetch what the graft needs, generating without it: %s", exc.message)
        timings.setdefault("fetch_seconds", time.perf_counter() - t)
        report.error = exc.to_dict()
        plan.refuse(exc)
        return generate_planned(lm, home, prompt, plan, **options)


# --- the ``kvreg ask`` use case -------------------------------------------------------------


@dataclass(frozen=True)
class AskRequest:
    model: Path
    prompt_text: Prompt  # text, or chat messages rendered with the model's template
    mode: str = "auto"
    remote: str | None = None  # also route over this registry (kvreg remote add)
    namespaces: Sequence[str] = ()  # with remote: route within these only (default: all readable)
    max_new_tokens: int = 128
    engine: EngineOptions = field(default_factory=EngineOptions)


@dataclass
class AskReport:
    result: AskResult
    completion: str
    config_fingerprint: str
    model_fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        data = self.result.to_dict(self.completion)
        data["config_fingerprint"] = self.config_fingerprint
        data["model_fingerprint"] = self.model_fingerprint
        return data


def answer(home: Home, request: AskRequest, feedback: Feedback | None = None) -> AskReport:
    """Answer ``request.prompt_text`` with the best stored state that fits it (or none, and why)."""
    feedback = feedback or Silent()
    if request.namespaces and request.remote is None:
        raise UsageError("--namespace needs --remote")
    lm, _ = load_engine(feedback, request.model, request.engine.for_new(), home)
    prompt = encode_prompt(lm, request.prompt_text)
    with (
        remote_source(home, request.remote, request.namespaces) as source,
        feedback.status(f"answering ({request.mode}, {len(prompt)} tokens)"),
    ):
        result = ask(
            lm, home, prompt, mode=request.mode, remote=source, max_new_tokens=request.max_new_tokens
        )
    return AskReport(
        result=result,
        completion=lm.tokenizer.decode(result.completion_tokens, skip_special_tokens=True),
        config_fingerprint=str(lm.config.fingerprint),
        model_fingerprint=str(lm.model_fp),
    )
