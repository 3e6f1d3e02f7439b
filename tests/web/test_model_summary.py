"""``kvreg_registry.web.model_summary``: models read by name, architecture and size, never as just "model"."""

from __future__ import annotations

from kvreg.core.digest import Digest
from kvreg.core.manifest_schema import ModelInfo
from kvreg_registry.web.model_summary import display_name, family_of, listing_name, summarize


def info(name: str, architecture: str = "LlamaForCausalLM", dtype: str = "float32") -> ModelInfo:
    return ModelInfo(
        fingerprint=Digest.of_bytes(b"m"),
        name=name,
        architecture=architecture,
        model_type="llama",
        num_layers=30,
        kv_heads=3,
        head_dim=64,
        dtype=dtype,
        layer_types=("full_attention",) * 30,
        sliding_window=None,
    )


def test_smollm2_reads_by_its_full_name() -> None:
    s = summarize(info("smollm2", dtype="bfloat16"))
    assert (s.name, s.named, s.family, s.cli_name) == ("SmolLM2-135M-Instruct", True, "Llama", "smollm2")
    assert s.shape == "30 layers, 3 KV heads × 64, bfloat16"
    assert s.kv_bytes_per_token == 30 * 2 * 3 * 64 * 2


def test_the_bundled_flywheel_model_is_named() -> None:
    assert summarize(info("kvreg-addition")).name == "kvreg's bundled addition model"


def test_generic_or_hash_folders_read_as_unnamed_family_models() -> None:
    for folder in ("model", "", "Model", "0123456789abcdef0123456789abcdef01234567"):
        name, named = display_name(folder, "Llama")
        assert (name, named) == ("unnamed Llama model", False), folder
    s = summarize(info("model"))
    assert s.name == "unnamed Llama model" and s.cli_name == "MODEL" and s.folder == "model"
    assert display_name("Qwen3-0.6B", "Qwen3") == ("Qwen3-0.6B", True)


def test_family_from_the_architecture_class() -> None:
    assert family_of("Qwen3ForCausalLM", "qwen3") == "Qwen3"
    assert family_of("GPT2LMHeadModel", "gpt2") == "GPT2"
    assert family_of("", "mistral") == "mistral"
    assert summarize(info("x", dtype="int4")).kv_bytes_per_token is None


def test_listings_name_models_without_their_manifest() -> None:
    assert listing_name("smollm2") == "SmolLM2-135M-Instruct"
    assert listing_name("kvreg-addition") == "kvreg's bundled addition model"
    assert listing_name("model") == listing_name("0123456789abcdef01") == "unnamed model"
    assert listing_name("Qwen3-0.6B") == "Qwen3-0.6B"
