"""Route: given a prompt, find the stored state to graft — or none (DESIGN.md §3 "Route").

Two modes:

- **prefix** — pure acceleration. The prompt's block keys (``kvreg.core.blockkey``,
  under the local engine's model, tokenizer and config fingerprints and block size)
  are looked up in the local route index (``kvreg.store.router_index``); the artifact
  sharing the longest block-aligned prefix is grafted for those k blocks only and
  the rest of the prompt is prefilled on the absolute grid, so the next-token logits
  and every decode step are bit for bit those of a run with no cache. The graft
  point is always on the grid (k full blocks), or the exact end of an artifact that
  is the whole prompt; never an artifact's off-grid end followed by more prompt,
  which a plain run would not split there.
- **knowledge** — an artifact whose tokens *begin with* the prompt (the question),
  whose signed manifest records the verdict ``pass`` and whose signer the local trust
  policy trusts for its namespace, grafted whole: the model continues from the
  verified solution. The prompt's full blocks are found by block key; the tokens of
  the partial last block are compared from the tokens object.

Every candidate is opened through the signature check (``open_artifact``: a key
trusted for the ref's namespace, or ``"*"`` for a digest no ref names); prefix mode
needs a trusted signer too, since poisoned KV would change the output. Before any
graft the engine refuses an artifact made with another model, tokenizer or config
(``FingerprintMismatchError``, reused from the graft) and compares the artifact's
tokens with the prompt one by one over everything it would graft — the whole prompt
in knowledge mode — raising ``RouteMismatchError`` at the first difference. A
refusal never raises out of :func:`route` or :func:`generate`: the plan says
``fallback: true`` with the reason and the error, and :func:`generate` runs the
prompt with no cache instead. Never a silent wrong graft.

This module does not pull from registries and does not write to the store (the
route index is a cache next to it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kvreg.core.blockkey import block_keys
from kvreg.core.digest import Digest
from kvreg.core.errors import (
    KvregError,
    ObjectNotFoundError,
    RouteMismatchError,
    UnverifiedArtifactError,
    UsageError,
)
from kvreg.core.manifest import Manifest
from kvreg.core.trust import TrustPolicy
from kvreg.engine.graft import GraftOutcome, check_compatible, common_prefix, continue_decoding, graft
from kvreg.engine.runtime import Decoded, LoadedModel, decode, new_cache, prefill
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.store.artifacts import Artifact, Target, open_artifact, read_tokens, resolve
from kvreg.store.home import Home
from kvreg.store.router_index import IndexedManifest, RouteIndex

log = logging.getLogger(__name__)

Mode = Literal["prefix", "knowledge"]
MODES: tuple[str, ...] = ("prefix", "knowledge")
PASS = "pass"


@dataclass
class RoutePlan:
    """What to graft for a prompt, or why nothing is grafted (``fallback``)."""

    mode: str
    prompt_tokens: int
    artifact: Artifact | None = None
    artifact_tokens: list[int] | None = field(default=None, repr=False)
    blocks: int = 0  # chunks grafted
    graft_tokens: int = 0  # tokens taken from the artifact
    whole: bool = False  # the whole artifact is grafted
    reason: str | None = None  # why there is no artifact
    error: dict[str, Any] | None = None  # the refusal, when an artifact was refused
    skipped: list[dict[str, Any]] = field(default_factory=list)  # candidates passed over, and why
    index: dict[str, int] | None = None

    @property
    def fallback(self) -> bool:
        return self.artifact is None

    @property
    def prefill_tokens(self) -> int:
        """Tokens of the prompt computed after the graft (knowledge mode: none)."""
        if self.artifact is None:
            return self.prompt_tokens
        if self.mode == "knowledge":
            return 0
        return self.prompt_tokens - self.graft_tokens

    def refuse(self, error: KvregError) -> RoutePlan:
        self.artifact = None
        self.artifact_tokens = None
        self.blocks = self.graft_tokens = 0
        self.whole = False
        self.reason = error.message
        self.error = error.to_dict()
        return self

    def to_dict(self) -> dict[str, Any]:
        art: dict[str, Any] | None = None
        if self.artifact is not None:
            m = self.artifact.manifest
            art = {
                "ref": str(self.artifact.ref) if self.artifact.ref else None,
                "manifest_digest": str(self.artifact.digest),
                "token_count": m.token_count,
                "chunk_count": len(m.chunks),
                "block_size": m.block_size,
                "verdict": m.verification.verdict if m.verification else None,
                "verifier": m.verification.verifier if m.verification else None,
                "title": m.annotations.get("title"),
            }
        return {
            "mode": self.mode,
            "fallback": self.fallback,
            "reason": self.reason,
            "error": self.error,
            "artifact": art,
            "blocks": self.blocks,
            "graft_tokens": self.graft_tokens,
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens": self.prefill_tokens,
            "whole_artifact": self.whole,
            "skipped": self.skipped,
            "index": self.index,
        }


# --- the token comparison before every graft ----------------------------------------------


def verify_route(
    lm: LoadedModel, manifest: Manifest, artifact_tokens: Sequence[int], prompt: Sequence[int], upto: int
) -> None:
    """Refuse unless ``manifest`` fits the local engine and its first ``upto`` tokens are the prompt's.

    Raises ``FingerprintMismatchError`` (other model, tokenizer or config, every
    differing field named) or ``RouteMismatchError`` naming the first differing
    position. Returns nothing: there is no bool to forget.
    """
    check_compatible(lm, manifest)
    if len(artifact_tokens) != manifest.token_count:
        raise RouteMismatchError(
            f"artifact {manifest.digest.short()} has {len(artifact_tokens)} tokens, "
            f"its manifest says {manifest.token_count}"
        )
    if upto > len(prompt) or upto > len(artifact_tokens):
        raise RouteMismatchError(
            f"refusing to graft {upto} tokens of artifact {manifest.digest.short()}: the prompt has "
            f"{len(prompt)} tokens and the artifact {len(artifact_tokens)}",
            hint="the artifact was routed to another prompt; generating without it",
        )
    for i in range(upto):
        if artifact_tokens[i] != prompt[i]:
            raise RouteMismatchError(
                f"refusing to graft artifact {manifest.digest.short()}: its token {i} is "
                f"{artifact_tokens[i]}, the prompt's is {prompt[i]} (misrouted: another text)",
                hint="the artifact was computed for another prompt; generating without it",
                first_difference=i,
                manifest_digest=str(manifest.digest),
            )


# --- routing ---------------------------------------------------------------------------------


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


def _missing_chunks(home: Home, manifest: Manifest, count: int) -> int:
    return sum(1 for c in manifest.chunks[:count] if not home.objects.has(c.digest))


def _prefix_blocks(manifest: Manifest, tokens: Sequence[int], prompt: Sequence[int]) -> tuple[int, int, bool]:
    """``(blocks, graft_tokens, whole)`` of a prefix graft on the grid; blocks 0 when none."""
    block = manifest.block_size
    total = len(tokens)
    shared = common_prefix(list(tokens), list(prompt))
    if shared == total == len(prompt):
        return len(manifest.chunks), total, True  # the artifact is the whole prompt
    k = min(shared, total) // block
    if k * block == len(prompt):
        k -= 1  # keep at least one token to compute the next-token logits from, on the grid
    return max(k, 0), max(k, 0) * block, False


def _accept_prefix(
    plan: RoutePlan,
    home: Home,
    lm: LoadedModel,
    artifact: Artifact,
    prompt: Sequence[int],
    require_chunks: bool = True,
) -> None:
    manifest = artifact.manifest
    tokens = read_tokens(home, manifest)
    check_compatible(lm, manifest)
    blocks, graft_tokens, whole = _prefix_blocks(manifest, tokens, prompt)
    if blocks == 0:
        shared = common_prefix(tokens, list(prompt))
        raise RouteMismatchError(
            f"artifact {manifest.digest.short()} shares no graftable block with the prompt: "
            f"first difference at token {shared} (block size {manifest.block_size})",
            hint="the artifact was computed for another text; generating without it",
            first_difference=shared,
        )
    verify_route(lm, manifest, tokens, prompt, graft_tokens)
    missing = _missing_chunks(home, manifest, blocks) if require_chunks else 0
    if missing:
        raise ObjectNotFoundError(f"{missing} of the {blocks} chunks needed are not in the local store")
    plan.artifact, plan.artifact_tokens = artifact, tokens
    plan.blocks, plan.graft_tokens, plan.whole = blocks, graft_tokens, whole


def _accept_knowledge(
    plan: RoutePlan,
    home: Home,
    lm: LoadedModel,
    artifact: Artifact,
    prompt: Sequence[int],
    require_chunks: bool = True,
) -> None:
    manifest = artifact.manifest
    verification = manifest.verification
    if verification is None or verification.verdict != PASS:
        verdict = "none" if verification is None else repr(verification.verdict)
        raise UnverifiedArtifactError(
            f"artifact {manifest.digest.short()} is not verified (verdict {verdict})"
        )
    tokens = read_tokens(home, manifest)
    verify_route(lm, manifest, tokens, prompt, len(prompt))
    missing = _missing_chunks(home, manifest, len(manifest.chunks)) if require_chunks else 0
    if missing:
        raise ObjectNotFoundError(
            f"{missing} of the artifact's {len(manifest.chunks)} chunks are not in the local store"
        )
    plan.artifact, plan.artifact_tokens = artifact, tokens
    plan.blocks, plan.graft_tokens, plan.whole = len(manifest.chunks), len(tokens), True


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
    local store (a caller that fetches them on demand, ``kvreg.engine.ask``); the
    manifest and tokens object must be there.
    """
    if mode not in MODES:
        raise UsageError(f"unknown route mode {mode!r}", hint=f"choose one of: {', '.join(MODES)}")
    prompt = list(prompt)
    if not prompt:
        raise UsageError("the prompt has no tokens")
    plan = RoutePlan(mode=mode, prompt_tokens=len(prompt))
    policy = trust if trust is not None else load_trust_policy(home.trust_path)
    accept = _accept_prefix if mode == "prefix" else _accept_knowledge
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
            else _knowledge_candidates(index, lm, prompt)
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


def _knowledge_candidates(index: RouteIndex, lm: LoadedModel, prompt: list[int]) -> list[Digest]:
    """Artifacts that may begin with the prompt: its full blocks by key, then by fingerprint.

    Ranked: verdict ``pass`` recorded, then an artifact whose own prompt is exactly
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
    rows.sort(key=lambda m: (m.verdict != PASS, m.prompt_tokens != len(prompt)))
    return [m.digest for m in rows]


# --- generating, with or without the routed graft ----------------------------------------


@dataclass
class RoutedGeneration:
    plan: RoutePlan
    decoded: Decoded
    tokens: list[int]  # what the model read before decoding: the prompt, or the artifact (knowledge)
    outcome: GraftOutcome | None
    timings: dict[str, float]

    @property
    def fallback(self) -> bool:
        return self.outcome is None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.plan.to_dict(),
            "fallback": self.fallback,
            "decoded_tokens": len(self.decoded.tokens),
            "output_tokens": self.decoded.tokens,
            "probe": self.outcome.probe if self.outcome else None,
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
        }


def plain_generate(
    lm: LoadedModel, tokens: Sequence[int], steps: int, *, stop_at_eos: bool = False
) -> Decoded:
    """No cache: prefill ``tokens`` on the grid from position 0, then decode greedily."""
    cache = new_cache(lm)
    logits, _ = prefill(lm, cache, list(tokens), 0)
    return decode(lm, cache, logits, steps, stop_at_eos=stop_at_eos)


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


def generate_planned(
    lm: LoadedModel,
    home: Home,
    prompt: Sequence[int],
    plan: RoutePlan,
    *,
    max_new_tokens: int = 32,
    verify: bool = True,
    probe: bool = True,
    stop_at_eos: bool = False,
    timings: dict[str, float] | None = None,
) -> RoutedGeneration:
    """Carry out ``plan`` (from :func:`route`): compare tokens again, graft and decode.

    On any refusal (tokens, fingerprints, a missing or corrupt chunk, a failed
    probe) the plan is marked refused and the prompt runs with no cache.
    """
    prompt = list(prompt)
    timings = dict(timings or {})
    if plan.artifact is not None and plan.artifact_tokens is not None:
        manifest = plan.artifact.manifest
        tokens = plan.artifact_tokens
        knowledge = plan.mode == "knowledge"
        try:
            # Once more, right before the graft: every token it will put in the cache.
            verify_route(lm, manifest, tokens, prompt, len(prompt) if knowledge else plan.graft_tokens)
            if knowledge:
                outcome = graft(lm, home, manifest, tokens, None, verify=verify, probe=probe)
                read = tokens
            else:
                blocks = None if plan.whole else plan.blocks
                outcome = graft(lm, home, manifest, tokens, prompt, blocks=blocks, verify=verify, probe=probe)
                read = prompt
        except KvregError as exc:
            log.warning("route: graft of %s refused, generating without it: %s", manifest.digest, exc.message)
            plan.refuse(exc)
        else:
            decoded = continue_decoding(lm, outcome, max_new_tokens, stop_at_eos=stop_at_eos)
            return RoutedGeneration(plan, decoded, list(read), outcome, {**timings, **outcome.timings})
    t = time.perf_counter()
    decoded = plain_generate(lm, prompt, max_new_tokens, stop_at_eos=stop_at_eos)
    timings["plain_seconds"] = time.perf_counter() - t
    return RoutedGeneration(plan, decoded, prompt, None, timings)
