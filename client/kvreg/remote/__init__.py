"""The registry client: remotes and tokens, the HTTP protocol, push and pull.

- ``kvreg.remote.remotes``: remotes in ``$KVREG_HOME/config.json``, tokens in
  ``$KVREG_HOME/credentials.json`` (mode 0600) or ``$KVREG_TOKEN``.
- ``kvreg.remote.http``: ``RegistryClient``, one method per endpoint of
  ``docs/protocol.md``, with retries and typed errors; ``connect``.
- ``kvreg.remote.pushing`` and ``kvreg.remote.pulling``: ``push`` and ``pull`` with their reports.
- ``kvreg.remote.progress``: the ``Progress`` protocol the CLI implements.

Nothing here prints or imports rich; the commands are in ``kvreg.cli.remote``.
The package does not import torch.
"""

from __future__ import annotations

from kvreg.remote.api.refs import RefValue, RemoteRefEntry
from kvreg.remote.http import RegistryClient, connect
from kvreg.remote.progress import NullProgress, Progress
from kvreg.remote.pulling import PullReport, pull
from kvreg.remote.pushing import PushReport, push
from kvreg.remote.remotes import Credentials, Remote, RemoteConfig

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
