"""Running a model on the pinned schedule: load, prefill on the absolute grid, decode.

Every computation kvreg compares — deposit, graft, the fresh recomputation of a
check — goes through the functions here, so that the same tokens are always fed
in the same segments, with the same explicit positions, the same cache classes and
the same ``logits_to_keep=1``. That is what makes the bits comparable (DESIGN.md
§1 "Same chunk schedule").

Sliding-window layers keep every position's KV while a block is computed (HF's
"past recording"), so a deposit can store it; after each forward the window is
trimmed again, exactly as a plain run trims it. This module knows nothing about
stores, manifests or signatures.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from kvreg.core.digest import Digest
from kvreg.core.errors import ModelError
from kvreg.engine.config import DTYPES, EngineSettings, PinnedConfig
from kvreg.engine.fingerprint import load_config_json, model_fingerprint, tokenizer_fingerprint

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A model directory loaded under a pinned config, with its fingerprints."""

    path: Path
    model: PreTrainedModel
    tokenizer: Any
    config: PinnedConfig
    model_fp: Digest
    tokenizer_fp: Digest
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.config.device

    def encode(self, text: str, *, first: bool) -> list[int]:
        """Token ids of ``text``; special tokens (BOS) only for the first segment."""
        return list(self.tokenizer(text, add_special_tokens=first)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


def model_info(model: PreTrainedModel, name: str, dtype: str) -> dict[str, Any]:
    cfg = model.config.get_text_config(decoder=True)
    n_layers = int(cfg.num_hidden_layers)
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * n_layers)
    sliding = getattr(cfg, "sliding_window", None)
    uses_sliding = any(t == "sliding_attention" for t in layer_types)
    return {
        "name": name,
        "architecture": (model.config.architectures or [type(model).__name__])[0],
        "model_type": str(model.config.model_type),
        "num_layers": n_layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "dtype": dtype,
        "layer_types": layer_types,
        "sliding_window": int(sliding) if uses_sliding and sliding else None,
    }


def load_model(
    model_dir: str | Path, settings: EngineSettings, *, cache_dir: Path | None = None
) -> LoadedModel:
    """Pin the numerics, fingerprint the directory, then load model and tokenizer."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist")
    config = settings.resolve()
    config.apply()
    load_config_json(path)  # clear error for a directory that is not a model
    model_fp = model_fingerprint(path, cache_dir=cache_dir, threads=settings.threads)
    tokenizer_fp = tokenizer_fingerprint(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=DTYPES[settings.dtype],
            attn_implementation=settings.attn_implementation,
            local_files_only=True,
            use_safetensors=True,
        )
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        hint = None
        if settings.attn_implementation != "eager" and "eager" in str(e):
            hint = "this architecture needs eager attention: pass --attn eager"
        raise ModelError(f"cannot load the model in {path}: {e}", hint=hint) from e
    model.to(config.device)
    model.eval()
    info = model_info(model, path.resolve().name, settings.dtype)
    return LoadedModel(path, model, tokenizer, config, model_fp, tokenizer_fp, info)


# --- the schedule ---------------------------------------------------------------------


def schedule(start: int, end: int, block_size: int, *, split_at: int | None = None) -> list[tuple[int, int]]:
    """Segments covering ``[start, end)``: boundaries at multiples of ``block_size``,
    plus ``split_at`` (the exact end of a grafted artifact) when it lies inside."""
    bounds = {start, end}
    first = (start // block_size + 1) * block_size
    bounds.update(range(first, end, block_size))
    if split_at is not None and start < split_at < end:
        bounds.add(split_at)
    ordered = sorted(bounds)
    return list(itertools.pairwise(ordered))


# --- caches ---------------------------------------------------------------------------


def new_cache(lm: LoadedModel) -> DynamicCache:
    cache = DynamicCache(config=lm.model.config)
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.activate_past_recording()
        elif type(layer) is not DynamicLayer:
            raise ModelError(
                f"unsupported cache layer type {type(layer).__name__} for {lm.info['architecture']}"
            )
    return cache


def _trim_windows(cache: DynamicCache) -> None:
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer) and layer.is_initialized:
            layer.crop(0)


def cache_from_blocks(
    lm: LoadedModel, keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]], length: int
) -> DynamicCache:
    """A cache holding ``length`` tokens, from per-block ``[kv_heads, n, head_dim]`` tensors.

    ``keys[b][l]`` is block ``b``, layer ``l``. Full-attention layers get every
    position; sliding-window layers get the last ``window - 1`` positions and the
    true absolute length, exactly the state a plain prefill leaves behind.

    Blocks that already lie side by side in one contiguous tensor (as
    ``graft.read_chunks`` returns them) are used as that tensor, without a copy;
    any other blocks are concatenated. Both give the same bytes.
    """

    def joined(parts: list[torch.Tensor]) -> torch.Tensor:
        head = parts[0]
        heads, _, dim = head.shape
        n = sum(int(p.shape[1]) for p in parts)
        storage = head.untyped_storage().data_ptr()
        expected = head.data_ptr()
        for part in parts:
            if (
                part.dtype != head.dtype
                or part.device != head.device
                or part.stride() != (n * dim, dim, 1)
                or part.shape[0] != heads
                or part.shape[2] != dim
                or part.data_ptr() != expected
                or part.untyped_storage().data_ptr() != storage
            ):
                return torch.cat(parts, dim=1)
            expected += int(part.shape[1]) * dim * part.element_size()
        return head.as_strided((heads, n, dim), (n * dim, dim, 1))

    cache = new_cache(lm)
    for index, layer in enumerate(cache.layers):
        k_parts = [block[index] for block in keys]
        v_parts = [block[index] for block in values]
        if isinstance(layer, DynamicSlidingWindowLayer):
            keep = layer.sliding_window - 1
            k_parts, v_parts = _tail(k_parts, keep), _tail(v_parts, keep)
        k = joined(k_parts).unsqueeze(0).to(lm.device)
        v = joined(v_parts).unsqueeze(0).to(lm.device)
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.cumulative_length = length
    if cache.get_seq_length() != length:
        raise ModelError(f"grafted cache holds {cache.get_seq_length()} tokens, expected {length}")
    return cache


def _tail(parts: list[torch.Tensor], keep: int) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    remaining = keep
    for part in reversed(parts):
        if remaining <= 0:
            break
        n = part.shape[1]
        out.append(part if n <= remaining else part[:, n - remaining :, :])
        remaining -= n
    out.reverse()
    return out


# --- forward passes ----------------------------------------------------------------------


@dataclass
class CapturedBlock:
    start: int
    end: int
    keys: list[torch.Tensor]  # per layer, [kv_heads, n, head_dim] on CPU
    values: list[torch.Tensor]


@torch.inference_mode()
def forward(lm: LoadedModel, cache: DynamicCache, tokens: Sequence[int], start: int) -> torch.Tensor:
    """Feed ``tokens`` at absolute positions ``start…``; returns the last position's logits."""
    n = len(tokens)
    ids = torch.tensor([list(tokens)], dtype=torch.long, device=lm.device)
    positions = torch.arange(start, start + n, dtype=torch.long, device=lm.device)
    if cache.get_seq_length() != start:
        raise ModelError(f"cache holds {cache.get_seq_length()} tokens but the segment starts at {start}")
    out = lm.model(
        input_ids=ids,
        position_ids=positions.unsqueeze(0),
        cache_position=positions,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[0, -1].detach()


def prefill(
    lm: LoadedModel,
    cache: DynamicCache,
    tokens: Sequence[int],
    start: int,
    *,
    split_at: int | None = None,
    capture: bool = False,
) -> tuple[torch.Tensor, list[CapturedBlock]]:
    """Prefill ``tokens[start:]`` on the grid; optionally capture each segment's KV."""
    logits: torch.Tensor | None = None
    captured: list[CapturedBlock] = []
    for s, e in schedule(start, len(tokens), lm.config.block_size, split_at=split_at):
        logits = forward(lm, cache, tokens[s:e], s)
        if capture:
            n = e - s
            ks = [layer.keys[0, :, -n:, :].to("cpu", copy=True) for layer in cache.layers]
            vs = [layer.values[0, :, -n:, :].to("cpu", copy=True) for layer in cache.layers]
            captured.append(CapturedBlock(s, e, ks, vs))
        _trim_windows(cache)
    if logits is None:
        raise ModelError("nothing to prefill")
    return logits, captured


@dataclass
class Decoded:
    tokens: list[int]
    logits: list[torch.Tensor]  # logits[i] chose tokens[i]


def decode(
    lm: LoadedModel,
    cache: DynamicCache,
    first_logits: torch.Tensor,
    steps: int,
    *,
    forced: Sequence[int] | None = None,
    stop_at_eos: bool = False,
) -> Decoded:
    """Greedy decoding, one token at a time, from the logits after the prompt.

    ``forced`` feeds given tokens instead of the argmax (a check's fresh run follows
    the graft's tokens, so its logits stay comparable step by step).
    """
    logits = first_logits
    out = Decoded([], [])
    eos = lm.tokenizer.eos_token_id
    for step in range(steps):
        token = int(forced[step]) if forced is not None else int(torch.argmax(logits).item())
        out.tokens.append(token)
        out.logits.append(logits)
        if step == steps - 1 or (stop_at_eos and token == eos):
            break
        logits = forward(lm, cache, [token], cache.get_seq_length())
        _trim_windows(cache)
    return out


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw little-endian bytes of a tensor in its own dtype (no conversion)."""
    if sys.byteorder != "little":
        raise ModelError("kvreg's tensor hashing is defined for little-endian hosts only")
    return t.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def logits_digest(logits: torch.Tensor) -> Digest:
    return Digest.of_bytes(tensor_bytes(logits))
