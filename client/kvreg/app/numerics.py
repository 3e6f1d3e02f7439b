"""Put the numerics profile's environment in place before torch is imported, and keep libraries quiet.

Some variables that decide the bits of a forward pass (``ATEN_CPU_CAPABILITY``,
``MKL_CBWR``, ``CUBLAS_WORKSPACE_CONFIG``, ...) are latched by torch, MKL and
oneDNN when they load (docs/design.md, "When a graft is exact"). The use cases that run the engine call
:func:`prepare_numerics` (through ``kvreg.app.loader``) as soon as they know the
profile and device, and only then import ``kvreg.engine``. If torch is somehow
loaded already and the environment is wrong, the ``kvreg`` command re-executes
itself (``python -m kvreg`` with the same arguments and the completed
environment; a second failure is an error, so it can never loop); any other
process gets a ``ConfigError`` naming the variables.

:func:`quiet_libraries` sets the environment that keeps transformers offline and
quiet, and filters its known harmless warnings (also before it is imported).

This module never imports torch.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from kvreg.core.errors import ConfigError
from kvreg.engine import profiles

log = logging.getLogger(__name__)

REEXEC_MARKER = "KVREG_REEXECUTED"


class _Process:
    """Whether this process is the ``kvreg`` command, which may re-execute itself."""

    may_reexec = False


def allow_reexec(allowed: bool = True) -> bool:
    """Declare this process the ``kvreg`` command: :func:`prepare_numerics` may re-execute it.

    Only ``kvreg.cli.main.main`` calls this (a test harness that runs the command in its
    own process sets it around the call and puts the previous value back, which this
    returns); a library caller that imported torch under the wrong environment gets a
    ``ConfigError`` naming the variables instead.
    """
    previous, _Process.may_reexec = _Process.may_reexec, allowed
    return previous


def prepare_numerics(profile: str, device: str) -> None:
    """Make this process able to run ``profile`` on ``device`` exactly (the command may re-execute)."""
    prof = profiles.parse_profile(profile)
    cuda = device.startswith("cuda")
    missing = profiles.missing_environment(prof, cuda=cuda)
    if not missing:
        return
    if not profiles.torch_already_imported() or not _Process.may_reexec:
        log.debug("setting the %s profile's environment: %s", prof, missing)
        profiles.ensure_environment(prof, cuda=cuda)  # ConfigError once torch is imported
        return
    if os.environ.get(REEXEC_MARKER):
        needed = " ".join(f"{k}={v}" for k, v in sorted(missing.items()))
        raise ConfigError(
            f"the {prof!r} numerics profile needs environment variables that torch latches at import, "
            "and re-executing did not provide them",
            hint=f"start kvreg with: {needed}",
        )
    env = {**os.environ, **missing, REEXEC_MARKER: "1"}
    log.info("re-executing with the %s profile's environment %s", prof, missing)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "kvreg", *sys.argv[1:]], env)  # noqa: S606


def quiet_libraries(verbose: int) -> None:
    """Set the environment that keeps transformers offline and quiet (before it is imported)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if verbose < 2:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        # transformers' GGUF reader draws a bar of its own with tqdm, which reads this at import
        os.environ.setdefault("TQDM_DISABLE", "1")
        for pattern in (
            r".*`past_key_values` is deprecated",
            r".*is deprecated and will be removed in version",
            r".*TypedStorage is deprecated",
            r".*torch\.utils\._pytree\._register_pytree_node is deprecated",
            r".*`torch_dtype` is deprecated",
            r".*sliding window attention.*",
        ):
            warnings.filterwarnings("ignore", message=pattern)
