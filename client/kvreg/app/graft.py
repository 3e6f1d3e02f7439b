"""Graft a stored KV state into a model and continue decoding; optionally check it and send a receipt.

:func:`graft` opens the artifact (signature against the trust policy), reads its
tokens, decides who gets the graft receipt (before the model loads: a missing
remote or key fails early), loads the model under the artifact's recorded config
(options override it, which the engine then refuses by fingerprint), grafts —
re-hashing every chunk it reads unless the store is trusted — decodes, and with
``check`` compares every decode step with a fresh computation. The report holds
the failure the command must exit with (not byte-exact: exit 3; a receipt that
should have been sent and was not), after the result is shown. A failed witness
probe still sends its receipt (``witness: fail``) before the error propagates.

The prompt is text (tokenized with special tokens) or chat messages rendered with
the model's template (``kvreg.app.prompts``); either way it must begin with the
artifact's tokens to graft all of it (else the shared full blocks are grafted).

This module renders nothing; ``kvreg.cli.graft`` does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.app import keyring
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.graft_receipt import receipt_sender
from kvreg.app.loader import load_engine
from kvreg.app.prompts import Prompt, encode_prompt
from kvreg.core.errors import KvregError, NotByteExactError, WitnessMismatchError
from kvreg.store.artifacts import read_tokens
from kvreg.store.home import Home

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GraftRequest:
    """What to graft, into which model, and what to do with it."""

    ref: str  # NS/NAME or sha256:<hex>
    model: Path
    prompt_text: Prompt | None = None  # the full prompt (text or chat messages); must begin with the artifact
    append_text: str | None = None  # text after the artifact's own tokens
    blocks: int | None = None  # graft only the first K blocks
    max_new_tokens: int = 32
    check: bool = False
    probe: bool = True
    rehash: bool = True  # False: trust the read-only store, do not re-hash the chunks
    engine: EngineOptions = field(default_factory=EngineOptions)
    receipt: str | None = None  # the remote; None: config.json receipts.always
    send_receipt: bool = True  # False: no receipt, whatever config.json says
    receipt_key: str = keyring.DEFAULT_KEY_NAME


@dataclass
class GraftReport:
    """What was grafted, decoded and checked; ``error`` is the failure to exit with after showing it."""

    ref: str | None
    manifest_digest: str
    artifact_tokens: int
    prompt_tokens: int
    graft_tokens: int
    prefill_tokens: int
    chunks_read: int
    whole_artifact: bool
    bytes_read: int
    verified: bool
    probe: dict[str, Any] | None
    decoded_tokens: int
    timings: dict[str, float]
    output_text: str
    output_tokens: list[int]
    check: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None
    error: KvregError | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "ref": self.ref,
            "manifest_digest": self.manifest_digest,
            "prompt_tokens": self.prompt_tokens,
            "graft_tokens": self.graft_tokens,
            "prefill_tokens": self.prefill_tokens,
            "chunks_read": self.chunks_read,
            "whole_artifact": self.whole_artifact,
            "bytes_read": self.bytes_read,
            "verified": self.verified,
            "probe": self.probe,
            "decoded_tokens": self.decoded_tokens,
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
            "output_text": self.output_text,
            "output_tokens": self.output_tokens,
        }
        if self.check is not None:
            data["check"] = self.check
        if self.receipt is not None:
            data["receipt"] = self.receipt
        return data


def graft(home: Home, request: GraftRequest, feedback: Feedback | None = None) -> GraftReport:
    """Graft ``request.ref`` into ``request.model``, decode, check and send the receipt as asked."""
    feedback = feedback or Silent()
    artifact = keyring.open_verified(home, request.ref)
    manifest = artifact.manifest
    sender = (
        receipt_sender(home, artifact, request.receipt, request.receipt_key) if request.send_receipt else None
    )
    tokens = read_tokens(home, manifest)
    fields = request.engine.over_recorded(manifest.config_fields)
    lm, load_seconds = load_engine(feedback, request.model, fields, home)
    # Imported here, not at the top: torch loads after load_engine set the numerics environment.
    from kvreg.engine import check as engine_check
    from kvreg.engine import graft as engine_graft

    prompt: list[int] | None = None
    if request.prompt_text is not None:
        prompt = encode_prompt(lm, request.prompt_text)
    elif request.append_text is not None:
        prompt = tokens + lm.encode(request.append_text, first=False)
    try:
        with feedback.status(f"grafting {artifact.digest.short()}"):
            outcome = engine_graft.graft(
                lm,
                home,
                manifest,
                tokens,
                prompt,
                blocks=request.blocks,
                verify=request.rehash,
                probe=request.probe,
            )
    except WitnessMismatchError:
        if sender is not None:
            sent = sender.send(feedback, lm, witness="fail", check=None, graft=None)
            if not sent.get("sent") and "error" in sent:
                feedback.warn(
                    f"the receipt of the failed witness probe was not sent: {sent['error']['message']}"
                )
        raise
    with feedback.status(f"decoding {request.max_new_tokens} tokens"):
        decoded = engine_graft.continue_decoding(lm, outcome, request.max_new_tokens)
    comparison: dict[str, Any] | None = None
    if request.check:
        started = time.perf_counter()
        with feedback.status("checking against a fresh computation"):
            comparison = engine_check.check_graft(lm, outcome.plan, decoded).to_dict()
        outcome.timings["check_seconds"] = time.perf_counter() - started
    plan = outcome.plan
    report = GraftReport(
        ref=str(artifact.ref) if artifact.ref else None,
        manifest_digest=str(artifact.digest),
        artifact_tokens=manifest.token_count,
        prompt_tokens=len(plan.prompt),
        graft_tokens=plan.graft_tokens,
        prefill_tokens=plan.prefill_tokens,
        chunks_read=plan.chunks,
        whole_artifact=plan.whole,
        bytes_read=outcome.chunks.bytes_read,
        verified=outcome.chunks.verified,
        probe=outcome.probe,
        decoded_tokens=len(decoded.tokens),
        timings={"load_seconds": load_seconds, **outcome.timings},
        output_text=lm.decode(decoded.tokens),
        output_tokens=decoded.tokens,
        check=comparison,
    )
    if comparison is not None and not comparison["byte_exact"]:
        report.error = NotByteExactError(
            f"the graft is not byte-exact: {comparison['sha256_equal_steps']} of {comparison['steps']} "
            f"decode steps have SHA-256-equal logits (first divergence at step "
            f"{comparison.get('first_divergent_step')})",
            hint="the numerics of this host differ from the depositor's in a way the fingerprint missed",
        )
    if sender is not None:
        report.receipt = sender.send(
            feedback,
            lm,
            witness="skipped" if outcome.probe is None else "pass",
            check=comparison,
            graft={
                "graft_tokens": plan.graft_tokens,
                "prompt_tokens": len(plan.prompt),
                "decoded_tokens": len(decoded.tokens),
                "whole": plan.whole,
            },
        )
        if report.error is None and sender.failure is not None:
            report.error = sender.failure
    return report
