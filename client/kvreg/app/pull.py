"""``kvreg pull``: fetch an artifact from a named remote over its verified contact.

Opens the remote (its audit-log checkpoint is verified and saved when the pull
succeeds, ``kvreg.remote.auditlog.contact``) and runs the transfer
(``kvreg.remote.pulling.pull``: the signature is checked against the trust
policy before any object is fetched, every object against its digest).
Returns the transfer's ``PullReport``. Nothing here renders or prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvreg.core.keys import PublicKey
from kvreg.core.names import RefName
from kvreg.remote import pulling
from kvreg.remote.auditlog import contact
from kvreg.remote.progress import Progress
from kvreg.store.home import Home


def pull_from_remote(
    home: Home,
    remote: str,
    ref: RefName,
    *,
    local_ref: RefName | None = None,
    jobs: int = 4,
    progress: Progress | None = None,
    known_keys: Iterable[PublicKey] = (),
    lazy: bool = False,
    pin: bool = False,
) -> pulling.PullReport:
    """Pull the registry's ``ref`` from ``remote`` into the local ``local_ref`` (default the same
    name). ``lazy``: only the manifest and tokens; ``pin``: pin the local ref."""
    with contact(home, remote) as (client, audit):
        return pulling.pull(
            home,
            client,
            ref,
            local_ref=local_ref,
            jobs=jobs,
            progress=progress,
            known_keys=known_keys,
            audit=audit,
            lazy=lazy,
            pin=pin,
        )
