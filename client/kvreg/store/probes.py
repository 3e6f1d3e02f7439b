"""Witness probes that passed on this host, remembered per (artifact, config fingerprint).

A graft's witness probe recomputes one block and compares bits with the artifact's, to
prove that this host's numerics give the depositor's bits. The config fingerprint already
names what decides those bits (dtype, threads, device, CPU capability, numerics
environment, library versions, block size), so once a probe of an artifact has passed
under one fingerprint, a repeat graft of the same artifact under the same fingerprint
can skip it (``kvreg engine serve --probe once``). :func:`remember` writes the passed
result to ``cache/probes/<config>/<manifest>.json`` atomically; :func:`remembered` reads it
back. A failed probe is never remembered (the graft was refused). Removing the folder
only makes the next grafts probe again.

This module runs no probe and decides nothing: the caller chooses to skip.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from kvreg.core.digest import Digest
from kvreg.fileio.atomicfile import atomic_write_bytes
from kvreg.store.layout import Layout

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 64 * 1024


def record_path(home: Layout, manifest: Digest, config: Digest) -> Path:
    return home.probes_dir / config.hex / f"{manifest.hex}.json"


def remembered(home: Layout, manifest: Digest, config: Digest) -> dict[str, Any] | None:
    """The passed probe remembered for ``manifest`` under ``config``; None if none (or unreadable)."""
    path = record_path(home, manifest, config)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_RECORD_BYTES + 1)
        record = json.loads(data) if len(data) <= MAX_RECORD_BYTES else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("probes: ignoring the unreadable record %s: %s", path, e)
        return None
    ok = (
        isinstance(record, dict)
        and record.get("manifest_digest") == str(manifest)
        and record.get("config_fingerprint") == str(config)
        and isinstance(record.get("probe"), dict)
    )
    return record if ok else None


def remember(home: Layout, manifest: Digest, config: Digest, probe: dict[str, Any], *, when: str) -> None:
    """Remember that ``probe`` (a passed probe's result) held for ``manifest`` under ``config``."""
    path = record_path(home, manifest, config)
    record = {
        "manifest_digest": str(manifest),
        "config_fingerprint": str(config),
        "probe": probe,
        "passed_at": when,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(record, sort_keys=True).encode(), mode=0o644)
    except OSError as e:  # a cache: failing to write it only means probing again next time
        log.warning("probes: cannot remember the probe of %s: %s", manifest, e)
