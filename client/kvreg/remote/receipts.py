"""Graft receipts on the client: build one from a graft's result, sign it, send it to a registry.

After ``kvreg graft`` the client can tell a registry where and when it reused an
artifact: ``kvreg graft REF --model M --receipt REMOTE``, or always, with this in
``$KVREG_HOME/config.json``::

    {"receipts": {"always": "origin"}}

The receipt (``kvreg.core.receipt``) names the artifact (namespace, ref, manifest
digest), the host (config, model and tokenizer fingerprints, device, CPU capability,
GPU, profile, dtype, host name, kvreg version), the witness probe's result
(``pass``/``fail``/``skipped``), the byte-exact check's result (``--check``) and the
time, and is signed with a local signing key (``kvreg keys``; the public key is in
the receipt, so it is self-certifying). It is sent with
``POST /api/v1/namespaces/{ns}/receipts``; the registry checks it, stores it and
logs it (``graft.receipt``). Sending the same receipt twice stores it once, so the
transport's retries are safe.

This module builds and signs receipts; ``kvreg.remote.api.receipts`` sends and lists
them. It does not print and does not decide what a failure means for the graft
(``kvreg.cli.graft`` does).
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

import kvreg
from kvreg.core.digest import Digest
from kvreg.core.errors import ConfigError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import validate_namespace
from kvreg.core.receipt import Receipt, format_time
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.api.receipts import SentReceipt
from kvreg.remote.http import RegistryClient
from kvreg.store import jsonfile
from kvreg.store.home import Home

__all__ = [
    "CONFIG_SECTION",
    "build_receipt",
    "configured_remote",
    "host_fields",
    "send_receipt",
]

CONFIG_SECTION = "receipts"


def configured_remote(home: Home) -> str | None:
    """The remote named by ``receipts.always`` in ``config.json``, or None."""
    path = home.config_path
    section = jsonfile.read_object(path, "config").get(CONFIG_SECTION)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ConfigError(
            f"config {path}: '{CONFIG_SECTION}' must be an object",
            hint='e.g. {"receipts": {"always": "origin"}}',
        )
    name = section.get("always")
    if name is None:
        return None
    if not isinstance(name, str):
        raise ConfigError(f"config {path}: receipts.always must be a remote name or null")
    try:
        return validate_remote_name(name)
    except UsageError as e:
        raise ConfigError(f"config {path}: receipts.always: {e.message}", hint=e.hint) from e


def host_fields(
    *,
    config_fingerprint: str,
    model_fingerprint: str,
    tokenizer_fingerprint: str,
    config_fields: dict[str, Any],
) -> dict[str, str | None]:
    """The receipt's ``host`` object from a loaded engine's fingerprints and pinned config fields."""
    gpu = config_fields.get("gpu")

    def text(value: Any) -> str | None:
        return None if value is None else str(value)[:200]

    return {
        "config_fingerprint": str(Digest(config_fingerprint)),
        "model_fingerprint": str(Digest(model_fingerprint)),
        "tokenizer_fingerprint": str(Digest(tokenizer_fingerprint)),
        "device": text(config_fields.get("device")),
        "cpu_capability": text(config_fields.get("cpu_capability")),
        "gpu": text(gpu.get("name")) if isinstance(gpu, dict) else None,
        "profile": text(config_fields.get("profile")),
        "dtype": text(config_fields.get("dtype")),
        "hostname": text(socket.gethostname()),
        "kvreg": kvreg.__version__,
    }


def build_receipt(
    *,
    namespace: str,
    ref: str | None,
    digest: str,
    host: dict[str, str | None],
    witness: str,
    check: dict[str, Any] | None,
    graft: dict[str, Any] | None,
    key: SigningKey,
    time: dt.datetime | None = None,
) -> Receipt:
    """A checked receipt (``ReceiptInvalidError`` if a field is wrong); ``check`` and ``graft``
    may carry more keys than the receipt keeps."""
    doc = {
        "schema": "kvreg.receipt/v1",
        "artifact": {"namespace": validate_namespace(namespace), "ref": ref, "digest": str(Digest(digest))},
        "host": host,
        "witness": witness,
        "check": None
        if check is None
        else {k: check[k] for k in ("byte_exact", "steps", "sha256_equal_steps") if k in check},
        "graft": None
        if graft is None
        else {k: graft[k] for k in ("graft_tokens", "prompt_tokens", "decoded_tokens", "whole")},
        "time": format_time(time or dt.datetime.now(dt.UTC)),
        "signer": key.public_key.to_text(),
    }
    return Receipt.from_doc(doc)


def send_receipt(client: RegistryClient, receipt: Receipt, key: SigningKey) -> SentReceipt:
    """Sign ``receipt`` with ``key`` and send it to the namespace it names."""
    body = receipt.sign(key).to_json_bytes()
    return client.post_receipt(receipt.namespace, body, Digest.of_bytes(receipt.to_payload()))
