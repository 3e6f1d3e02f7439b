"""Where the bundled flywheel model lives, and the block size it is used with.

The weights are in the ``model/`` directory next to this module (a data
directory, not a package: ``import kvreg.engine.flywheel.model`` finds this
file). This module imports neither torch nor transformers, so that the CLI can
name the default model and block size before the engine is loaded; the model's
architecture is in :mod:`kvreg.engine.flywheel.train`, which builds it.
"""

from __future__ import annotations

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent / "model"

#: The name manifests give the bundled model (its folder is just ``model/``): registries show it.
MODEL_NAME = "kvreg-addition"

BLOCK_SIZE = 8  # a question is about 20 tokens: its full blocks find the artifact by key


def model_path() -> Path:
    """The committed model directory (config.json, model.safetensors, tokenizer files)."""
    return MODEL_DIR
