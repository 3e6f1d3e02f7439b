"""``kvreg.engine.model_defaults``: a model's end-of-turn ids (one or a list, in
``generation_config.json``, else ``config.json``; the tokenizer's EOS always) and the sampling
defaults it ships, out-of-range values left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreg.engine.model_defaults import ModelDefaults, model_defaults


def _folder(tmp_path: Path, generation: object | None, config: dict[str, object] | None = None) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config or {"eos_token_id": 2}))
    if generation is not None:
        text = generation if isinstance(generation, str) else json.dumps(generation)
        (tmp_path / "generation_config.json").write_text(text)
    return tmp_path


def test_every_eos_id_of_the_generation_config_ends_a_turn(tmp_path: Path) -> None:
    llama3 = {
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "temperature": 0.6,
        "top_p": 0.9,
    }
    defaults = model_defaults(_folder(tmp_path, llama3), tokenizer_eos=128009)
    assert defaults.end_ids == {128001, 128008, 128009}
    assert defaults.as_dict() == {"temperature": 0.6, "top_p": 0.9}
    assert defaults.source is not None and defaults.source.endswith("generation_config.json")


def test_one_id_and_the_tokenizers_eos(tmp_path: Path) -> None:
    gemma = {"eos_token_id": 106, "top_k": 64, "top_p": 0.95, "max_new_tokens": 512, "do_sample": False}
    defaults = model_defaults(_folder(tmp_path, gemma), tokenizer_eos=1)
    assert defaults.end_ids == {1, 106}
    # the file's values, whatever do_sample says (vLLM's --generation-config auto)
    assert defaults.as_dict() == {"top_k": 64, "top_p": 0.95, "max_tokens": 512}


def test_without_a_generation_config_the_model_configs_ids(tmp_path: Path) -> None:
    config = {"eos_token_id": [2, 7], "text_config": {"eos_token_id": 9}, "temperature": 0.1}
    defaults = model_defaults(_folder(tmp_path, None, config), tokenizer_eos=2)
    assert defaults == ModelDefaults(frozenset({2, 7, 9}))  # no sampling defaults from config.json


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("temperature", 2.5),
        ("temperature", -1),
        ("temperature", "0.7"),
        ("top_p", 0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("top_k", 2.5),
        ("top_k", True),
        ("min_p", 2),
        ("repetition_penalty", 0),
        ("max_new_tokens", 0),
        ("max_new_tokens", "many"),
    ],
)
def test_a_value_out_of_range_is_left_out(tmp_path: Path, key: str, value: object) -> None:
    other = "min_p" if key == "top_p" else "top_p"
    defaults = model_defaults(_folder(tmp_path, {"eos_token_id": 2, other: 0.5, key: value}), None)
    assert defaults.as_dict() == {other: 0.5}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", json.dumps({"eos_token_id": "two"})])
def test_a_broken_generation_config_is_not_used(tmp_path: Path, text: str) -> None:
    defaults = model_defaults(_folder(tmp_path, text, {"eos_token_id": 2}), tokenizer_eos=3)
    ends = {3} if "two" in text else {2, 3}  # unreadable: as if absent (the model config's ids)
    assert defaults.end_ids == ends and defaults.as_dict() == {}
