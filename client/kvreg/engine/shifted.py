"""Shifted graft: an explicit, labelled APPROXIMATE mode that moves a KV state.

Keys are stored after the rotary embedding, so a block of KV is exact only at the
positions where it was computed (docs/design.md, "When a graft is exact"). This mode places an
artifact's KV after a different prefix anyway: it re-rotates the stored keys by
the offset Δ (rotations compose: R(p)·R(Δ) = R(p+Δ)), computes the prefix fresh,
recomputes the artifact's last token to get next-token logits, decodes, and
measures the residual against a fresh run of prefix + artifact tokens: max
|Δlogits|, KL divergence and argmax agreement per step. The rotation itself is
accurate to float rounding; the residual comes from the moved tokens never having
attended to the new prefix. It is never the default and never reported as exact:
its report always carries ``"exact": false`` and ``"mode": "shifted-approximate"``.

Supported: models with rotary position embeddings exposed as ``rotary_emb`` on the
base model (Llama, Qwen2, Gemma2, Gemma3 with per-layer-type RoPE, GPT-NeoX's
partial rotary). Others are refused.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from kvreg.core.errors import ModelError, UsageError
from kvreg.core.manifest import Manifest
from kvreg.engine.check import compare_steps
from kvreg.engine.graft import check_compatible, read_chunks
from kvreg.engine.runtime import LoadedModel, _trim_windows, decode, forward, layer_kv, new_cache, prefill
from kvreg.store.home import Home


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotation(
    lm: LoadedModel, layer_type: str, offset: int, like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of the rotary embedding at position ``offset`` for one layer type."""
    rotary = getattr(lm.model.base_model, "rotary_emb", None)
    if rotary is None:
        raise ModelError(f"{lm.info['architecture']} has no rotary embedding; shifted graft is not supported")
    position = torch.tensor([[offset]], dtype=torch.long, device=lm.device)
    if "layer_type" in inspect.signature(rotary.forward).parameters:
        cos, sin = rotary(like, position, layer_type)
    else:
        cos, sin = rotary(like, position)
    return cos[0, 0], sin[0, 0]  # [rot_dim]


def shift_keys(keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Re-rotate ``[..., head_dim]`` keys by the rotation ``(cos, sin)`` on the rotary dims."""
    rot = cos.shape[-1]
    work = keys.to(torch.float32)
    rotated = work[..., :rot] * cos.to(torch.float32) + _rotate_half(work[..., :rot]) * sin.to(torch.float32)
    return torch.cat((rotated, work[..., rot:]), dim=-1).to(keys.dtype)


@dataclass
class ShiftReport:
    offset: int
    shifted_tokens: int
    comparison: dict[str, Any]
    output_tokens: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": "shifted-approximate",
            "exact": False,
            "offset": self.offset,
            "shifted_tokens": self.shifted_tokens,
            **{k: v for k, v in self.comparison.items() if k != "byte_exact"},
            "output_tokens": self.output_tokens,
        }


def shifted_graft(
    lm: LoadedModel,
    home: Home,
    manifest: Manifest,
    artifact_tokens: list[int],
    prefix_tokens: list[int],
    *,
    steps: int = 32,
) -> ShiftReport:
    """Graft the artifact after ``prefix_tokens`` by re-rotating its keys; measure the residual."""
    if not prefix_tokens:
        raise UsageError("a shifted graft needs a non-empty prefix to shift the artifact behind")
    if manifest.token_count < 2:
        raise UsageError("a shifted graft needs an artifact of at least two tokens")
    check_compatible(lm, manifest)
    offset = len(prefix_tokens)
    chunks = read_chunks(home, manifest, len(manifest.chunks), threads=lm.config.settings.threads)
    moved = manifest.token_count - 1  # the last token is recomputed to obtain next-token logits

    cache = new_cache(lm)
    prefill(lm, cache, prefix_tokens, 0)
    _append_shifted(lm, cache, chunks.keys, chunks.values, moved, offset)
    logits = forward(lm, cache, [artifact_tokens[-1]], offset + moved)
    _trim_windows(cache)
    approx = decode(lm, cache, logits, steps)

    full = prefix_tokens + artifact_tokens
    fresh_cache = new_cache(lm)
    fresh_logits, _ = prefill(lm, fresh_cache, full, 0)
    fresh = decode(lm, fresh_cache, fresh_logits, steps, forced=approx.tokens)
    comparison = compare_steps(approx.logits, fresh.logits).to_dict()
    return ShiftReport(offset, moved, comparison, approx.tokens)


def _append_shifted(
    lm: LoadedModel,
    cache: DynamicCache,
    keys: list[list[torch.Tensor]],
    values: list[list[torch.Tensor]],
    count: int,
    offset: int,
) -> None:
    layer_types = lm.info["layer_types"]
    for index, layer in enumerate(cache.layers):
        k = torch.cat([block[index] for block in keys], dim=1)[:, :count, :].to(lm.device)
        v = torch.cat([block[index] for block in values], dim=1)[:, :count, :].to(lm.device)
        cos, sin = rotation(lm, layer_types[index], offset, k)
        k = shift_keys(k, cos, sin).unsqueeze(0)
        v = v.unsqueeze(0)
        if not isinstance(layer, DynamicLayer):
            raise ModelError(f"cache layer {type(layer).__name__} cannot take shifted keys")
        old_k, old_v = layer_kv(layer)
        layer.keys = torch.cat([old_k, k], dim=-2)
        layer.values = torch.cat([old_v, v], dim=-2)
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.cumulative_length += count
            layer.crop(0)
