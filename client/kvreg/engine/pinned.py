"""The pinned numerics configuration: what it is, how it is fingerprinted, how it is applied.

A ``PinnedConfig`` records every setting that decides the bits of a forward pass
(docs/design.md, "When a graft is exact"): dtype, attention implementation, thread count,
deterministic-algorithm and reduced-precision flags, device and CPU capability or
GPU name and compute capability, the library versions, the numerics environment
variables, and the block size of the prefill schedule. Its fingerprint is the
SHA-256 of its canonical JSON. ``apply()`` sets the process-wide torch flags; it
must run before any compute, and the profile's environment must already be in
place (``kvreg.engine.profiles``).

This module does not load models; it does not decide whether two configs are
"close enough" — they are equal or they are not, and ``diff_fields`` names what
differs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import safetensors
import torch
import transformers

from kvreg.core.canonical import canonical_json
from kvreg.core.digest import Digest
from kvreg.core.errors import ConfigError
from kvreg.engine import profiles

log = logging.getLogger(__name__)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
ATTN_IMPLEMENTATIONS = ("eager", "sdpa")
DEFAULT_BLOCK_SIZE = 64
DEFAULT_THREADS = 2
CONFIG_FORMAT = "kvreg.config/v1"


@dataclass(frozen=True)
class EngineSettings:
    """What a user chooses. ``resolve()`` turns it into the full ``PinnedConfig``."""

    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    threads: int = DEFAULT_THREADS
    device: str = "cpu"
    profile: profiles.Profile = profiles.DEFAULT_PROFILE
    block_size: int = DEFAULT_BLOCK_SIZE

    def validate(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"unsupported dtype {self.dtype!r}", hint=f"choose one of: {', '.join(DTYPES)}")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ConfigError(
                f"unsupported attention implementation {self.attn_implementation!r}",
                hint=f"choose one of: {', '.join(ATTN_IMPLEMENTATIONS)}",
            )
        if not 1 <= self.threads <= 1024:
            raise ConfigError(f"thread count must be between 1 and 1024, got {self.threads}")
        if not 1 <= self.block_size <= 1 << 16:
            raise ConfigError(f"block size must be between 1 and 65536, got {self.block_size}")
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigError(f"unsupported device {self.device!r}", hint="use 'cpu' or 'cuda[:N]'")
        profiles.parse_profile(self.profile)
        if self.profile == "portable" and self.device != "cpu":
            raise ConfigError(
                "the portable profile is defined for CPU hosts only", hint="use --profile native"
            )

    @classmethod
    def from_config_fields(cls, fields: dict[str, Any]) -> EngineSettings:
        """The settings that reproduce a recorded config (used by graft and check)."""
        try:
            return cls(
                dtype=fields["dtype"],
                attn_implementation=fields["attn_implementation"],
                threads=int(fields["threads"]),
                device=fields["device"],
                profile=profiles.parse_profile(fields["profile"]),
                block_size=int(fields["block_size"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"recorded config is incomplete or malformed: {e}") from e

    def resolve(self) -> PinnedConfig:
        """Apply nothing; describe the config this process would run under these settings."""
        self.validate()
        return PinnedConfig(settings=self, fields=_describe(self))


@dataclass(frozen=True)
class PinnedConfig:
    settings: EngineSettings
    fields: dict[str, Any]

    @property
    def fingerprint(self) -> Digest:
        return Digest.of_bytes(canonical_json(self.fields))

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.settings.dtype]

    @property
    def device(self) -> torch.device:
        return torch.device(self.settings.device)

    @property
    def block_size(self) -> int:
        return self.settings.block_size

    def apply(self) -> None:
        """Set the process-wide torch state this config requires. Idempotent."""
        apply_settings(self.settings)
        actual = _describe(self.settings)
        if actual != self.fields:
            raise ConfigError(
                "this process cannot run the pinned config",
                hint="; ".join(diff_fields(self.fields, actual)),
            )


def apply_settings(settings: EngineSettings) -> None:
    profiles.ensure_environment(settings.profile, cuda=settings.device.startswith("cuda"))
    torch.set_num_threads(settings.threads)
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    # oneDNN takes bfloat16 matmuls on its own ISA-dependent path (and crashes on
    # AMX hosts when ATen is capped at AVX2); the portable profile keeps it off.
    # torch declares the flag as a ContextProp descriptor; assigning a bool is its documented use
    torch.backends.mkldnn.enabled = settings.profile != "portable"  # type: ignore[assignment]


def _describe(settings: EngineSettings) -> dict[str, Any]:
    device = torch.device(settings.device)
    gpu: dict[str, str] | None = None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {settings.device!r} requested but CUDA is not available")
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        gpu = {
            "name": torch.cuda.get_device_name(index),
            "capability": f"{major}.{minor}",
            "cuda": str(torch.version.cuda),
            "cudnn": str(torch.backends.cudnn.version()),
        }
    return {
        "format": CONFIG_FORMAT,
        "profile": settings.profile,
        "dtype": settings.dtype,
        "attn_implementation": settings.attn_implementation,
        "threads": settings.threads,
        "device": device.type,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": gpu,
        "mkldnn_enabled": settings.profile != "portable",
        "deterministic_algorithms": True,
        "float32_matmul_precision": "highest",
        "tf32": False,
        "reduced_precision_reduction": False,
        "environment": _environment(settings, cuda=device.type == "cuda"),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "safetensors": safetensors.__version__,
        },
        "block_size": settings.block_size,
        "schedule": "absolute-grid",
    }


def _environment(settings: EngineSettings, *, cuda: bool) -> dict[str, str | None]:
    # Under the portable profile only the pinned variables count: they override the
    # host's ISA choices, which is what makes the bits independent of the host.
    if settings.profile == "portable":
        return dict(sorted(profiles.PORTABLE_ENV.items()))
    return profiles.numerics_environment(cuda=cuda)


def diff_fields(expected: dict[str, Any], actual: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable lines naming every field that differs between two configs."""
    lines: list[str] = []
    for key in sorted(set(expected) | set(actual)):
        a, b = expected.get(key), actual.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines.extend(diff_fields(a, b, f"{prefix}{key}."))
        elif a != b:
            lines.append(f"{prefix}{key}: artifact has {a!r}, this host has {b!r}")
    return lines
