"""``kvreg.app.flywheel.session``: ``kvreg flywheel``'s request, and importing the use case (and the
loader that starts the engine) without importing torch, so the CLI stays quick to start. The whole run
is in tests/flywheel."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from kvreg.app.flywheel.session import FlywheelRequest


def test_request_defaults_are_the_commands() -> None:
    request = FlywheelRequest()
    assert request.model is None and request.push_to is None and request.namespace == "flywheel"
    fields = {f.name: f.default for f in dataclasses.fields(FlywheelRequest)}
    assert fields["repeat_easy"] == fields["repeat_hard"] == 12
    assert fields["unseen_easy"] == fields["unseen_hard"] == 4
    assert (fields["attempts"], fields["temperature"], fields["seed"]) == (8, 1.0, 0)


def test_importing_the_use_cases_does_not_import_torch() -> None:
    code = (
        "import sys, kvreg.app.flywheel.session, kvreg.app.loader, kvreg.app.audit, "
        "kvreg.app.maintenance, kvreg.app.paging, kvreg.cli.demo, kvreg.cli.flywheel; "
        "sys.exit('torch' in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy(), timeout=60)
