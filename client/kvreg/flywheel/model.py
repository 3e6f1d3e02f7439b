"""Where the bundled flywheel model lives, and its architecture.

The weights are in the ``model/`` directory next to this module (a data
directory, not a package: ``import kvreg.flywheel.model`` finds this file).
"""

from __future__ import annotations

from pathlib import Path

from transformers import LlamaConfig

MODEL_DIR = Path(__file__).resolve().parent / "model"


def model_path() -> Path:
    """The committed model directory (config.json, model.safetensors, tokenizer files)."""
    return MODEL_DIR


def model_config(vocab_size: int) -> LlamaConfig:
    """LlamaForCausalLM, hidden 128, 4 layers, 4 heads: about 1.05M parameters."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        architectures=["LlamaForCausalLM"],
    )
