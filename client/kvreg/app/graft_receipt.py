"""The graft receipt: who gets it, and sending it signed once the graft is done.

:func:`receipt_sender` decides, before the model loads, whether a receipt goes
out (``--receipt REMOTE``, else ``receipts.always`` in ``config.json``) and
loads the signing key; :class:`ReceiptSender` builds, signs and sends it
(``kvreg.remote.receipts``) and keeps a failure for the graft's exit status.
``receipts.always`` quietly skips artifacts the remote does not have (their
namespace or envelope is unknown there); an explicit ``--receipt`` fails. This
module does not graft and prints nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kvreg.app import keyring
from kvreg.app.feedback import Feedback
from kvreg.core.errors import KvregError, ManifestUnknownError, NamespaceNotFoundError, UsageError
from kvreg.remote.http import connect
from kvreg.remote.receipts import build_receipt, configured_remote, host_fields, send_receipt
from kvreg.remote.remotes import RemoteConfig
from kvreg.store.artifacts import ANY_NAMESPACE, Artifact, namespace_for
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.core.keys import SigningKey
    from kvreg.engine.runtime import LoadedModel

log = logging.getLogger(__name__)


def host_of(lm: LoadedModel) -> dict[str, Any]:
    """The ``host`` part of a receipt for a graft made with ``lm`` (its config and fingerprints)."""
    return host_fields(
        config_fingerprint=str(lm.config.fingerprint),
        model_fingerprint=str(lm.model_fp),
        tokenizer_fingerprint=str(lm.tokenizer_fp),
        config_fields=lm.config.fields,
    )


class ReceiptSender:
    """Sends the graft's receipt to one remote; remembers a failure for the command's exit."""

    def __init__(
        self, home: Home, artifact: Artifact, remote: str, namespace: str, key: SigningKey, *, explicit: bool
    ) -> None:
        self.home = home
        self.artifact = artifact
        self.remote = remote
        self.namespace = namespace
        self.key = key
        self.explicit = explicit
        self.failure: KvregError | None = None

    def send(
        self,
        feedback: Feedback,
        lm: LoadedModel,
        *,
        witness: str,
        check: dict[str, Any] | None,
        graft: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Send the receipt; the result as the graft's JSON reports it (``sent``, or why not)."""
        result: dict[str, Any] = {"remote": self.remote, "namespace": self.namespace, "sent": False}
        try:
            receipt = build_receipt(
                namespace=self.namespace,
                ref=self.artifact.ref.name if self.artifact.ref is not None else None,
                digest=str(self.artifact.digest),
                host=host_of(lm),
                witness=witness,
                check=check,
                graft=graft,
                key=self.key,
            )
            with (
                feedback.status(f"sending the graft receipt to {self.remote}"),
                connect(self.home, self.remote) as client,
            ):
                sent = send_receipt(client, receipt, self.key)
        except (NamespaceNotFoundError, ManifestUnknownError) as e:
            if not self.explicit:
                result["skipped"] = f"{self.remote} does not have this artifact ({e.code})"
                return result
            self._fail(result, e)
            return result
        except KvregError as e:
            self._fail(result, e)
            return result
        result.update(sent=True, **sent.to_dict())
        return result

    def _fail(self, result: dict[str, Any], e: KvregError) -> None:
        result["error"] = e.to_dict()
        self.failure = type(e)(
            f"the graft succeeded, but its receipt was not sent to {self.remote}: {e.message}",
            hint=e.hint or f"send it again later: kvreg graft ... --receipt {self.remote}",
            **e.details,
        )


def receipt_sender(home: Home, artifact: Artifact, remote: str | None, key_name: str) -> ReceiptSender | None:
    """Who gets the receipt (``--receipt``, else ``receipts.always``), checked before the model loads."""
    explicit = remote is not None
    name = remote if remote is not None else configured_remote(home)
    if name is None:
        return None
    RemoteConfig(home).get(name)  # NotFoundError with the command that adds it
    namespace = namespace_for(home, artifact.target)
    if namespace == ANY_NAMESPACE:
        if explicit:
            raise UsageError(
                "a receipt names the artifact's namespace: graft it by its ref NS/NAME",
                hint="or drop --receipt",
            )
        return None
    key = keyring.load_signing_key(home, key_name)
    return ReceiptSender(home, artifact, name, namespace, key, explicit=explicit)
