"""The portable profile: one deposit, byte-exact on hosts with other native capabilities.

Each step on the grafting "host" runs in its own process, as on a separate host; the
depositing host's steps run in the test process but the portable deposit. The grafting "host"
emulates an AVX2-only machine by capping ATen, MKL and oneDNN in its environment
before torch loads. Native deposits are refused there (the CPU capability and
environment are part of the config fingerprint); portable ones graft byte-exactly.
"""

from __future__ import annotations

from typing import Any

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
    # This host's steps: keys and the native deposit in the test process (this host, native
    # numerics: no fresh process needed), the portable deposit in a process of its own (the
    # profile's environment must be set before torch loads).
    kvreg(home, "keys", "generate")
    common = ["--text-file", texts["text"], "--dtype", dtype, "--block-size", BLOCK, "--json"]
    kvreg(home, "deposit", llama, "--ref", "p/portable", "--profile", "portable", *common, host=THIS_HOST)
    kvreg(home, "deposit", llama, "--ref", "p/native", *common)

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
    native = kvreg(home, "show", "p/native", "--json").json["config"]["fields"]
    assert config_fields_named(error["message"]) == expected_avx2_host_differences(native)


def expected_avx2_host_differences(native: dict[str, Any]) -> set[str]:
    """The config fields in which a native deposit made here differs from the emulated AVX2 host.

    They depend on the host that runs the suite: the emulated host's CPU capability is AVX2,
    so ``cpu_capability`` differs only where this host's native one is something else (an
    AVX-512 or AMX host: yes; an AVX2-only host such as AMD Zen 3: no). The emulating
    variables are recorded in the native config's ``environment`` field, so each differs
    unless this host's environment already sets it to the same value.
    """
    fields = {
        f"environment.{name}" for name, value in AVX2_HOST.items() if native["environment"].get(name) != value
    }
    if native["cpu_capability"] != "AVX2":
        fields.add("cpu_capability")
    assert fields, "the emulated AVX2 host must differ from this one somewhere"
    return fields


def config_fields_named(message: str) -> set[str]:
    """The fields a FINGERPRINT_MISMATCH message names: ``config fingerprint: a: ...; b: ...``."""
    line = next(line for line in message.splitlines() if "config fingerprint: " in line)
    return {part.split(":", 1)[0].strip() for part in line.split("config fingerprint: ", 1)[1].split("; ")}
