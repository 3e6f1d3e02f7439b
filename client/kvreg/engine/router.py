"""The router's engine half: a route plan, and the checks and generation that carry it out.

The router (``kvreg.app.router`` finds the candidates: route index, trust policy,
refs) plans a graft for a prompt in one of two modes (docs/design.md, "Flows"):
**prefix** — the longest block-aligned shared prefix, the rest prefilled on the
absolute grid, so every decode step is bit for bit that of a run with no cache —
and **knowledge** — a verified, trusted artifact that begins with the prompt,
grafted whole. This module holds what needs the model:

- :class:`RoutePlan`, what to graft or why nothing is (``fallback``);
- :func:`accept_prefix` and :func:`accept_knowledge`, which take a candidate into
  a plan or refuse it: another model, tokenizer or config
  (``FingerprintMismatchError``), an unverified artifact, chunks not in the store,
  or tokens that differ from the prompt over everything it would graft
  (``RouteMismatchError`` at the first difference, :func:`verify_route`);
- :func:`generate_planned`, which compares the tokens once more right before the
  graft, grafts and decodes — and on any refusal runs the prompt with no cache
  (:func:`plain_generate`). Never a silent wrong graft.

This module does not load trust policies, does not look up the route index, does
not pull from registries and does not write to the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvreg.core.errors import KvregError, ObjectNotFoundError, RouteMismatchError, UnverifiedArtifactError
from kvreg.core.manifest import Manifest
from kvreg.engine.graft import GraftOutcome, check_compatible, common_prefix, continue_decoding, graft
from kvreg.engine.runtime import Chooser, Decoded, LoadedModel, TokenSink, decode, new_cache, prefill
from kvreg.store.artifacts import Artifact, read_tokens
from kvreg.store.home import Home

log = logging.getLogger(__name__)

PASS = "pass"  # the verdict of a verified artifact


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
                "signers": [sig.keyid for sig in self.artifact.envelope.signatures if sig.keyid],
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


# --- accepting a candidate ---------------------------------------------------------------------------------


def missing_chunks(home: Home, manifest: Manifest, count: int) -> int:
    return sum(1 for c in manifest.chunks[:count] if not home.objects.has(c.digest))


def prefix_blocks(manifest: Manifest, tokens: Sequence[int], prompt: Sequence[int]) -> tuple[int, int, bool]:
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


def accept_prefix(
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
    blocks, graft_tokens, whole = prefix_blocks(manifest, tokens, prompt)
    if blocks == 0:
        shared = common_prefix(tokens, list(prompt))
        raise RouteMismatchError(
            f"artifact {manifest.digest.short()} shares no graftable block with the prompt: "
            f"first difference at token {shared} (block size {manifest.block_size})",
            hint="the artifact was computed for another text; generating without it",
            first_difference=shared,
        )
    verify_route(lm, manifest, tokens, prompt, graft_tokens)
    missing = missing_chunks(home, manifest, blocks) if require_chunks else 0
    if missing:
        raise ObjectNotFoundError(f"{missing} of the {blocks} chunks needed are not in the local store")
    plan.artifact, plan.artifact_tokens = artifact, tokens
    plan.blocks, plan.graft_tokens, plan.whole = blocks, graft_tokens, whole


def accept_knowledge(
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
    missing = missing_chunks(home, manifest, len(manifest.chunks)) if require_chunks else 0
    if missing:
        raise ObjectNotFoundError(
            f"{missing} of the artifact's {len(manifest.chunks)} chunks are not in the local store"
        )
    plan.artifact, plan.artifact_tokens = artifact, tokens
    plan.blocks, plan.graft_tokens, plan.whole = len(manifest.chunks), len(tokens), True


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
    lm: LoadedModel,
    tokens: Sequence[int],
    steps: int,
    *,
    stop_at_eos: bool = False,
    choose: Chooser | None = None,
    on_token: TokenSink | None = None,
) -> Decoded:
    """No cache: prefill ``tokens`` on the grid from position 0, then decode (greedily unless ``choose``)."""
    cache = new_cache(lm)
    logits, _ = prefill(lm, cache, list(tokens), 0)
    return decode(lm, cache, logits, steps, stop_at_eos=stop_at_eos, choose=choose, on_token=on_token)


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
    choose: Chooser | None = None,
    on_token: TokenSink | None = None,
) -> RoutedGeneration:
    """Carry out ``plan`` (from ``kvreg.app.router.route``): compare tokens again, graft and decode.

    On any refusal (tokens, fingerprints, a missing or corrupt chunk, a failed
    probe) the plan is marked refused and the prompt runs with no cache.
    ``choose`` and ``on_token`` go to :func:`kvreg.engine.runtime.decode`; in knowledge
    mode ``on_token`` is first told the artifact's tokens after the prompt (its answer),
    and decoding is skipped when it says stop among them.
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
            if on_token is not None and not all(on_token(t) for t in read[len(prompt) :]):
                decoded = Decoded([], [])
            else:
                decoded = continue_decoding(
                    lm, outcome, max_new_tokens, stop_at_eos=stop_at_eos, choose=choose, on_token=on_token
                )
            return RoutedGeneration(plan, decoded, list(read), outcome, {**timings, **outcome.timings})
    t = time.perf_counter()
    decoded = plain_generate(
        lm, prompt, max_new_tokens, stop_at_eos=stop_at_eos, choose=choose, on_token=on_token
    )
    timings["plain_seconds"] = time.perf_counter() - t
    return RoutedGeneration(plan, decoded, prompt, None, timings)
