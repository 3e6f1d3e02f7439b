"""The shifted graft: an artifact placed after other text by re-rotating its keys — APPROXIMATE.

:func:`shifted_graft` opens the artifact, loads the model under its recorded
config, grafts it after ``prefix_text`` (``kvreg.engine.shifted``) and measures
the residual against a fresh run. It is never reported as exact, never an exit-3
check, and sends no receipt. This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.app import keyring
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.loader import load_engine
from kvreg.store.artifacts import read_tokens
from kvreg.store.home import Home


@dataclass(frozen=True)
class ShiftedGraftRequest:
    ref: str
    model: Path
    prefix_text: str  # the text the artifact is placed after
    max_new_tokens: int = 32
    engine: EngineOptions = field(default_factory=EngineOptions)


@dataclass
class ShiftedGraftReport:
    ref: str | None
    manifest_digest: str
    shift: dict[str, Any]  # kvreg.engine.shifted.ShiftReport.to_dict()
    output_text: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "manifest_digest": self.manifest_digest,
            **self.shift,
            "output_text": self.output_text,
        }


def shifted_graft(
    home: Home, request: ShiftedGraftRequest, feedback: Feedback | None = None
) -> ShiftedGraftReport:
    """Graft ``request.ref`` after ``request.prefix_text`` (approximate) and measure the residual."""
    feedback = feedback or Silent()
    artifact = keyring.open_verified(home, request.ref)
    manifest = artifact.manifest
    tokens = read_tokens(home, manifest)
    fields = request.engine.over_recorded(manifest.config_fields)
    lm, _ = load_engine(feedback, request.model, fields, home)
    # Imported here, not at the top: torch loads after load_engine set the numerics environment.
    from kvreg.engine.shifted import shifted_graft as engine_shifted_graft

    with feedback.status("shifted graft (approximate) and a fresh run to measure the residual"):
        report = engine_shifted_graft(
            lm,
            home,
            manifest,
            tokens,
            lm.encode(request.prefix_text, first=True),
            steps=request.max_new_tokens,
        )
    return ShiftedGraftReport(
        ref=str(artifact.ref) if artifact.ref else None,
        manifest_digest=str(artifact.digest),
        shift=report.to_dict(),
        output_text=lm.decode(report.output_tokens),
    )
