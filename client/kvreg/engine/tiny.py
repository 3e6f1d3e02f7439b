"""Small Hugging Face model directories built locally from seeded configs.

Nothing can be downloaded here, so tests, ``kvreg demo`` and the benchmarks build
their models: a byte-level BPE tokenizer trained on an embedded corpus, and a
causal LM of one of the supported architectures with seeded random weights, saved
as a real model directory (config.json, model.safetensors, tokenizer files) that
is then loaded by the same code path as any other model. Random weights are
enough for byte-exactness: exactness is about bits, not about what is said.

This module does not train models (the flywheel's trained model is separate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GPTNeoXConfig,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from kvreg.core.errors import UsageError

ARCHITECTURES = ("llama", "qwen2", "gemma2", "gemma3", "gpt_neox")

CORPUS = """\
Problem 7. Find the number of ordered pairs of positive integers (a, b) such that a + b = 1000
and neither a nor b has a zero digit. Solution: count the numbers from 1 to 999 without a zero digit,
then subtract the pairs whose partner contains a zero. Step 1: one-digit numbers contribute 9.
Step 2: two-digit numbers without zero contribute 81. Step 3: three-digit numbers contribute 729.
The answer is 738. Verified by an exhaustive checker: pass.
The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.
Q:4821+3967=? S:1+7+0=08;2+6+0=08;8+9+0=17;4+3+1=08;=8788 #### 8788
A compliance ruling: the transfer is permitted because the counterparty is registered and the
amount is below the reporting threshold of 10,000 units. Reviewed and approved.
def solve(n):\n    return sum(i * i for i in range(n))  # squares, verified for n < 10**6
Les modèles gelés relisent la solution vérifiée; 検証済みの解答; проверенное решение.
"""

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")
# A ChatML template, as instruct models use (SmolLM2's, without its default system turn),
# that writes the BOS itself: a chat prompt is tokenized without adding special tokens.
CHATML_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer(vocab_size: int = 512, *, chat_template: str | None = None) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on the embedded corpus (deterministic).

    With ``chat_template``, the ChatML markers (:data:`CHAT_TOKENS`) are added as
    special tokens after training and the template is set; without it the tokenizer
    is byte for byte what it always was (golden fingerprints depend on it)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    if chat_template is not None:
        tok.add_special_tokens(list(CHAT_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def tiny_config(
    arch: str,
    *,
    vocab_size: int,
    hidden_size: int = 64,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    sliding_window: int = 24,
    max_positions: int = 4096,
) -> PretrainedConfig:
    common: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size or 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "max_position_embeddings": max_positions,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
    }
    head_dim = hidden_size // num_heads
    if arch == "llama":
        return LlamaConfig(**common, num_key_value_heads=num_kv_heads, architectures=["LlamaForCausalLM"])
    if arch == "qwen2":
        return Qwen2Config(**common, num_key_value_heads=num_kv_heads, architectures=["Qwen2ForCausalLM"])
    if arch == "gemma2":
        # Alternating sliding/full layers; eager attention (softcapping).
        return Gemma2Config(
            **common,
            num_key_value_heads=num_kv_heads,
            head_dim=head_dim,
            sliding_window=sliding_window,
            architectures=["Gemma2ForCausalLM"],
        )
    if arch == "gemma3":
        layer_types = ["sliding_attention"] * num_layers
        layer_types[-1] = "full_attention"
        return Gemma3TextConfig(
            **common,
            num_key_value_heads=num_kv_heads,
            head_dim=head_dim,
            sliding_window=sliding_window,
            layer_types=layer_types,
            architectures=["Gemma3ForCausalLM"],
        )
    if arch == "gpt_neox":
        return GPTNeoXConfig(**common, architectures=["GPTNeoXForCausalLM"])
    raise UsageError(f"unknown tiny architecture {arch!r}", hint=f"choose one of: {', '.join(ARCHITECTURES)}")


def build_model_dir(
    out_dir: str | Path,
    arch: str = "llama",
    *,
    seed: int = 0,
    dtype: str = "float32",
    vocab_size: int = 512,
    chat_template: str | None = None,
    **config_kwargs: Any,
) -> Path:
    """Write a complete model directory with seeded random weights; returns its path.

    ``chat_template`` (e.g. :data:`CHATML_TEMPLATE`) makes it a chat model: the
    tokenizer gets the template and its two special tokens (two more embedding rows)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size, chat_template=chat_template)
    config = tiny_config(arch, vocab_size=len(tokenizer), **config_kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        config, dtype={"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def perturb_one_weight(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Copy a model directory with exactly one weight value changed (for refusal tests)."""
    from safetensors.torch import load_file, save_file

    src, out = Path(model_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.is_file():
            (out / f.name).write_bytes(f.read_bytes())
    for f in sorted(src.glob("*.safetensors")):
        tensors = load_file(f)
        name = sorted(tensors)[0]
        flat = tensors[name].view(-1)
        flat[0] = flat[0] + 1
        save_file(tensors, out / f.name, metadata={"format": "pt"})
    return out
