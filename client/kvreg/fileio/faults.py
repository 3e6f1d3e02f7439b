"""Deterministic crash points for the crash-consistency tests (``tests/crash``).

Code that makes a durable change calls :func:`crash_point` with a stable name at
each step where a crash would leave a distinct state (a temp file written but not
renamed, bytes stored but no database row, an envelope stored but the ref not
moved, ...). Normally the call does nothing. When the environment variable
``KVREG_CRASH_AT`` names the point, the process kills itself with ``SIGKILL``
there: no ``finally`` block, no ``atexit`` handler, no buffered write runs, exactly
as after ``kill -9`` or a power cut of the process (the page cache survives, as it
does for ``kill -9``).

``KVREG_CRASH_AT`` holds ``NAME`` (the first time the point is reached) or
``NAME:N`` (the Nth time, counted per process); several, comma-separated, are
allowed. ``KVREG_STOP_AT`` has the same syntax but sends ``SIGSTOP`` instead: the
process freezes at the point until someone sends it ``SIGCONT`` (the tests use
it to run GC while a push is stopped between its object uploads and its
manifest). The variables are read once, at import; when none is set a crash
point costs one test of a constant.

``KVREG_CRASH_FILE`` names a file holding a ``KVREG_CRASH_AT`` value, read at every
crash point (a missing or empty file arms nothing; the hit counts restart whenever
its text changes). It lets a test arm one long-running server for its next scenario
without restarting it: a server that dies at a point is restarted once, not twice.

The names in use are listed in :data:`POINTS` (the tests check every one of them
is reached). This module is used by both the client (``kvreg``) and the registry
(``kvreg_registry``). It is not a fault-injection framework: it injects no I/O
errors and has no random mode; the tests add random-time kills from outside.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

#: Every crash point in the code, with what has happened when it is reached.
POINTS: Mapping[str, str] = {
    # registry: object uploads (both backends)
    "registry.object.before_publish": "bytes written to a temp file/upload and verified, not yet published",
    "registry.object.after_publish": "bytes published under the digest, the database row not committed",
    "registry.object.after_commit": "object row committed, the response not sent",
    # registry: envelopes, refs, the audit log
    "registry.envelope.after_publish": "manifest bytes published, the envelope row not committed",
    "registry.envelope.after_commit": "envelope committed, the response not sent",
    "registry.ref.before_log": "ref row updated in the transaction, its audit entry not appended",
    "registry.log.after_entry": "audit entry row written in the transaction, tree nodes and head not",
    "registry.ref.after_commit": "ref move and its log entry committed, the response not sent",
    "registry.checkpoint.before_store": "a new checkpoint signed, not stored",
    # registry: garbage collection
    "registry.gc.begin": "a GC run started, nothing changed yet",
    "registry.gc.after_mark": "unreferenced links dropped (committed), no object swept yet",
    "registry.gc.mid_sweep": "an object's bytes deleted, its row deletion not committed",
    "registry.gc.before_orphans": "objects swept, orphan bytes not yet",
    "registry.gc.orphan_listed": "bytes found with no row (a candidate orphan), not yet claimed",
    # client: the local store
    "client.object.before_install": "object temp file written and fsynced, not linked to its name",
    "client.ref.after_write": "ref file replaced, its reflog line not appended",
    # client: push
    "client.push.after_objects": "objects uploaded, the envelope not",
    "client.push.after_envelope": "envelope stored on the registry, the ref not moved",
    "client.push.after_ref": "remote ref moved, upload sessions not closed, the log not proven",
    # client: pull
    "client.pull.after_fetch": "every object staged and verified, none installed in the store",
    "client.pull.install": "one staged object adopted into the store (use NAME:N for the Nth)",
    "client.pull.after_objects": "objects installed, manifest not stored",
    "client.pull.after_manifest": "manifest stored, envelope not",
    "client.pull.before_ref": "manifest and envelope stored, the local ref not set",
}


def _parse(value: str | None) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, nth = item.partition(":")
        points[name] = int(nth) if nth else 1
    return points


_CRASH = _parse(os.environ.get("KVREG_CRASH_AT"))
_STOP = _parse(os.environ.get("KVREG_STOP_AT"))
_FILE = os.environ.get("KVREG_CRASH_FILE") or None
_ARMED = bool(_CRASH or _STOP or _FILE)
_hits: dict[str, int] = {}
_file_text = ""
_lock = threading.Lock()


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def crash_point(name: str) -> None:
    """Kill (``KVREG_CRASH_AT``) or stop (``KVREG_STOP_AT``) this process if ``name`` is armed."""
    global _file_text
    if not _ARMED:
        return
    crash = _CRASH
    with _lock:
        if _FILE is not None:
            text = _read_file(_FILE)
            if text != _file_text:
                _file_text = text
                _hits.clear()
            crash = {**_CRASH, **_parse(text)}
        hit = _hits.get(name, 0) + 1
        _hits[name] = hit
    if _STOP.get(name) == hit:
        os.kill(os.getpid(), signal.SIGSTOP)
    if crash.get(name) == hit:
        os.kill(os.getpid(), signal.SIGKILL)
