"""The registry client: remotes and tokens, the HTTP protocol, push and pull.

- ``kvreg.remote.config``: remotes in ``$KVREG_HOME/config.json``, tokens in
  ``$KVREG_HOME/credentials.json`` (mode 0600) or ``$KVREG_TOKEN``; ``connect``.
- ``kvreg.remote.http``: ``RegistryClient``, one method per endpoint of
  ``docs/protocol.md``, with retries and typed errors.
- ``kvreg.remote.transfer``: ``push`` and ``pull`` with their reports.
- ``kvreg.remote.progress``: the ``Progress`` protocol the CLI implements.

Nothing here prints or imports rich; the commands are in ``kvreg.cli.remote``.
The package does not import torch.
"""

from __future__ import annotations

from kvreg.remote.config import Credentials, Remote, RemoteConfig, connect
from kvreg.remote.http import RefValue, RegistryClient, RemoteRefEntry
from kvreg.remote.progress import NullProgress, Progress
from kvreg.remote.transfer import PullReport, PushReport, pull, push

__all__ = [
    "Credentials",
    "NullProgress",
    "Progress",
    "PullReport",
    "PushReport",
    "RefValue",
    "RegistryClient",
    "Remote",
    "RemoteConfig",
    "RemoteRefEntry",
    "connect",
    "pull",
    "push",
]
