"""The engine options of the commands that run the engine, declared once.

``--dtype``, ``--threads``, ``--attn``, ``--profile``, ``--device`` and
``--block-size`` are Typer ``Annotated`` aliases that ``deposit``, ``graft``,
``verify``, ``route``, ``ask`` and ``flywheel`` reuse (same help texts, same
panel); :func:`bundle` turns the values parsed into the one
``kvreg.app.engine_options.EngineOptions`` every use case takes.

This module never imports torch; loading the engine is the use cases' job.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated

import typer

from kvreg.app.engine_options import EngineOptions

ENGINE_PANEL = "Engine (numerics)"
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,3})?", re.ASCII)


class Dtype(enum.StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"


class Attn(enum.StrEnum):
    eager = "eager"
    sdpa = "sdpa"


class ProfileChoice(enum.StrEnum):
    native = "native"
    portable = "portable"


def _check_device(value: str | None) -> str | None:
    if value is not None and _DEVICE.fullmatch(value) is None:
        raise typer.BadParameter(f"{value!r} is not a device; use cpu, cuda or cuda:N")
    return value


DtypeOpt = Annotated[
    Dtype | None,
    typer.Option("--dtype", help="Compute dtype.", rich_help_panel=ENGINE_PANEL, show_default=False),
]
ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads", min=1, max=1024, help="CPU threads (part of the config).", rich_help_panel=ENGINE_PANEL
    ),
]
AttnOpt = Annotated[
    Attn | None,
    typer.Option(
        "--attn", help="Attention implementation.", rich_help_panel=ENGINE_PANEL, show_default=False
    ),
]
ProfileOpt = Annotated[
    ProfileChoice | None,
    typer.Option(
        "--profile",
        help="Numerics profile: native (fastest) or portable (exact on every AVX2 x86-64 host).",
        rich_help_panel=ENGINE_PANEL,
        show_default=False,
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",
        metavar="cpu|cuda[:N]",
        callback=_check_device,
        help="Device to compute on.",
        rich_help_panel=ENGINE_PANEL,
    ),
]
BlockSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--block-size",
        min=1,
        max=65536,
        help="Tokens per block of the prefill grid (default 64).",
        rich_help_panel=ENGINE_PANEL,
    ),
]


def bundle(
    dtype: Dtype | None = None,
    threads: int | None = None,
    attn: Attn | None = None,
    profile: ProfileChoice | None = None,
    device: str | None = None,
    block_size: int | None = None,
) -> EngineOptions:
    """The engine options parsed, as the use cases take them (plain strings, None when not given)."""
    return EngineOptions(
        dtype=None if dtype is None else str(dtype),
        threads=threads,
        attn_implementation=None if attn is None else str(attn),
        profile=None if profile is None else str(profile),
        device=device,
        block_size=block_size,
    )
