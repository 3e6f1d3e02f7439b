"""The portable profile: one deposit, byte-exact on hosts with other native capabilities.

Each step runs in its own process, as on separate hosts. The grafting "host"
emulates an AVX2-only machine by capping ATen, MKL and oneDNN in its environment
before torch loads. Native deposits are refused there (the CPU capability and
environment are part of the config fingerprint); portable ones graft byte-exactly.
"""

from __future__ import annotations

import pytest

from kvreg.engine.profiles import PORTABLE_ENV

from .helpers import BLOCK, kvreg

AVX2_HOST = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
THIS_HOST: dict[str, str] = {}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_portable_deposit_grafts_exactly_on_an_avx2_host(dtype, models, texts, tmp_path):
    home = tmp_path / "home"
    llama = models["llama"]
    kvreg(home, "keys", "generate", host=THIS_HOST)
    common = ["--text-file", texts["text"], "--dtype", dtype, "--block-size", BLOCK, "--json"]
    kvreg(home, "deposit", llama, "--ref", "p/portable", "--profile", "portable", *common, host=THIS_HOST)
    kvreg(home, "deposit", llama, "--ref", "p/native", *common, host=THIS_HOST)

    manifest = kvreg(home, "show", "p/portable", "--json").json
    assert manifest["config"]["fields"]["environment"] == dict(sorted(PORTABLE_ENV.items()))
    # No --profile on the grafting host: the recorded config decides, the CLI sets the environment.
    args = ["--model", llama, "--check", "--max-new-tokens", "16", "--json"]
    grafted = kvreg(home, "graft", "p/portable", *args, host=AVX2_HOST).json
    assert grafted["check"]["byte_exact"] is True
    assert grafted["check"]["sha256_equal_steps"] == 16
    assert grafted["probe"]["kv_equal"] is True and grafted["probe"]["witness_equal"] is True

    args = ["--model", llama, "--recompute", "--json"]
    recomputed = kvreg(home, "verify", "p/portable", *args, host=AVX2_HOST).json
    assert recomputed["recompute"]["byte_exact"] is True

    refused = kvreg(home, "graft", "p/native", "--model", llama, "--json", expect=1, host=AVX2_HOST)
    error = refused.json["error"]
    assert error["code"] == "FINGERPRINT_MISMATCH"
    assert "cpu_capability" in error["message"]
