"""Byte-exactness on a CUDA device (native profile: GPU name and capability in the config).

Needs a GPU: CPU-only hosts (CI here) skip it with the reason printed by ``-ra``.
Run on a GPU host with ``pytest -m gpu``.
"""

from __future__ import annotations

import pytest

from .helpers import BLOCK, kvreg


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not _cuda_available(), reason="needs a CUDA device; run on a GPU host with `pytest -m gpu`"
    ),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_graft_on_cuda_is_byte_exact(arch, dtype, models, texts, tmp_path):
    home = tmp_path / "home"
    model = models[arch]
    kvreg(home, "keys", "generate")
    args = ["--text-file", texts["text"], "--ref", "g/a", "--device", "cuda", "--dtype", dtype]
    kvreg(home, "deposit", model, *args, "--block-size", BLOCK, "--json")
    out = kvreg(home, "graft", "g/a", "--model", model, "--check", "--max-new-tokens", "32", "--json").json
    assert out["check"]["byte_exact"] is True and out["check"]["sha256_equal_steps"] == 32
    args = ["--model", model, "--blocks", "2", "--append-file", texts["suffix"], "--check", "--json"]
    assert kvreg(home, "graft", "g/a", *args).json["check"]["byte_exact"] is True
