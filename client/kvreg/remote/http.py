"""The registry client: one method per endpoint of the HTTP protocol (``docs/protocol.md``).

``RegistryClient`` combines the per-resource classes of ``kvreg.remote.api``, each
one module: ``core`` (base URL, transport, answer parsing, server info, ``whoami``,
namespaces), ``objects``, ``refs`` (envelopes and refs), ``search`` (keys, search,
route), ``log`` (the audit log) and ``receipts``. Callers use one client and its
method names; :func:`connect` builds one for a named remote (``kvreg.remote.remotes``).

``RegistryClient`` is thread-safe (push and pull call it from a
``ThreadPoolExecutor``); its transport (``kvreg.remote.session``) sends the bearer
token to the registry only, never to the storage host of a ``307`` redirect,
retries what the protocol says to retry (every request here is idempotent:
objects are named by digest, envelopes by manifest digest, ref changes are
compare-and-swaps whose retries :meth:`RegistryClient.put_ref` checks), and turns
error answers into typed ``KvregError`` subclasses (``kvreg.remote.errors``).
Uploads and downloads stream; downloads resume with ``Range`` and are hashed.

Answers are validated as they are parsed (digests, names, list shapes): a
malformed answer is a ``RemoteError``, never a half-read value. This module
checks digests of downloads but does not decide what they mean: it verifies no
signatures or manifests and does not touch the local store
(``kvreg.remote.pushing`` and ``kvreg.remote.pulling`` do), and it fetches the audit log's key, signed
checkpoints, entries and proofs without verifying any of them
(``kvreg.remote.auditlog`` does). Nothing here prints.
"""

from __future__ import annotations

from typing import Any

from kvreg.core.errors import UsageError
from kvreg.remote.api.log import LogApi
from kvreg.remote.api.objects import ObjectsApi
from kvreg.remote.api.receipts import ReceiptsApi
from kvreg.remote.api.refs import RefsApi
from kvreg.remote.api.search import SearchApi
from kvreg.remote.remotes import Credentials, RemoteConfig
from kvreg.store.home import Home

__all__ = ["RegistryClient", "connect"]


class RegistryClient(ObjectsApi, RefsApi, SearchApi, LogApi, ReceiptsApi):
    """A registry at ``base_url`` (its root; ``/api/v1`` is added), optionally with a bearer token.

    Thread-safe: one client serves every worker of a push or pull. Use it as a
    context manager, or call :meth:`close`.
    """

    def __repr__(self) -> str:
        auth = ", token=***" if self._has_token else ""
        return f"RegistryClient({self.base_url!r}{auth})"

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(home: Home, name: str, **client_options: Any) -> RegistryClient:
    """A ``RegistryClient`` for the remote ``name`` with its token (if any).

    ``client_options`` go to :class:`RegistryClient` (``timeout``, ``retries``, ...).
    The caller closes the client (it is a context manager).
    """
    remote = RemoteConfig(home).get(name)
    if remote.is_oci:
        raise UsageError(
            f"remote {name!r} is an OCI registry ({remote.url}): this command needs a kvreg registry",
            hint="push, pull, ls-remote, login and remote show work with OCI remotes; "
            "audit logs, receipts and routing need a kvreg registry",
            remote=name,
        )
    auth = Credentials(home).auth_for(name)
    return RegistryClient(
        remote.url, None if auth is None else auth.token, remote_name=name, **client_options
    )
