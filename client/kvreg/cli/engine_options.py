"""Engine options shared by ``deposit``, ``graft`` and ``verify``, and loading the engine lazily.

The options (``--dtype``, ``--threads``, ``--attn``, ``--profile``, ``--device``,
``--block-size``) are collected as plain values, without torch. For a deposit,
unset options take the engine's defaults; for a graft or a verify they take the
artifact's recorded config, and an option given on the command line overrides it
(the config fingerprint then differs, and the engine refuses, naming the field:
that is intended).

:func:`load_engine` puts the numerics environment in place, imports
``kvreg.engine`` (and with it torch), silences transformers' progress bars and
known harmless warnings — in the CLI, not in the library — and loads the model
under a status spinner.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvreg.cli.reexec import prepare_numerics
from kvreg.console import Output
from kvreg.core.errors import ConfigError
from kvreg.engine import profiles

if TYPE_CHECKING:
    from kvreg.engine.runtime import LoadedModel
    from kvreg.store.home import Home

log = logging.getLogger(__name__)

ENGINE_PANEL = "Engine (numerics)"
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,3})?", re.ASCII)

# Library defaults, repeated here so that they are known before torch loads
# (kvreg.engine.config holds the same values; a test compares them).
DEFAULT_DEVICE = "cpu"
DEFAULT_PROFILE = profiles.DEFAULT_PROFILE


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


@dataclass(frozen=True)
class EngineChoice:
    """What the user gave on the command line (None: not given)."""

    dtype: str | None = None
    threads: int | None = None
    attn_implementation: str | None = None
    profile: str | None = None
    device: str | None = None
    block_size: int | None = None

    def given(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("dtype", "threads", "attn_implementation", "profile", "device", "block_size"):
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value) if isinstance(value, enum.Enum) else value
        return out


def settings_for_recorded(recorded: dict[str, Any], choice: EngineChoice) -> dict[str, Any]:
    """The settings of a recorded config, with the user's options over them."""
    base: dict[str, Any] = {}
    for name in ("dtype", "attn_implementation", "threads", "device", "profile", "block_size"):
        if name not in recorded:
            raise ConfigError(f"the artifact's recorded config has no {name!r} field")
        base[name] = recorded[name]
    overrides = choice.given()
    if "block_size" in overrides and overrides["block_size"] != base["block_size"]:
        raise ConfigError(
            f"the artifact was computed in blocks of {base['block_size']} tokens; "
            "its block size cannot change"
        )
    base.update(overrides)
    return base


def settings_for_new(choice: EngineChoice) -> dict[str, Any]:
    """The settings of a new computation: the user's options, engine defaults for the rest."""
    return choice.given()


def quiet_libraries(verbose: int) -> None:
    """Set the environment that keeps transformers offline and quiet (before it is imported)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if verbose < 2:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        for pattern in (
            r".*`past_key_values` is deprecated",
            r".*is deprecated and will be removed in version",
            r".*TypedStorage is deprecated",
            r".*torch\.utils\._pytree\._register_pytree_node is deprecated",
            r".*`torch_dtype` is deprecated",
            r".*sliding window attention.*",
        ):
            warnings.filterwarnings("ignore", message=pattern)


def silence_transformers(verbose: int) -> None:
    if verbose >= 2:
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def load_engine(
    out: Output, model_dir: str | Path, fields: dict[str, Any], home: Home
) -> tuple[LoadedModel, float]:
    """Prepare the numerics, import the engine and load the model; returns it and the seconds taken."""
    prepare_numerics(str(fields.get("profile", DEFAULT_PROFILE)), str(fields.get("device", DEFAULT_DEVICE)))
    quiet_libraries(out.verbose)
    with out.status("starting the engine (torch, transformers)"):
        from kvreg.engine.config import EngineSettings
        from kvreg.engine.runtime import load_model

        silence_transformers(out.verbose)
    settings = EngineSettings(**fields)
    started = time.perf_counter()
    with out.status(f"loading model {model_dir}"):
        lm = load_model(model_dir, settings, cache_dir=home.cache_dir)
    return lm, time.perf_counter() - started
