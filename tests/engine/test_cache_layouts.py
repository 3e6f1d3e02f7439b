"""The KV shape a chunk stores is read from the model's cache, not guessed from its config.

Architectures name their key/value heads differently (``num_key_value_heads``, Falcon's
``num_kv_heads`` and ``multi_query``, GPT-BigCode's ``multi_query``), and some keep more heads
in the cache than the config's count suggests. These models are built here from transformers
configs with seeded random weights, outside ``kvreg.engine.tiny``'s set, and go through a
whole deposit, graft and byte-exact check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from kvreg.core.errors import ModelError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine import check, deposit, graft
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import cache_layout, load_model
from kvreg.engine.tiny import build_tokenizer
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home

from .conftest import TEXT

COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "max_position_embeddings": 512,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 3,
}

#: model_type, extra config, the (kv heads, head dim) its cache may hold. Falcon's new
#: architecture names 2 KV heads: transformers up to 5.24 repeats them to the 4 query heads
#: in the cache, 5.25 caches the 2 (which is why kvreg reads the shape from the cache).
LAYOUTS = [
    ("falcon", {"multi_query": True, "new_decoder_architecture": False}, {(1, 16)}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}, {(4, 16), (2, 16)}),
    ("gpt_bigcode", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 512}, {(1, 16)}),
    ("gpt2", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 512}, {(4, 16)}),
    ("mistral", {"num_key_value_heads": 2, "intermediate_size": 128}, {(2, 16)}),
]


def _model_dir(root: Path, model_type: str, extra: dict[str, Any]) -> Path:
    tokenizer = build_tokenizer(512)
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **{**COMMON, **extra})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(root, safe_serialization=True)
    tokenizer.save_pretrained(root)
    return root


@pytest.mark.parametrize(
    ("model_type", "extra", "shapes"),
    LAYOUTS,
    ids=[f"{t}-{max(s)[0]}heads" for t, _, s in LAYOUTS],
)
def test_a_layout_the_config_does_not_name_deposits_and_grafts_byte_exactly(
    model_type: str,
    extra: dict[str, Any],
    shapes: set[tuple[int, int]],
    tmp_path: Path,
    home: Home,
    key: SigningKey,
) -> None:
    lm = load_model(_model_dir(tmp_path / "model", model_type, extra), EngineSettings(block_size=16))
    recorded = (lm.info["kv_heads"], lm.info["head_dim"])
    assert lm.info["num_layers"] == 3 and recorded in shapes
    with torch.inference_mode():  # what the model caches on its own, without kvreg's cache
        own = lm.model(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True).past_key_values
    assert recorded == (own.layers[0].keys.shape[1], own.layers[0].keys.shape[-1])

    ref = RefName("arch", model_type)
    deposit.deposit(lm, home, text=TEXT, ref=ref, key=key)
    artifact = open_artifact(home, str(ref))
    outcome = graft.graft(lm, home, artifact.manifest, read_tokens(home, artifact.manifest), probe=True)
    assert outcome.probe == {**outcome.probe, "kv_equal": True, "witness_equal": True}
    decoded = graft.continue_decoding(lm, outcome, 4)
    assert check.check_graft(lm, outcome.plan, decoded).to_dict()["byte_exact"] is True


#: Absolute position embeddings (GPT-2), ALiBi (BLOOM, eager attention) and a sliding window
#: narrower than a block (Mistral): a graft that prefills after the artifact, or stops at a shared
#: prefix, must still give the bits of a fresh run.
PARTIAL = [
    ("gpt2", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 512}, "sdpa"),
    ("bloom", {"n_layer": 3, "n_head": 4}, "eager"),
    ("mistral", {"num_key_value_heads": 2, "intermediate_size": 128, "sliding_window": 12}, "sdpa"),
]


@pytest.mark.parametrize(("model_type", "extra", "attn"), PARTIAL, ids=[t for t, _, _ in PARTIAL])
def test_partial_grafts_are_byte_exact(
    model_type: str, extra: dict[str, Any], attn: str, tmp_path: Path, home: Home, key: SigningKey
) -> None:
    settings = EngineSettings(block_size=16, attn_implementation=attn)
    lm = load_model(_model_dir(tmp_path / "model", model_type, extra), settings)
    if "sliding_window" in extra:  # no layer_types in Mistral's config: the cache says every layer slides
        assert lm.info["layer_types"] == ["sliding_attention"] * 3
        assert lm.info["sliding_window"] == extra["sliding_window"]
    ref = RefName("arch", model_type)
    deposit.deposit(lm, home, text=TEXT, ref=ref, key=key)
    artifact = open_artifact(home, str(ref))
    tokens = read_tokens(home, artifact.manifest)
    appended = tokens + lm.encode(" and one more question after it", first=False)
    diverging = tokens[:40] + lm.encode(" then other words", first=False)
    for prompt, grafted in ((appended, len(tokens)), (diverging, 32)):
        outcome = graft.graft(lm, home, artifact.manifest, tokens, prompt)
        assert (outcome.plan.graft_tokens, outcome.plan.prefill_tokens) == (grafted, len(prompt) - grafted)
        decoded = graft.continue_decoding(lm, outcome, 3)
        assert check.check_graft(lm, outcome.plan, decoded).to_dict()["byte_exact"] is True


class _KeysWiderThanValues(torch.nn.Module):
    """A stand-in for attention whose keys and values differ in width (as in multi-head latent
    attention): its cache cannot be stored as one shape."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.device = torch.device("cpu")

    def forward(self, input_ids: torch.Tensor, cache: Any, **_: Any) -> None:
        for index in range(len(cache.layers)):
            cache.update(torch.zeros(1, 2, 1, 24), torch.zeros(1, 2, 1, 16), index)


def test_keys_and_values_of_different_shapes_are_refused_by_name() -> None:
    config = AutoConfig.for_model("llama", vocab_size=64, **COMMON, num_key_value_heads=2)
    with pytest.raises(ModelError, match=r"layer 0 caches keys \(1, 2, 1, 24\) and values \(1, 2, 1, 16\)"):
        cache_layout(_KeysWiderThanValues(config))  # type: ignore[arg-type]


#: model_type, extra config: models whose cache holds recurrent state (all layers, some, or both
#: kinds in one layer), built from real transformers configs.
RECURRENT = [
    ("mamba", {"num_hidden_layers": 2}),
    ("jamba", {"num_hidden_layers": 2, "num_key_value_heads": 2, "intermediate_size": 64}),
    ("qwen3_next", {"num_hidden_layers": 4, "num_key_value_heads": 2, "intermediate_size": 64}),
    ("falcon_h1", {"num_hidden_layers": 2, "num_key_value_heads": 2, "intermediate_size": 64}),
]


@pytest.mark.parametrize(("model_type", "extra"), RECURRENT, ids=[t for t, _ in RECURRENT])
def test_state_space_and_hybrid_models_are_refused_by_name_when_they_load(
    model_type: str, extra: dict[str, Any], tmp_path: Path
) -> None:
    folder = _model_dir(tmp_path / "model", model_type, extra)
    with pytest.raises(ModelError, match=rf"{model_type}: \d of its \d cache layers hold no plain attention"):
        load_model(folder, EngineSettings(block_size=16, attn_implementation="eager"))


def test_a_model_that_cannot_run_into_a_dynamic_cache_is_a_model_error() -> None:
    class _RefusesTheCache(torch.nn.Module):
        def __init__(self, config: Any) -> None:
            super().__init__()
            self.config = config
            self.device = torch.device("cpu")

        def forward(self, **_: Any) -> None:
            raise ValueError("this model uses a cache of its own")

    config = AutoConfig.for_model("llama", vocab_size=64, **COMMON, num_key_value_heads=2)
    with pytest.raises(ModelError, match=r"does not run into transformers' DynamicCache.*of its own"):
        cache_layout(_RefusesTheCache(config))  # type: ignore[arg-type]
