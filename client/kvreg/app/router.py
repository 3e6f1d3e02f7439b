"""The router: given a prompt, find the stored state to graft — or none (docs/design.md, "Flows").

Two modes:

- **prefix** — pure acceleration. The prompt's block keys (``kvreg.core.blockkey``,
  under the local engine's model, tokenizer and config fingerprints and block size)
  are looked up in the local route index (``kvreg.store.router_index``); the artifact
  sharing the longest block-aligned prefix is grafted for those k blocks only and
  the rest of the prompt is prefilled on the absolute grid, so the next-token logits
  and every decode step are bit for bit those of a run with no cache.
- **knowledge** — an artifact whose tokens *begin with* the prompt (the question),
  whose signed manifest records the verdict ``pass`` and whose signer the local trust
  policy trusts for its namespace, grafted whole: the model continues from the
  verified solution. The prompt's full blocks are found by block key.

Every candidate is opened through the signature check (``open_artifact``: a key
trusted for the ref's namespace, or ``"*"`` for a digest no ref names); prefix mode
needs a trusted signer too, since poisoned KV would change the output. The engine
half (``kvreg.engine.router``) then takes it into the plan or refuses it
(fingerprints, verdict, every token it would graft). A refusal never raises out of
:func:`route` or :func:`generate`: the plan says ``fallback: true`` with the reason
and the error, and :func:`generate` runs the prompt with no cache instead.

:func:`route_prompt` is the ``kvreg route`` use case: load the model, optionally
rebuild the route index, plan, report. Nothing is grafted or decoded there.

This module does not pull from registries (``kvreg.app.ask`` does) and does not
write to the store (the route index is a cache next to it). It imports the
engine inside its functions, once a model is loaded, so importing it never
imports torch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.loader import load_engine
from kvreg.app.prompts import Prompt, encode_prompt
from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, UsageError
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.store.artifacts import Artifact, Target, open_artifact, resolve
from kvreg.store.home import Home
from kvreg.store.router_index import IndexedManifest, RouteIndex

if TYPE_CHECKING:
    from kvreg.engine.router import RoutedGeneration, RoutePlan
    from kvreg.engine.runtime import LoadedModel

log = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("prefix", "knowledge")


def _namespace_refs(home: Home) -> dict[Digest, list[Target]]:
    refs: dict[Digest, list[Target]] = {}
    entries, _problems = home.refs.scan()
    for e in entries:
        refs.setdefault(e.digest, []).append(Target(e.ref, e.digest))
    return refs


def _open_trusted(
    home: Home, digest: Digest, refs: dict[Digest, list[Target]], policy: TrustPolicy
) -> Artifact:
    """The artifact, opened under the first ref whose namespace trusts its signer."""
    targets = refs.get(digest) or [Target(None, digest)]
    errors: list[KvregError] = []
    for target in targets:
        try:
            return open_artifact(home, target, trust=policy)
        except KvregError as exc:
            errors.append(exc)
    raise errors[0]


def _skip(plan: RoutePlan, digest: Digest, error: KvregError | str, ref: object = None) -> None:
    entry: dict[str, Any] = {"manifest_digest": str(digest), "ref": None if ref is None else str(ref)}
    if isinstance(error, KvregError):
        entry.update(reason=error.message, code=error.code)
    else:
        entry.update(reason=error, code=None)
    plan.skipped.append(entry)
    log.info("route: skipping %s: %s", digest, entry["reason"])


def route(
    home: Home,
    lm: LoadedModel,
    prompt: Sequence[int],
    mode: str = "prefix",
    *,
    artifact: str | None = None,
    trust: TrustPolicy | None = None,
    require_chunks: bool = True,
) -> RoutePlan:
    """Plan a graft for ``prompt`` (token ids, as the model reads them, BOS included).

    ``artifact`` (``NS/NAME`` or ``sha256:…``) skips the lookup and routes to that
    artifact; it is checked like any other and refused if it does not fit.
    ``require_chunks=False`` accepts an artifact whose chunks are not all in the
    local store (a caller that fetches them on demand, ``kvreg.app.ask``); the
    manifest and tokens object must be there.
    """
    # Imported here, not at the top: the engine imports torch, and the model is loaded by now.
    from kvreg.engine import router as engine_router

    if mode not in MODES:
        raise UsageError(f"unknown route mode {mode!r}", hint=f"choose one of: {', '.join(MODES)}")
    prompt = list(prompt)
    if not prompt:
        raise UsageError("the prompt has no tokens")
    plan = engine_router.RoutePlan(mode=mode, prompt_tokens=len(prompt))
    policy = trust if trust is not None else load_trust_policy(home.trust_path)
    accept = engine_router.accept_prefix if mode == "prefix" else engine_router.accept_knowledge
    if artifact is not None:
        try:
            target = resolve(home, artifact)
            accept(plan, home, lm, open_artifact(home, target, trust=policy), prompt, require_chunks)
        except KvregError as exc:
            log.warning("route: refusing %s: %s", artifact, exc.message)
            return plan.refuse(exc)
        return plan
    with RouteIndex(home) as index:
        plan.index = index.sync().to_dict()
        candidates = (
            _prefix_candidates(index, lm, prompt)
            if mode == "prefix"
            else _knowledge_candidates(index, lm, prompt, engine_router.PASS)
        )
    refs = _namespace_refs(home)
    for digest in candidates:
        try:
            opened = _open_trusted(home, digest, refs, policy)
            accept(plan, home, lm, opened, prompt, require_chunks)
        except KvregError as exc:
            _skip(plan, digest, exc, (refs.get(digest) or [Target(None, digest)])[0].ref)
            continue
        return plan
    if plan.skipped:
        plan.reason = f"no usable artifact: {len(plan.skipped)} candidate(s) passed over"
        last = plan.skipped[-1]
        plan.error = {"code": last["code"] or "ROUTE_NONE", "message": last["reason"]}
    else:
        plan.reason = (
            "no stored block matches the prompt"
            if mode == "prefix"
            else "no stored artifact begins with the prompt"
        )
    return plan


def _fps(lm: LoadedModel) -> tuple[Digest, Digest, Digest]:
    return lm.model_fp, lm.tokenizer_fp, lm.config.fingerprint


def _prefix_candidates(index: RouteIndex, lm: LoadedModel, prompt: list[int]) -> list[Digest]:
    """Artifacts sharing blocks with the prompt, longest shared prefix first."""
    keys = block_keys(*_fps(lm), prompt, lm.config.block_size)
    best: dict[Digest, int] = {}
    for hit in index.lookup(keys):
        if hit.index < len(keys) and keys[hit.index] == hit.block_key:
            best[hit.digest] = max(best.get(hit.digest, -1), hit.end)
    return [d for d, _ in sorted(best.items(), key=lambda item: (-item[1], str(item[0])))]


def _knowledge_candidates(index: RouteIndex, lm: LoadedModel, prompt: list[int], passed: str) -> list[Digest]:
    """Artifacts that may begin with the prompt: its full blocks by key, then by fingerprint.

    Ranked: verdict ``passed`` (``pass``) recorded, then an artifact whose own prompt is exactly
    this prompt, then the newest. The verdict and tokens are checked again after the
    signature (the index is only a cache).
    """
    block = lm.config.block_size
    full = len(prompt) // block
    rows: list[IndexedManifest]
    if full:
        key = block_keys(*_fps(lm), prompt[: full * block], block)[-1]
        digests = {h.digest for h in index.lookup([key]) if h.index == full - 1}
        rows = [m for d in digests if (m := index.manifest(d)) is not None]
    else:
        model_fp, tokenizer_fp, config_fp = _fps(lm)
        rows = index.manifests(model_fp=model_fp, tokenizer_fp=tokenizer_fp, config_fp=config_fp)
    rows = [m for m in rows if m.token_count >= len(prompt) and m.block_size == block]
    rows.sort(key=lambda m: str(m.digest))
    rows.sort(key=lambda m: m.created or "", reverse=True)
    rows.sort(key=lambda m: (m.verdict != passed, m.prompt_tokens != len(prompt)))
    return [m.digest for m in rows]


# --- generating, with or without the routed graft ------------------------------------------


def generate(
    lm: LoadedModel,
    home: Home,
    prompt: Sequence[int],
    *,
    mode: str = "prefix",
    max_new_tokens: int = 32,
    artifact: str | None = None,
    trust: TrustPolicy | None = None,
    verify: bool = True,
    probe: bool = True,
    stop_at_eos: bool = False,
) -> RoutedGeneration:
    """Route, compare tokens, graft and decode; on any refusal, generate with no cache."""
    # Imported here, not at the top: the engine imports torch, and the model is loaded by now.
    from kvreg.engine.router import generate_planned

    started = time.perf_counter()
    plan = route(home, lm, prompt, mode, artifact=artifact, trust=trust)
    timings = {"route_seconds": time.perf_counter() - started}
    return generate_planned(
        lm,
        home,
        prompt,
        plan,
        max_new_tokens=max_new_tokens,
        verify=verify,
        probe=probe,
        stop_at_eos=stop_at_eos,
        timings=timings,
    )


# --- the ``kvreg route`` use case ----------------------------------------------------------


@dataclass(frozen=True)
class RouteRequest:
    """Route ``prompt_text`` under ``model`` (or, without a model, only rebuild the index)."""

    model: Path | None = None
    prompt_text: Prompt | None = None  # text, or chat messages rendered with the model's template
    mode: str = "prefix"
    artifact: str | None = None  # route to this artifact (NS/NAME or sha256:...), checked
    reindex: bool = False  # rebuild the route index from the store first
    engine: EngineOptions = field(default_factory=EngineOptions)


@dataclass
class RouteReport:
    reindexed: dict[str, int] | None = None  # the rebuild's counts, with reindex
    plan: dict[str, Any] | None = None  # RoutePlan.to_dict(), with a model
    config_fingerprint: str | None = None
    model_fingerprint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.reindexed is not None:
            data["reindexed"] = self.reindexed
        if self.plan is not None:
            data.update(self.plan)
            data["config_fingerprint"] = self.config_fingerprint
            data["model_fingerprint"] = self.model_fingerprint
        return data


def route_prompt(home: Home, request: RouteRequest, feedback: Feedback | None = None) -> RouteReport:
    """Which stored state the router would graft for a prompt, and why (or only a reindex)."""
    feedback = feedback or Silent()
    report = RouteReport()
    if request.reindex:
        with feedback.status("rebuilding the route index"), RouteIndex(home) as index:
            report.reindexed = index.rebuild().to_dict()
    if request.model is None or request.prompt_text is None:
        return report
    lm, _ = load_engine(feedback, request.model, request.engine.for_new(), home)
    prompt = encode_prompt(lm, request.prompt_text)
    with feedback.status(f"routing {len(prompt)} prompt tokens ({request.mode})"):
        plan = route(home, lm, prompt, request.mode, artifact=request.artifact)
    report.plan = plan.to_dict()
    report.config_fingerprint = str(lm.config.fingerprint)
    report.model_fingerprint = str(lm.model_fp)
    return report
