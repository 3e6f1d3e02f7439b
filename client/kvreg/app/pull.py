"""``kvreg pull``: fetch an artifact from a named remote over its verified contact.

Opens the remote (its audit-log checkpoint is verified and saved when the pull
succeeds, ``kvreg.remote.auditlog.contact``) and runs the transfer
(``kvreg.remote.pulling.pull``: the signature is checked against the trust
policy before any object is fetched, every object against its digest).
Returns the transfer's ``PullReport``. Nothing here renders or prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvreg.core.errors import UsageError
from kvreg.core.keys import PublicKey
from kvreg.core.names import RefName
from kvreg.remote import pulling
from kvreg.remote.auditlog import contact
from kvreg.remote.oci import pulling as oci_pulling
from kvreg.remote.oci.client import connect_oci
from kvreg.remote.progress import Progress
from kvreg.remote.remotes import RemoteConfig
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
    allow_rollback: bool = False,
) -> pulling.PullReport:
    """Pull the registry's ``ref`` from ``remote`` into the local ``local_ref`` (default the same
    name). ``lazy``: only the manifest and tokens; ``pin``: pin the local ref. From an OCI
    remote (``kvreg.remote.oci.pulling``), ``allow_rollback`` accepts a tag moved back."""
    if RemoteConfig(home).get(remote).is_oci:
        with connect_oci(home, remote) as oci:
            return oci_pulling.pull(
                home,
                oci,
                ref,
                local_ref=local_ref,
                jobs=jobs,
                progress=progress,
                known_keys=known_keys,
                lazy=lazy,
                pin=pin,
                allow_rollback=allow_rollback,
            )
    if allow_rollback:
        raise UsageError(
            "--allow-rollback is for OCI remotes; a kvreg registry's audit log decides rollbacks",
        )
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
