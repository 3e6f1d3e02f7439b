"""The local content-addressed store under ``$KVREG_HOME``: objects, envelopes, refs, fsck, gc.

Start from :class:`Home`, which finds the store root and hands out the
:class:`ObjectStore`, :class:`EnvelopeStore` and :class:`RefStore`. Disk paging is
``eviction`` (the size budget), ``access_log`` (object reads, evictions, lazy-pull
deferrals), ``pins``, ``leases`` and ``absence`` (the errors for absent objects);
``settings_file`` is ``config.json``, ``router_index`` the router's cache. Modules
that need only paths take a :class:`kvreg.store.layout.Layout` and sit below
``home``, so the package has no import loop. It uses only the standard library,
``kvreg.core`` and ``kvreg.fileio``.
"""

from kvreg.store.envelopes import EnvelopeStore
from kvreg.store.fsck import FsckProblem, FsckReport, ProblemKind, default_children, fsck
from kvreg.store.gc import GcReport, collect_garbage
from kvreg.store.home import Home
from kvreg.store.objects import ObjectStore, PutResult, StoreUsage
from kvreg.store.refs import ANY, RefEntry, RefLogEntry, RefProblem, RefStore

__all__ = [
    "ANY",
    "EnvelopeStore",
    "FsckProblem",
    "FsckReport",
    "GcReport",
    "Home",
    "ObjectStore",
    "ProblemKind",
    "PutResult",
    "RefEntry",
    "RefLogEntry",
    "RefProblem",
    "RefStore",
    "StoreUsage",
    "collect_garbage",
    "default_children",
    "fsck",
]
