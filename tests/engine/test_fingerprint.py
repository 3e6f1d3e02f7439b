"""Model, tokenizer and config fingerprints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from kvreg.core.errors import ModelError
from kvreg.engine import fingerprint as fp
from kvreg.engine.pinned import EngineSettings, diff_fields
from kvreg.engine.tiny import build_tokenizer, perturb_one_weight


def test_weights_fingerprint_ignores_sharding(llama_dir: Path, tmp_path: Path) -> None:
    sharded = tmp_path / "sharded"
    shutil.copytree(llama_dir, sharded)
    tensors = load_file(sharded / "model.safetensors")
    names = sorted(tensors)
    (sharded / "model.safetensors").unlink()
    save_file({n: tensors[n] for n in names[::2]}, sharded / "model-00001-of-00002.safetensors")
    save_file({n: tensors[n] for n in names[1::2]}, sharded / "model-00002-of-00002.safetensors")
    assert fp.weights_fingerprint(sharded) == fp.weights_fingerprint(llama_dir)
    assert fp.model_fingerprint(sharded) == fp.model_fingerprint(llama_dir)


def test_one_changed_weight_changes_the_fingerprint(llama_dir: Path, tmp_path: Path) -> None:
    changed = perturb_one_weight(llama_dir, tmp_path / "changed")
    assert fp.model_fingerprint(changed) != fp.model_fingerprint(llama_dir)
    assert fp.tokenizer_fingerprint(changed) == fp.tokenizer_fingerprint(llama_dir)


def test_volatile_config_fields_do_not_count_but_real_ones_do(llama_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(llama_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    config["transformers_version"] = "0.0.1"
    (copy / "config.json").write_text(json.dumps(config, indent=7))
    assert fp.model_fingerprint(copy) == fp.model_fingerprint(llama_dir)
    config["rms_norm_eps"] = 1e-3
    (copy / "config.json").write_text(json.dumps(config))
    assert fp.model_fingerprint(copy) != fp.model_fingerprint(llama_dir)


def test_the_cache_is_keyed_by_file_identity(llama_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(llama_dir, copy)
    cache = tmp_path / "cache"
    first = fp.weights_fingerprint(copy, cache_dir=cache)
    entries = json.loads((cache / "weights-fingerprints.json").read_text())
    assert len(entries) == 1
    # a cached entry is used as long as the file is unchanged...
    (key,) = entries
    entries[key][0][3] = "0" * 64
    (cache / "weights-fingerprints.json").write_text(json.dumps(entries))
    assert fp.weights_fingerprint(copy, cache_dir=cache) != first
    # ...and a rewritten file (new mtime/inode) is hashed again
    data = (copy / "model.safetensors").read_bytes()
    (copy / "model.safetensors").unlink()
    (copy / "model.safetensors").write_bytes(data)
    assert fp.weights_fingerprint(copy, cache_dir=cache) == first


def test_tokenizer_fingerprint_sees_tokenizer_changes(llama_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(llama_dir, other)
    build_tokenizer(vocab_size=400).save_pretrained(other)
    assert fp.tokenizer_fingerprint(other) != fp.tokenizer_fingerprint(llama_dir)


def test_directories_without_safetensors_or_tokenizer_are_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="safetensors"):
        fp.weights_fingerprint(tmp_path)
    with pytest.raises(ModelError, match="tokenizer"):
        fp.tokenizer_fingerprint(tmp_path)


def test_config_fingerprint_changes_with_every_numerics_setting() -> None:
    base = EngineSettings().resolve()
    variants = [
        EngineSettings(threads=1),
        EngineSettings(dtype="bfloat16"),
        EngineSettings(attn_implementation="eager"),
        EngineSettings(block_size=32),
    ]
    prints = {base.fingerprint} | {v.resolve().fingerprint for v in variants}
    assert len(prints) == 1 + len(variants)
    lines = diff_fields(base.fields, EngineSettings(threads=1).resolve().fields)
    assert lines == ["threads: artifact has 2, this host has 1"]


def test_config_records_versions_capability_and_flags() -> None:
    fields = EngineSettings().resolve().fields
    assert fields["versions"]["torch"].startswith("2.")
    assert fields["cpu_capability"] in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "NEON", "SVE256"}
    assert fields["deterministic_algorithms"] is True and fields["tf32"] is False
    assert set(fields["environment"]) >= {"ATEN_CPU_CAPABILITY", "MKL_CBWR"}


def test_manifests_name_the_bundled_flywheel_model_not_model(tmp_path: Path) -> None:
    from kvreg.engine.flywheel.model import MODEL_NAME, model_path
    from kvreg.engine.runtime import model_name

    assert model_path().name == "model" and model_name(model_path()) == MODEL_NAME == "kvreg-addition"
    assert model_name(tmp_path / "SmolLM2-135M-Instruct") == "SmolLM2-135M-Instruct"
