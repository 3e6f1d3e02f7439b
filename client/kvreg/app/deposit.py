"""Deposit the KV state of a text: compute it under a pinned config, sign it, store it under a ref.

:func:`deposit` loads the signing key first (and warns when the store's trust
policy does not trust it for the ref's namespace: grafts here would refuse the
artifact), then loads the engine and runs ``kvreg.engine.deposit.deposit``:
prefill on the block grid, one chunk per block (chunks already stored are not
written again), manifest, signature, objects, envelope, ref. With ``pin`` the ref
is pinned, so eviction never removes what it reaches. The prompt is text or chat
messages (``kvreg.app.prompts``): messages are rendered with the model's chat template,
their tokens are the artifact's prefix, ``prompt.chat`` in the manifest records it, and
the text may then be empty (the artifact is the conversation alone, e.g. a few-shot
prefix). This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.app import keyring
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.loader import load_engine
from kvreg.app.prompts import Prompt, engine_prompt
from kvreg.core.errors import UsageError
from kvreg.core.names import RefName
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.store import pins
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.engine.deposit import DepositResult


@dataclass(frozen=True)
class DepositRequest:
    model: Path
    ref: RefName
    text: str  # may be "" when the prompt is chat messages: the artifact is the conversation alone
    prompt: Prompt | None = None  # precedes the text; its tokens are the artifact's prefix
    verification: dict[str, Any] | None = None  # verifier, verdict, evidence
    annotations: dict[str, Any] = field(default_factory=dict)  # title, tags
    key: str = keyring.DEFAULT_KEY_NAME
    engine: EngineOptions = field(default_factory=EngineOptions)
    pin: bool = False


@dataclass
class DepositReport:
    result: DepositResult
    load_seconds: float
    signer_keyid: str
    pinned: bool
    verification: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        data = self.result.to_dict()
        data["load_seconds"] = round(self.load_seconds, 6)
        data["signer_keyid"] = self.signer_keyid
        data["pinned"] = self.pinned
        data["eviction"] = self.result.write.eviction
        return data


def deposit(home: Home, request: DepositRequest, feedback: Feedback | None = None) -> DepositReport:
    """Compute, sign and store the artifact of ``request.text``; move ``request.ref`` to it."""
    feedback = feedback or Silent()
    if not request.text and (request.prompt is None or isinstance(request.prompt, str)):
        raise UsageError(
            "nothing to deposit: the text is empty",
            hint="give the text, or chat messages to deposit a conversation alone (--messages-file)",
        )
    signing_key = keyring.load_signing_key(home, request.key)
    namespace = request.ref.namespace
    if all(
        k.keyid != signing_key.public_key.keyid
        for k in load_trust_policy(home.trust_path).keys_for(namespace)
    ):
        feedback.warn(
            f"key {request.key!r} is not trusted for {namespace!r} in this store; grafts here will refuse "
            f"the artifact until you run: kvreg trust add {namespace} {signing_key.public_key.to_text()}"
        )
    lm, load_seconds = load_engine(feedback, request.model, request.engine.for_new(), home)
    # Imported here, not at the top: torch loads after load_engine set the numerics environment.
    from kvreg.engine.deposit import deposit as engine_deposit

    prompt = None if request.prompt is None else engine_prompt(lm, request.prompt)
    with feedback.status(f"prefilling and storing {request.ref}"):
        result = engine_deposit(
            lm,
            home,
            text=request.text,
            ref=request.ref,
            key=signing_key,
            prompt=prompt,
            verification=request.verification,
            annotations=request.annotations,
        )
    if request.pin:
        pins.pin(home, str(request.ref))
    return DepositReport(
        result=result,
        load_seconds=load_seconds,
        signer_keyid=signing_key.public_key.keyid,
        pinned=request.pin,
        verification=request.verification,
    )
