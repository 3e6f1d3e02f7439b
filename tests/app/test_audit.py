"""``kvreg.app.audit`` in process: what ``kvreg audit verify`` refuses before it reads or contacts anything,
and the shape of its report. Verifying real logs and exports (a registry's, over HTTP) is in
tests/remote/test_auditlog.py and tests/integration/test_audit_client.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvreg.app.audit import AuditVerifyReport, AuditVerifyRequest, verify_audit
from kvreg.core.errors import NotFoundError, UsageError
from kvreg.store.home import Home


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (AuditVerifyRequest(), "name a REMOTE, or an export with --file FILE"),
        (AuditVerifyRequest(remote="origin", pinned_remote="origin"), "--remote is for offline checks"),
        (AuditVerifyRequest(remote="origin", key="k"), "--key and --remote check an export"),
        (AuditVerifyRequest(pinned_remote="origin"), "name a REMOTE"),
    ],
)
def test_usage_errors(home: Home, request_: AuditVerifyRequest, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        verify_audit(home, request_)


def test_nothing_pinned_for_the_named_remote(home: Home, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no audit-log key is pinned for remote 'origin'"):
        verify_audit(home, AuditVerifyRequest(file=tmp_path / "export.jsonl", pinned_remote="origin"))


def test_report_fields_in_the_order_the_command_printed_them() -> None:
    online: dict[str, Any] = {"remote": "origin", "url": "https://r", "first_contact": False, "root": "x"}
    report = AuditVerifyReport("origin", None, online, "extends the export")
    assert list(report.to_dict()) == ["extends_file", "remote", "url", "first_contact", "root"]
    assert AuditVerifyReport(None).to_dict() == {}
