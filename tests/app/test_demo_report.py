"""``kvreg.app.demo.scenario.DemoReport``: ``kvreg demo --json``'s fields, in their order."""

from __future__ import annotations

from kvreg.app.demo.scenario import DemoReport

FIELDS = [
    "workdir",
    "home",
    "model",
    "config",
    "question",
    "deposits",
    "dedupe",
    "grafts",
    "timing",
    "refusal",
    "recompute",
    "registry",
    "flywheel",
    "failures",
    "ok",
    "seconds",
]


def _report(failures: list[str]) -> DemoReport:
    return DemoReport(
        workdir="w",
        home="h",
        model={},
        config={},
        question="q",
        deposits=[],
        dedupe={},
        grafts=[],
        timing={},
        refusal=None,
        recompute={},
        registry=None,
        flywheel=None,
        failures=failures,
        seconds=1.5,
    )


def test_fields_and_ok() -> None:
    passed = _report([])
    assert list(passed.to_dict()) == FIELDS
    assert passed.ok and passed.to_dict()["ok"] is True and passed.to_dict()["seconds"] == 1.5
    failed = _report(["a graft is not byte-exact"])
    assert not failed.ok and failed.to_dict()["failures"] == ["a graft is not byte-exact"]


def test_registry_rendering_names_the_graft_receipt() -> None:
    from kvreg.cli.demo import _receipt_line

    line = _receipt_line(
        {"receipt": {"ref": "demo/p07", "byte_exact": True, "id": 3, "log_index": 17, "created": True}}
    )
    assert "graft receipt sent for demo/p07 (byte-exact, signed with the demo key): receipt 3" in line
    assert "audit entry 17" in line
    assert _receipt_line({}) == ""
