#!/usr/bin/env bash
# Retrain the bundled flywheel model (docs/flywheel.md, "The bundled model").
# Seeded and reproducible with the same thread count; about 15-25 minutes on 2 cores.
# Writes client/kvreg/engine/flywheel/model/ (config, safetensors, tokenizer, TRAINING.json).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE
PYTHON="${PYTHON:-.venv/bin/python}"
exec "$PYTHON" -m kvreg.engine.flywheel.train --out client/kvreg/engine/flywheel/model "$@"
