"""Running a model on the pinned schedule: load, prefill on the absolute grid, decode.

Every computation kvreg compares — deposit, graft, the fresh recomputation of a
check — goes through the functions here, so that the same tokens are always fed
in the same segments, with the same explicit positions, the same cache classes and
the same ``logits_to_keep=1``. That is what makes the bits comparable (docs/design.md,
"When a graft is exact").

Sliding-window layers keep every position's KV while a block is computed (HF's
"past recording"), so a deposit can store it; after each forward the window is
trimmed again, exactly as a plain run trims it. This module knows nothing about
stores, manifests or signatures.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from kvreg.core.digest import Digest
from kvreg.core.errors import ModelError
from kvreg.engine.fingerprint import load_config_json, model_fingerprint, tokenizer_fingerprint
from kvreg.engine.flywheel.model import MODEL_DIR as BUNDLED_MODEL_DIR
from kvreg.engine.flywheel.model import MODEL_NAME as BUNDLED_MODEL_NAME
from kvreg.engine.pinned import DTYPES, EngineSettings, PinnedConfig

log = logging.getLogger(__name__)


def silence_transformers(verbose: int) -> None:
    """Keep transformers' logging and progress bars quiet unless ``verbose`` is 2 or more."""
    if verbose >= 2:
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


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


def model_name(path: Path) -> str:
    """The name a manifest gives the model in ``path``: its folder's name, except for the bundled
    flywheel model, whose folder is just ``model/``."""
    resolved = path.resolve()
    return BUNDLED_MODEL_NAME if resolved == BUNDLED_MODEL_DIR else resolved.name


def model_info(model: PreTrainedModel, name: str, dtype: str) -> dict[str, Any]:
    cfg = model.config.get_text_config(decoder=True)
    n_layers = int(cfg.num_hidden_layers)
    layout = cache_layout(model)
    if len(layout.sliding) != n_layers:
        raise ModelError(
            f"{model.config.model_type}: one token leaves {len(layout.sliding)} cache layers for "
            f"{n_layers} hidden layers; kvreg stores one key/value pair per layer"
        )
    # The config's names where it has them (Gemma's); else what the cache does (Mistral's
    # sliding_window without layer_types slides every layer).
    configured = getattr(cfg, "layer_types", None)
    layer_types = list(configured or ("sliding_attention" if s else "full_attention" for s in layout.sliding))
    sliding = getattr(cfg, "sliding_window", None)
    uses_sliding = any(t == "sliding_attention" for t in layer_types)
    return {
        "name": name,
        "architecture": (model.config.architectures or [type(model).__name__])[0],
        "model_type": str(model.config.model_type),
        "num_layers": n_layers,
        "kv_heads": layout.kv_heads,
        "head_dim": layout.head_dim,
        "dtype": dtype,
        "layer_types": layer_types,
        "sliding_window": int(sliding) if uses_sliding and sliding else None,
    }


@dataclass(frozen=True)
class CacheLayout:
    """What one token leaves in a fresh cache: the shape every chunk stores, and which layers
    keep a sliding window."""

    kv_heads: int
    head_dim: int
    sliding: tuple[bool, ...]  # per cache layer


@torch.inference_mode()
def cache_layout(model: PreTrainedModel) -> CacheLayout:
    """The :class:`CacheLayout` of ``model``, read from the cache itself, not guessed from the
    config's names (which differ: Falcon keeps one head per query head in its new architecture
    and one in all in its multi-query one, GPT-BigCode one). A model whose keys and values
    differ in shape, or whose layers differ, is refused (``ModelError``): a chunk holds one shape."""
    cache = DynamicCache(config=model.config)
    kind = model.config.model_type
    refused = unsupported_layers(cache)
    if refused:
        raise ModelError(
            f"{kind}: {len(refused)} of its {len(cache.layers)} cache layers hold no plain attention keys "
            f"and values ({', '.join(sorted({name for _, name in refused}))}, layers "
            f"{[i for i, _ in refused][:8]}); kvreg stores and grafts attention keys and values only, "
            "so it cannot deposit or graft a state-space, linear-attention or hybrid model"
        )
    token = torch.zeros((1, 1), dtype=torch.long, device=model.device)
    try:
        model(input_ids=token, cache=cache, use_cache=True, logits_to_keep=1)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        raise ModelError(
            f"{kind}: one token does not run into transformers' DynamicCache, the cache kvreg fills "
            f"and grafts: {type(e).__name__}: {e}"
        ) from e
    shapes: set[tuple[int, int]] = set()
    for index, layer in enumerate(cache.layers):
        keys, values = layer_kv(layer)
        if keys.shape != values.shape or keys.dim() != 4:
            raise ModelError(
                f"{model.config.model_type}: layer {index} caches keys {tuple(keys.shape)} and values "
                f"{tuple(values.shape)}; kvreg stores keys and values of one [heads, tokens, dim] shape"
            )
        shapes.add((int(keys.shape[1]), int(keys.shape[-1])))
    if len(shapes) != 1:
        raise ModelError(
            f"{model.config.model_type}: its layers cache different shapes {sorted(shapes)} "
            "(heads, dim); kvreg stores one shape for every layer"
        )
    (kv_heads, head_dim) = shapes.pop()
    sliding = tuple(isinstance(layer, DynamicSlidingWindowLayer) for layer in cache.layers)
    return CacheLayout(kv_heads, head_dim, sliding)


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
    # transformers wraps .to() in a decorator whose signature mypy misreads as taking the model
    model.to(config.device)  # type: ignore[arg-type]
    model.eval()
    info = model_info(model, model_name(path), settings.dtype)
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


def unsupported_layers(cache: DynamicCache) -> list[tuple[int, str]]:
    """``(index, class name)`` of the cache's layers that are neither a plain key/value layer nor a
    sliding window (a linear-attention or state-space layer's recurrent state, a hybrid of both)."""
    return [
        (i, type(layer).__name__)
        for i, layer in enumerate(cache.layers)
        if not isinstance(layer, DynamicSlidingWindowLayer) and type(layer) is not DynamicLayer
    ]


def new_cache(lm: LoadedModel) -> DynamicCache:
    cache = DynamicCache(config=lm.model.config)
    refused = unsupported_layers(cache)
    if refused:  # refused when the model loaded (cache_layout); kept for a model loaded otherwise
        raise ModelError(f"unsupported cache layer type {refused[0][1]} for {lm.info['architecture']}")
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.activate_past_recording()
    return cache


def _trim_windows(cache: DynamicCache) -> None:
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer) and layer.is_initialized:
            layer.crop(0)


class DeferredConcatLayer(DynamicLayer):
    """A full-attention layer grafted from chunks, concatenated on first use.

    A ``DynamicLayer`` copies its whole cache on every ``update`` (``torch.cat`` of
    the old states and the new ones). A grafted layer therefore keeps the chunks'
    tensors as they are — zero-copy views of the chunk files — and the next
    ``update`` concatenates the parts and the new states in that same single pass.
    The tensor it returns, and every one after, has exactly the bytes a plain
    ``DynamicLayer`` would hold: a graft is one full copy cheaper, not different.
    Any other access to ``keys``/``values`` concatenates first.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> None:
        """``keys``/``values``: per-block ``[kv_heads, n, head_dim]`` tensors (no batch dimension)."""
        super().__init__()
        self._parts: tuple[list[torch.Tensor], list[torch.Tensor]] | None = (keys, values)
        self._length = length
        self.device = keys[0].device
        self.is_initialized = True

    # ``keys``/``values`` are plain attributes in DynamicLayer; here they materialise
    # the pending parts when read.
    @property  # type: ignore[override]
    def keys(self) -> torch.Tensor | None:
        self._materialise()
        return self._keys

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._keys = value

    @property  # type: ignore[override]
    def values(self) -> torch.Tensor | None:
        self._materialise()
        return self._values

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._values = value

    def _materialise(self) -> None:
        parts = self.__dict__.get("_parts")
        if parts is not None:
            self._parts = None
            self._keys = torch.cat(parts[0], dim=-2).unsqueeze(0)
            self._values = torch.cat(parts[1], dim=-2).unsqueeze(0)

    def get_seq_length(self) -> int:
        return self._length if self._parts is not None else super().get_seq_length()

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self._parts is None:
            return super().update(key_states, value_states, *args, **kwargs)
        keys, values = self._parts
        self._parts = None
        if key_states.shape[0] != 1:
            raise ModelError("a grafted cache holds a batch of one sequence")
        self._keys = torch.cat([*keys, key_states[0]], dim=-2).unsqueeze(0)
        self._values = torch.cat([*values, value_states[0]], dim=-2).unsqueeze(0)
        return self._keys, self._values


def cache_from_blocks(
    lm: LoadedModel, keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]], length: int
) -> DynamicCache:
    """A cache holding ``length`` tokens, from per-block ``[kv_heads, n, head_dim]`` tensors.

    ``keys[b][l]`` is block ``b``, layer ``l``. Full-attention layers get every
    position (as a ``DeferredConcatLayer``: no copy until the next forward pass,
    which copies anyway); sliding-window layers get the last ``window - 1``
    positions and the true absolute length, exactly the state a plain prefill
    leaves behind.
    """
    cache = new_cache(lm)
    device = lm.device
    on_cpu = device.type == "cpu"
    for index, layer in enumerate(cache.layers):
        k_parts = [block[index] if on_cpu else block[index].to(device) for block in keys]
        v_parts = [block[index] if on_cpu else block[index].to(device) for block in values]
        if isinstance(layer, DynamicSlidingWindowLayer):
            keep = layer.sliding_window - 1
            k = torch.cat(_tail(k_parts, keep), dim=-2).unsqueeze(0)
            v = torch.cat(_tail(v_parts, keep), dim=-2).unsqueeze(0)
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
            layer.cumulative_length = length
        else:
            cache.layers[index] = DeferredConcatLayer(k_parts, v_parts, length)
    if cache.get_seq_length() != length:
        raise ModelError(f"grafted cache holds {cache.get_seq_length()} tokens, expected {length}")
    return cache


def _tail(parts: list[torch.Tensor], keep: int) -> list[torch.Tensor]:
    """The last ``keep`` positions of ``[kv_heads, n, head_dim]`` parts."""
    out: list[torch.Tensor] = []
    remaining = keep
    for part in reversed(parts):
        if remaining <= 0:
            break
        n = part.shape[-2]
        out.append(part if n <= remaining else part[..., n - remaining :, :])
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


def layer_kv(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The key and value tensors a cache layer holds; ``ModelError`` for a layer without them
    (a linear-attention or placeholder layer: kvreg stores attention KV only)."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
        raise ModelError(f"cache layer {type(layer).__name__} holds no key/value tensors")
    return keys, values


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
            kv = [layer_kv(layer) for layer in cache.layers]
            ks = [k[0, :, -n:, :].to("cpu", copy=True) for k, _ in kv]
            vs = [v[0, :, -n:, :].to("cpu", copy=True) for _, v in kv]
            captured.append(CapturedBlock(s, e, ks, vs))
        _trim_windows(cache)
    if logits is None:
        raise ModelError("nothing to prefill")
    return logits, captured


Chooser = Callable[[torch.Tensor], int]  # next-token logits -> the token decoded
TokenSink = Callable[[int], bool]  # told each token as it is decoded; False stops the decoding


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
    choose: Chooser | None = None,
    on_token: TokenSink | None = None,
) -> Decoded:
    """Greedy decoding, one token at a time, from the logits after the prompt.

    ``forced`` feeds given tokens instead of the argmax (a check's fresh run follows
    the graft's tokens, so its logits stay comparable step by step). ``choose`` picks
    the token from the logits instead of the argmax (sampling, ``kvreg.engine.sampling``);
    ``on_token`` is told each token as it is chosen and stops the decoding by returning
    False (a stop string, a client gone). With ``on_token`` the sink alone decides where the
    completion ends, the tokenizer's EOS included (``stop_at_eos`` then changes nothing): a
    server's text stream knows the model's other end-of-turn ids, and a request may ask to
    decode past EOS (``ignore_eos``). Without them nothing changes: greedy, to the bit.
    """
    logits = first_logits
    out = Decoded([], [])
    eos = lm.tokenizer.eos_token_id
    for step in range(steps):
        if forced is not None:
            token = int(forced[step])
        elif choose is not None:
            token = choose(logits)
        else:
            token = int(torch.argmax(logits).item())
        out.tokens.append(token)
        out.logits.append(logits)
        if on_token is not None:
            if not on_token(token):
                break
        elif stop_at_eos and token == eos:
            break
        if step == steps - 1:
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
