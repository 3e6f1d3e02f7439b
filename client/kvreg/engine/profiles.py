"""Numerics profiles: the process environment that must be in place before torch loads.

Some of the knobs that decide the bits of a prefill are latched by torch, MKL and
oneDNN at their first tensor operation, so they can only be set in the
environment *before* ``import torch``. This module knows those
variables and nothing else: it never imports torch, so the CLI can consult it,
and re-execute itself with the right environment, before the engine loads.

Profiles:

- ``native``: the host's fastest code paths. Deposits are byte-exact only on hosts
  with the same CPU capability (or GPU architecture) and libraries; the capability
  is recorded in the config fingerprint.
- ``portable``: pins ATen's CPU kernels to AVX2, MKL to its ``COMPATIBLE`` code path in
  strict (thread-count independent) conditional-numerical-reproducibility mode, and
  keeps oneDNN off, so that one deposit grafts byte-exactly on every x86-64 host with
  AVX2 and the same library builds, Intel or AMD. MKL's ``COMPATIBLE`` branch is the
  only one it honours on every vendor: on an AMD EPYC (Zen 3) host, MKL 2024.2 runs
  ``MKL_CBWR=AVX2,STRICT`` (this profile's earlier value) as
  ``CNR:AUTO`` (``MKL_VERBOSE=1`` says so), and a portable deposit made on an Intel
  host failed its witness probe there. Costs: docs/benchmarks.md § The portable profile.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Literal

from kvreg.core.errors import ConfigError

Profile = Literal["native", "portable"]
PROFILES: tuple[Profile, ...] = ("native", "portable")
DEFAULT_PROFILE: Profile = "native"

# Every environment variable known to change the bits of a CPU or a GPU forward
# pass. Their values (or absence) are recorded in the config fingerprint.
CPU_ENV_VARS: tuple[str, ...] = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
)
CUDA_ENV_VARS: tuple[str, ...] = ("CUBLAS_WORKSPACE_CONFIG", "NVIDIA_TF32_OVERRIDE")

PORTABLE_ENV: Mapping[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}

# Needed for torch.use_deterministic_algorithms(True) with cuBLAS; harmless on CPU.
CUDA_DETERMINISM_ENV: Mapping[str, str] = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def parse_profile(value: str) -> Profile:
    if value not in PROFILES:
        raise ConfigError(f"unknown numerics profile {value!r}", hint=f"choose one of: {', '.join(PROFILES)}")
    return value  # type: ignore[return-value]


def required_environment(profile: Profile, *, cuda: bool = False) -> dict[str, str]:
    """The environment variables a profile needs set before torch is imported."""
    env = dict(CUDA_DETERMINISM_ENV) if cuda else {}
    if profile == "portable":
        env.update(PORTABLE_ENV)
    return env


def missing_environment(
    profile: Profile, *, cuda: bool = False, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The subset of ``required_environment(profile)`` that ``environ`` lacks or sets otherwise."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in required_environment(profile, cuda=cuda).items() if environ.get(k) != v}


def numerics_environment(
    *, cuda: bool = False, environ: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """The current values of the numerics-relevant variables of a device (None when unset)."""
    environ = os.environ if environ is None else environ
    return {k: environ.get(k) for k in (CUDA_ENV_VARS if cuda else CPU_ENV_VARS)}


def torch_already_imported() -> bool:
    return "torch" in sys.modules


def ensure_environment(profile: Profile, *, cuda: bool = False) -> None:
    """Raise ``ConfigError`` unless this process can run ``profile`` exactly.

    Before torch is imported the missing variables are simply set in this
    process's environment (torch, MKL and oneDNN read them at their first use).
    Once torch is imported it is too late: the CLI then re-executes itself (see
    ``kvreg.app.numerics``); library users set the variables before importing torch.
    """
    missing = missing_environment(profile, cuda=cuda)
    if not missing:
        return
    needed = " ".join(f"{k}={v!r}" for k, v in sorted(missing.items()))
    if torch_already_imported():
        raise ConfigError(
            f"the {profile!r} numerics profile needs environment variables that torch latches at import",
            hint=f"start the process with: {needed}",
            missing=missing,
        )
    os.environ.update(missing)
