"""Load a model under engine settings: the numerics environment first, then torch, then the model.

:func:`load_engine` puts the numerics profile's environment in place (which may
re-execute the process, ``kvreg.app.numerics``), keeps transformers offline and
quiet, imports ``kvreg.engine`` (and with it torch) and loads the model;
:func:`start_engine` does all that but loading a model (``kvreg demo`` brings its
own). This is the one place a use case starts the engine; it prints nothing (the status lines
go to the caller's ``Feedback``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.app.engine_options import DEFAULT_DEVICE, DEFAULT_PROFILE
from kvreg.app.feedback import Feedback
from kvreg.app.models import resolve_model
from kvreg.app.numerics import prepare_numerics, quiet_libraries

if TYPE_CHECKING:
    from kvreg.engine.runtime import LoadedModel
    from kvreg.store.home import Home

log = logging.getLogger(__name__)


def start_engine(feedback: Feedback, profile: str = DEFAULT_PROFILE, device: str = DEFAULT_DEVICE) -> None:
    """Put the numerics profile's environment in place (which may re-execute the process), keep
    transformers offline and quiet, and import the engine (torch, transformers)."""
    prepare_numerics(profile, device)
    quiet_libraries(feedback.verbose)
    with feedback.status("starting the engine (torch, transformers)"):
        # Imported here, not at the top: torch must load after the environment above is set.
        from kvreg.engine.runtime import silence_transformers

        silence_transformers(feedback.verbose)


def load_engine(
    feedback: Feedback, model_dir: str | Path, fields: dict[str, Any], home: Home
) -> tuple[LoadedModel, float]:
    """Prepare the numerics, import the engine and load the model; returns it and the seconds taken.

    ``model_dir`` is a model folder or an imported model's name (:func:`kvreg.app.models.resolve_model`).
    """
    model_dir = resolve_model(model_dir)
    start_engine(
        feedback, str(fields.get("profile", DEFAULT_PROFILE)), str(fields.get("device", DEFAULT_DEVICE))
    )
    # Imported here, not at the top: torch must load after start_engine set the environment.
    from kvreg.engine.pinned import EngineSettings
    from kvreg.engine.runtime import load_model

    settings = EngineSettings(**fields)
    started = time.perf_counter()
    with feedback.status(f"loading model {model_dir}"):
        lm = load_model(model_dir, settings, cache_dir=home.cache_dir)
    return lm, time.perf_counter() - started
