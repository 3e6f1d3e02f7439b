"""The bundled model: a real model directory, loaded like any other, that passes an easy exam.

The exam here is small (10 easy, 10 hard held-out problems, greedy) but real:
the committed weights must solve most easy problems and fewer hard ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvreg.engine.fingerprint import model_fingerprint, tokenizer_fingerprint
from kvreg.engine.flywheel import exam
from kvreg.engine.flywheel.model import MODEL_DIR, model_path
from kvreg.engine.flywheel.task import Problem
from kvreg.engine.flywheel.tokenizer import build_tokenizer
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import LoadedModel, load_model

# Pinned: a re-save or retraining that changes the weights, config or tokenizer fails here.
MODEL_FP = "sha256:fd4524e7483f6a882badda463481de2bb9d265f756ed122fc36bc78630952837"
TOKENIZER_FP = "sha256:d550e7b774580982a85873bc36e914e06fbf5c2e115c0d696f01c308bcf88097"


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model(model_path(), EngineSettings())


def test_directory_contents() -> None:
    names = {p.name for p in MODEL_DIR.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "TRAINING.json",
    } <= names
    assert not any(n.endswith((".bin", ".pt", ".pth")) for n in names)
    assert (MODEL_DIR / "model.safetensors").stat().st_size < 5_000_000


def test_training_record() -> None:
    record = json.loads((MODEL_DIR / "TRAINING.json").read_text())
    assert record["seed"] == 0
    # the record keeps the command as it was run (the module was kvreg.flywheel.train then)
    assert record["command"].startswith(
        ("python -m kvreg.flywheel.train", "python -m kvreg.engine.flywheel.train")
    )
    held_out = record["held_out"]
    assert held_out["easy_greedy"]["accuracy"] > held_out["hard_greedy"]["accuracy"]


def test_loads_through_the_engine(lm: LoadedModel) -> None:
    assert lm.info["architecture"] == "LlamaForCausalLM"
    assert (lm.info["num_layers"], lm.info["kv_heads"], lm.info["head_dim"]) == (4, 4, 32)
    assert 1_000_000 < sum(p.numel() for p in lm.model.parameters()) < 1_100_000
    assert lm.model.dtype == torch.float32
    text = Problem(4821, 3967).trace()
    assert lm.encode(text, first=True) == build_tokenizer()(text)["input_ids"]


def test_loads_with_plain_transformers() -> None:
    model = AutoModelForCausalLM.from_pretrained(model_path(), local_files_only=True, use_safetensors=True)
    tokenizer = AutoTokenizer.from_pretrained(model_path(), local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert len(tokenizer) == 23


def test_fingerprints_are_pinned(lm: LoadedModel) -> None:
    assert str(model_fingerprint(model_path())) == str(lm.model_fp) == MODEL_FP
    assert str(tokenizer_fingerprint(model_path())) == str(lm.tokenizer_fp) == TOKENIZER_FP


def test_small_exam(lm: LoadedModel) -> None:
    easy = exam.attempt(lm.model, lm.tokenizer, exam.easy_exam(10))
    hard = exam.attempt(lm.model, lm.tokenizer, exam.hard_exam(10))
    solved_easy = sum(a.correct for a in easy)
    solved_hard = sum(a.correct for a in hard)
    assert solved_easy >= 8, [(a.prompt, a.completion) for a in easy if not a.correct]
    assert solved_hard < solved_easy
    for a in easy + hard:
        assert a.completion.startswith("S:")  # it writes a solution, not a bare guess


def test_answer_copied_from_a_verified_solution(lm: LoadedModel) -> None:
    hard = exam.attempt(lm.model, lm.tokenizer, exam.hard_exam(10), with_solution=True)
    assert sum(a.correct for a in hard) >= 9
    assert all(a.tokens <= 16 for a in hard)


def test_greedy_matches_engine_decoding(lm: LoadedModel) -> None:
    """The exam's batched decoding agrees with the engine's one-sequence greedy loop."""
    from kvreg.engine.runtime import decode, new_cache, prefill

    p = exam.easy_exam(1)[0]
    [(text, n)] = exam.greedy(lm.model, lm.tokenizer, [p.question()])
    tokens = lm.encode(p.question(), first=True)
    cache = new_cache(lm)
    logits, _ = prefill(lm, cache, tokens, 0)
    out = decode(lm, cache, logits, 160, stop_at_eos=True)
    assert len(out.tokens) == n
    assert lm.tokenizer.decode(out.tokens, skip_special_tokens=True) == text


def test_model_path_is_inside_the_package() -> None:
    import kvreg.engine.flywheel

    assert model_path() == Path(kvreg.engine.flywheel.__file__).resolve().parent / "model"
