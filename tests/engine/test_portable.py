"""The portable profile: one deposit, byte-exact on hosts with other native capabilities.

Each step runs in its own process, as on separate hosts. The grafting "host"
emulates an AVX2-only machine by capping ATen, MKL and oneDNN in its environment
before torch loads. Native deposits are refused there (the CPU capability and
environment are part of the config fingerprint); portable ones graft byte-exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvreg.engine.profiles import PORTABLE_ENV

from .conftest import TEXT

AVX2_HOST = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
NUMERICS_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def kvreg(home: Path, *args: str, host: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in NUMERICS_VARS}
    env.update(host or {})
    env["KVREG_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "kvreg", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def _json(proc: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_portable_deposit_grafts_exactly_on_an_avx2_host(dtype: str, llama_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    text = tmp_path / "solution.txt"
    text.write_text(TEXT)
    assert kvreg(home, "keys", "generate").returncode == 0
    common = ["--dtype", dtype, "--block-size", "16", "--json"]
    _json(
        kvreg(
            home,
            "deposit",
            str(llama_dir),
            "--text-file",
            str(text),
            "--ref",
            "p/portable",
            "--profile",
            "portable",
            *common,
        )
    )
    _json(kvreg(home, "deposit", str(llama_dir), "--text-file", str(text), "--ref", "p/native", *common))

    manifest = _json(kvreg(home, "show", "p/portable", "--json"))
    assert manifest["config"]["fields"]["environment"] == dict(sorted(PORTABLE_ENV.items()))
    # No --profile on the grafting host: the recorded config decides, the CLI sets the environment.
    grafted = _json(
        kvreg(
            home,
            "graft",
            "p/portable",
            "--model",
            str(llama_dir),
            "--check",
            "--max-new-tokens",
            "16",
            "--json",
            host=AVX2_HOST,
        )
    )
    assert grafted["check"]["byte_exact"] is True
    assert grafted["check"]["sha256_equal_steps"] == 16
    assert grafted["probe"]["kv_equal"] is True and grafted["probe"]["witness_equal"] is True

    recomputed = _json(
        kvreg(
            home, "verify", "p/portable", "--model", str(llama_dir), "--recompute", "--json", host=AVX2_HOST
        )
    )
    assert recomputed["recompute"]["byte_exact"] is True

    refused = kvreg(home, "graft", "p/native", "--model", str(llama_dir), "--json", host=AVX2_HOST)
    assert refused.returncode == 1
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "FINGERPRINT_MISMATCH"
    assert "cpu_capability" in error["message"]
