"""``kvreg push``: send a local artifact to a named remote over its verified contact.

Opens the remote (its audit-log checkpoint is verified and saved when the push
succeeds, ``kvreg.remote.auditlog.contact``) and runs the transfer
(``kvreg.remote.pushing.push``: only missing objects are sent, the remote ref
moves by compare-and-swap); an OCI remote has no audit log and takes
``kvreg.remote.oci.pushing.push``. Returns the transfer's ``PushReport``. Nothing here
renders or prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvreg.core.keys import PublicKey
from kvreg.core.names import RefName
from kvreg.remote import pushing
from kvreg.remote.auditlog import contact
from kvreg.remote.oci import pushing as oci_pushing
from kvreg.remote.oci.client import connect_oci
from kvreg.remote.progress import Progress
from kvreg.remote.remotes import RemoteConfig
from kvreg.store.home import Home


def push_to_remote(
    home: Home,
    remote: str,
    ref: RefName,
    *,
    remote_ref: RefName | None = None,
    tag: bool = False,
    jobs: int = 4,
    progress: Progress | None = None,
    known_keys: Iterable[PublicKey] = (),
) -> pushing.PushReport:
    """Push the local ``ref`` to ``remote`` (as ``remote_ref``, default the same name; ``tag``: as
    an immutable tag). ``known_keys``: this store's own public keys, named in a refusal.
    An OCI remote gets the artifact as an OCI artifact (``kvreg.remote.oci.pushing``)."""
    if RemoteConfig(home).get(remote).is_oci:
        with connect_oci(home, remote) as oci:
            return oci_pushing.push(
                home,
                oci,
                ref,
                remote_ref=remote_ref,
                tag=tag,
                jobs=jobs,
                progress=progress,
                known_keys=known_keys,
            )
    with contact(home, remote) as (client, audit):
        return pushing.push(
            home,
            client,
            ref,
            remote_ref=remote_ref,
            tag=tag,
            jobs=jobs,
            progress=progress,
            known_keys=known_keys,
            audit=audit,
        )
