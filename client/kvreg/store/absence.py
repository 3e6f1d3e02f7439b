"""The errors for an object the local store lacks: evicted, not fetched, or just missing.

An absent object is not damage: disk paging may have evicted it (``kvreg pull`` brings
it back) or a lazy pull may have left it on the registry. These functions read the
object logs (``kvreg.store.access_log``) to say which, and word the
``ObjectNotFoundError`` (exit 1, with a hint saying how to get the object) that a
read raises. They never raise for the logs themselves: unreadable logs only make
the message plainer. This module does not read or delete objects.
"""

from __future__ import annotations

from kvreg.core.digest import Digest
from kvreg.core.errors import ObjectNotFoundError
from kvreg.core.timestamps import from_epoch, rfc3339
from kvreg.store.access_log import Deferral, read_access_log
from kvreg.store.layout import Layout
from kvreg.store.settings_file import MAX_BYTES_KEY


def deferred_error(what: str, digest: Digest, deferral: Deferral) -> ObjectNotFoundError:
    """The error for reading an object a lazy pull left on the registry."""
    remote = deferral.remote or "REMOTE"
    return ObjectNotFoundError(
        f"{what} ({Digest(digest).short()}) was not fetched: {deferral.local_ref} was pulled with "
        f"--lazy at {rfc3339(from_epoch(deferral.at))}, which downloads only the manifest and the tokens",
        hint=f"fetch the rest of the artifact: {deferral.pull_command()}; or let "
        f"'kvreg ask --remote {remote}' fetch the chunks a graft needs on demand",
        digest=str(digest),
        evicted=False,
        deferred=True,
    )


def absence_error(
    home: Layout, digest: Digest, what: str, *, ref: str | None = None
) -> ObjectNotFoundError | None:
    """Why ``digest`` is absent, as an error: evicted ("pull again") or left on the registry
    by a lazy pull ("pull the rest"); None if the logs do not say."""
    try:
        rec = read_access_log(home).get(Digest(digest).hex)
    except OSError:
        return None
    if rec is None:
        return None
    if rec.deferred is not None:
        return deferred_error(what, digest, rec.deferred)
    if rec.evicted_at is None:
        return None
    again = f"kvreg pull REMOTE {ref}" if ref else "kvreg pull REMOTE REF"
    return ObjectNotFoundError(
        f"{what} ({Digest(digest).short()}) was evicted from the local store at "
        f"{rfc3339(from_epoch(rec.evicted_at))} to keep it under {MAX_BYTES_KEY}",
        hint=f"pull the artifact again: {again} (and 'kvreg pin' it to keep it)",
        digest=str(digest),
        evicted=True,
    )


def missing_object_error(
    home: Layout, digest: Digest, what: str, *, ref: str | None = None
) -> ObjectNotFoundError:
    """The error for an object a read needs and the store lacks: says whether it was evicted
    or not fetched by a lazy pull, and how to get it. Exit 1, not the integrity failure a
    wrong byte is."""
    found = absence_error(home, digest, what, ref=ref)
    if found is not None:
        return found
    again = f"kvreg pull REMOTE {ref}" if ref else "kvreg pull REMOTE REF"
    return ObjectNotFoundError(
        f"{what} ({Digest(digest).short()}) is not in the local store",
        hint=f"pull the artifact again: {again}; run 'kvreg fsck' to check the store",
        digest=str(digest),
        evicted=False,
    )
