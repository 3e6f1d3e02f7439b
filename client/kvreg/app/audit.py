"""Hold a registry to its append-only audit log: verify it (online or an export offline), export it, show it.

:func:`verify_audit` downloads a remote's whole log up to a fresh signed checkpoint
and checks every entry (``kvreg.remote.auditexport.verify_remote_log``), or checks
an export file with no network (against the file's key, a given ``--key`` or the key
pinned for a remote, ``kvreg.store.audit_state``), or both, and then checks that the
registry's log still begins with the exported one. :func:`export_audit` writes a
verified export; :func:`show_audit` verifies and returns the latest checkpoint and
the pin. Any inconsistency raises (and stores nothing); this module renders and
prints nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app.feedback import Feedback, Silent
from kvreg.core.errors import NotFoundError, UsageError
from kvreg.core.logverify import parse_log_key
from kvreg.core.remote_names import validate_remote_name
from kvreg.remote.auditexport import (
    ExportCheck,
    LogAudit,
    compare_with_export,
    export_log,
    verify_export,
    verify_remote_log,
)
from kvreg.remote.auditlog import contact
from kvreg.store.audit_state import RemoteLogStore
from kvreg.store.home import Home


@dataclass(frozen=True)
class AuditVerifyRequest:
    remote: str | None = None  # a remote whose whole log to download and verify
    file: Path | None = None  # an export to verify offline
    key: str | None = None  # with file: the log key (NAME+ID+KEY) it must be signed by
    pinned_remote: str | None = None  # with file: check it against what is pinned for this remote


@dataclass(frozen=True)
class AuditVerifyReport:
    remote: str | None
    export: ExportCheck | None = None  # the export file, verified offline
    online: dict[str, Any] | None = None  # the remote's log: url, first contact, previous size, the check
    extends_file: str | None = None  # with both: how the registry's log extends the export

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.export is not None:
            data["file"] = self.export.to_dict()
        if self.extends_file is not None:
            data["extends_file"] = self.extends_file
        if self.online is not None:
            data.update(self.online)
        return data


@dataclass(frozen=True)
class AuditExportReport:
    remote: str
    result: LogAudit

    def to_dict(self) -> dict[str, Any]:
        return {"remote": self.remote, **self.result.to_dict()}


@dataclass(frozen=True)
class AuditShowReport:
    remote: str
    summary: dict[str, Any]  # the checkpoint, the log key and the pin (RemoteLog.summary)

    def to_dict(self) -> dict[str, Any]:
        return self.summary


def verify_audit(
    home: Home, request: AuditVerifyRequest, feedback: Feedback | None = None
) -> AuditVerifyReport:
    """Verify a remote's whole log, an export offline, or both (``UsageError`` for neither)."""
    feedback = feedback or Silent()
    remote, file, pinned_remote = request.remote, request.file, request.pinned_remote
    if remote is None and file is None:
        raise UsageError("name a REMOTE, or an export with --file FILE", hint="kvreg audit verify origin")
    if remote is not None and pinned_remote is not None:
        raise UsageError("--remote is for offline checks of --file; with REMOTE the registry is contacted")
    if file is None and (request.key is not None or pinned_remote is not None):
        raise UsageError("--key and --remote check an export: give it with --file FILE")

    export = None
    if file is not None:
        keys = [] if request.key is None else [("given with --key", parse_log_key(request.key))]
        pin_name = pinned_remote if pinned_remote is not None else remote
        pinned = None
        if pin_name is not None:
            pinned = RemoteLogStore(home).load(validate_remote_name(pin_name))
            if pinned is None and pinned_remote is not None:
                raise NotFoundError(
                    f"no audit-log key is pinned for remote {pinned_remote!r}",
                    hint=f"contact it once (kvreg audit show {pinned_remote}) or give the key with --key",
                )
        with feedback.status(f"verifying {file}"):
            export = verify_export(file, keys=keys, pinned=pinned)
    if remote is None:
        return AuditVerifyReport(remote, export)

    extends_file = None
    with contact(home, remote) as (_client, audit), feedback.status(f"downloading the audit log of {remote}"):
        result = verify_remote_log(audit)
        summary = audit.summary()
        if export is not None:
            extends_file = compare_with_export(result, export, where=audit.where)
    online = {
        "remote": remote,
        "url": summary["url"],
        "first_contact": summary["first_contact"],
        "previous_size": summary["previous_size"],
        **result.to_dict(),
    }
    return AuditVerifyReport(remote, export, online, extends_file)


def export_audit(
    home: Home, remote: str, out_file: Path, feedback: Feedback | None = None
) -> AuditExportReport:
    """Write ``remote``'s verified log to ``out_file`` (JSON Lines, an inclusion proof per entry)."""
    feedback = feedback or Silent()
    with contact(home, remote) as (_client, audit), feedback.status(f"exporting the audit log of {remote}"):
        result = export_log(audit, out_file)
    return AuditExportReport(remote, result)


def show_audit(home: Home, remote: str) -> AuditShowReport:
    """Verify ``remote``'s latest checkpoint (pinning its log key on first contact) and return it."""
    with contact(home, remote) as (_client, audit):
        audit.check()
        summary = audit.summary()
    return AuditShowReport(remote, summary)
