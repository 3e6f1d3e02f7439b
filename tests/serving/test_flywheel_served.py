"""``kvreg flywheel --server URL``: both exams through a real ``kvreg engine serve`` on loopback.

The server holds the bundled arithmetic model (block size 8, the flywheel's) over the store the
flywheel deposits its library in; the flywheel's questions reach it as OpenAI requests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app.feedback import Silent
from kvreg.app.flywheel.session import FlywheelRequest, run_session
from kvreg.core.errors import UsageError
from kvreg.engine.flywheel.model import BLOCK_SIZE, model_path
from serving.conftest import running


def test_the_flywheel_exams_go_through_the_server(tmp_path: Path) -> None:
    with running(model_path(), "adder", tmp_path, block_size=BLOCK_SIZE) as served:
        request = FlywheelRequest(
            repeat_easy=1, repeat_hard=1, unseen_easy=1, unseen_hard=1, attempts=0, server=served.url
        )
        report = run_session(served.home, served.key, request, Silent()).to_dict()
        answered = served.host.answered
    m = report["metrics"]
    assert answered == 8  # 4 questions, twice: the baseline (plain runs) and the exam again
    baseline, after = report["answers"]["baseline"], report["answers"]["after"]
    assert [a["mode"] for a in baseline] == ["off"] * 4
    assert [a["mode"] for a in after[:2]] == ["knowledge", "knowledge"]  # the library, from the server
    assert m["knowledge_grafts"] == 2 and m["unseen_knowledge_grafts"] == 0 and m["wrong_grafts"] == 0
    # every answer after: a graft the same here and there, or a plain run's text equal to the baseline's
    assert m["byte_exact_checks"] == 4 and m["byte_exact_passed"] == 4
    assert m["repeat_accuracy_after"] == 1.0
    assert all(a["cpu_seconds"] > 0 for a in baseline + after)  # the server's CPU seconds, reported
    assert all(a["artifact"] for a in after[:2])


def test_a_server_on_another_config_is_refused(tmp_path: Path) -> None:
    with running(model_path(), "adder", tmp_path, block_size=16) as served:
        request = FlywheelRequest(
            repeat_easy=1, repeat_hard=0, unseen_easy=0, unseen_hard=0, server=served.url
        )
        with pytest.raises(UsageError, match="another engine config") as refused:
            run_session(served.home, served.key, request, Silent())
        assert served.host.answered == 0
    assert f"--block-size {BLOCK_SIZE}" in (refused.value.hint or "")
