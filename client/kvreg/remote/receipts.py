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

This module sends through :class:`kvreg.remote.http.RegistryClient`'s request
helpers; it does not print and does not decide what a failure means for the graft
(``kvreg.cli.graft`` does).
"""

from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass
from typing import Any

import kvreg
from kvreg.core.digest import Digest
from kvreg.core.errors import ConfigError, KvregError, RemoteError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import validate_namespace
from kvreg.core.receipt import Receipt, format_time
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.http import RegistryClient
from kvreg.store import jsonfile
from kvreg.store.home import Home

__all__ = [
    "CONFIG_SECTION",
    "SentReceipt",
    "build_receipt",
    "configured_remote",
    "host_fields",
    "list_receipts",
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


@dataclass(frozen=True, slots=True)
class SentReceipt:
    """The registry's answer: the receipt's id there, its digest, whether it was new, its entry."""

    id: int
    receipt_digest: str
    created: bool
    log_index: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "receipt_digest": self.receipt_digest,
            "created": self.created,
            "log_index": self.log_index,
        }


def send_receipt(client: RegistryClient, receipt: Receipt, key: SigningKey) -> SentReceipt:
    """Sign ``receipt`` with ``key`` and send it to the namespace it names."""
    body = receipt.sign(key).to_json_bytes()
    reply = client._call(
        "POST",
        client._ns_url(receipt.namespace, "receipts"),
        expect=(200, 201),
        content=lambda: bytes(body),
        headers={"Content-Type": "application/json"},
    )
    doc = client._json(reply, "POST receipt")
    rid, digest, index = doc.get("id"), doc.get("receipt_digest"), doc.get("log_index")
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise RemoteError("the registry's answer to a receipt has no id")
    try:
        digest = str(Digest(digest))
    except KvregError as e:
        raise RemoteError("the registry's answer to a receipt has no receipt digest") from e
    if digest != str(Digest.of_bytes(receipt.to_payload())):
        raise RemoteError(f"the registry stored receipt {digest}, not the one sent")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
        raise RemoteError("the registry's answer to a receipt has a malformed log index")
    return SentReceipt(rid, digest, reply.status == 201, index)


def list_receipts(
    client: RegistryClient, namespace: str, *, digest: str | None = None, limit: int = 50, offset: int = 0
) -> dict[str, Any]:
    """``GET /namespaces/{ns}/receipts``: where and when an artifact (or any of the namespace's) was
    grafted, newest first. The answer as the registry sent it (``receipts``, ``total``)."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if digest is not None:
        params["digest"] = str(Digest(digest))
    doc = client._json(
        client._call("GET", client._ns_url(namespace, "receipts"), params=params),
        f"GET receipts of {namespace}",
    )
    if not isinstance(doc.get("receipts"), list):
        raise RemoteError(f"the registry's receipt list of {namespace} is malformed")
    return doc
