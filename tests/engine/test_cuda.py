"""Byte-exactness on a CUDA device (native profile: GPU name and capability in the config).

Needs a GPU: CPU-only hosts (CI here) skip it with the reason printed by ``-ra``.
Run on a GPU host with ``pytest -m gpu``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import TEXT


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not _cuda_available(), reason="needs a CUDA device; run on a GPU host with `pytest -m gpu`"
    ),
]


def kvreg(home: Path, *args: str) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "KVREG_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "kvreg", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_graft_on_cuda_is_byte_exact(arch: str, dtype: str, models_dir: Path, tmp_path: Path) -> None:
    from kvreg.engine.tiny import build_model_dir

    model = build_model_dir(models_dir / f"cuda-{arch}", arch, seed=0)
    home = tmp_path / "home"
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    kvreg(home, "keys", "generate")
    kvreg(
        home,
        "deposit",
        str(model),
        "--text-file",
        str(text),
        "--ref",
        "g/a",
        "--device",
        "cuda",
        "--dtype",
        dtype,
        "--block-size",
        "16",
        "--json",
    )
    out = kvreg(home, "graft", "g/a", "--model", str(model), "--check", "--max-new-tokens", "32", "--json")
    assert out["check"]["byte_exact"] is True and out["check"]["sha256_equal_steps"] == 32
    out = kvreg(
        home,
        "graft",
        "g/a",
        "--model",
        str(model),
        "--blocks",
        "2",
        "--append-file",
        str(text),
        "--check",
        "--json",
    )
    assert out["check"]["byte_exact"] is True
