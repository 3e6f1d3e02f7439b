"""A whole ``kvreg flywheel`` run: load the model (the bundled arithmetic one by default), then the loop.

:func:`run_session` starts the engine with the flywheel's block size
(``kvreg.app.loader``), loads the model and runs the flywheel in the store
(:func:`kvreg.app.flywheel.run.run_in_store`), pushing the library to a remote
when asked. :func:`default_model` names the bundled model. Importing this module
does not import torch (the loop and the engine are imported once the numerics
environment is in place); nothing here renders or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback
from kvreg.app.loader import load_engine
from kvreg.core.keys import SigningKey
from kvreg.engine.flywheel.model import BLOCK_SIZE, model_path
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.app.flywheel.loop import FlywheelReport, Progress


@dataclass(frozen=True)
class FlywheelRequest:
    """The exam's size, the library's sampling, where to deposit and push it; the defaults are
    ``kvreg flywheel``'s."""

    model: Path | None = None  # None: the bundled arithmetic model
    namespace: str = "flywheel"
    push_to: str | None = None  # a remote's name
    repeat_easy: int = 12
    repeat_hard: int = 12
    unseen_easy: int = 4
    unseen_hard: int = 4
    attempts: int = 8
    temperature: float = 1.0
    seed: int = 0
    threads: int | None = None


def run_session(
    home: Home,
    key: SigningKey,
    request: FlywheelRequest,
    feedback: Feedback,
    progress: Progress | None = None,
) -> FlywheelReport:
    """Load the model and run the flywheel in ``home``, the library signed with ``key``."""
    fields = EngineOptions(threads=request.threads, block_size=BLOCK_SIZE).for_new()
    lm, _ = load_engine(feedback, request.model or model_path(), fields, home)
    # Imported once the engine is loaded (torch): the numerics profile must be in place first.
    from kvreg.app.flywheel.loop import FlywheelSpec
    from kvreg.app.flywheel.run import run_in_store

    spec = FlywheelSpec(
        repeat_easy=request.repeat_easy,
        repeat_hard=request.repeat_hard,
        unseen_easy=request.unseen_easy,
        unseen_hard=request.unseen_hard,
        attempts=request.attempts,
        temperature=request.temperature,
        seed=request.seed,
        namespace=request.namespace,
    )
    return run_in_store(lm, home, key, spec, push_to=request.push_to, progress=progress)
