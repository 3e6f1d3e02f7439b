"""A command that needs the engine, on an install without it: a typed refusal, not a crash.

The client and the registry install without torch (no ``engine`` extra); a command that runs the
model then meets ``ModuleNotFoundError`` for torch (or transformers, ...). ``kvreg.console.run``
turns that into ``ENGINE_NOT_INSTALLED`` with the command that installs the engine; any other
missing module is still reported as unexpected (a bug to fix, not an install to complete).
"""

from __future__ import annotations

import json

import pytest
import typer

from kvreg import console


def _app(missing: str) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main(json_output: bool = typer.Option(False, "--json")) -> None:  # read by console.CliState
        pass

    @app.command()
    def deposit() -> None:
        raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    return app


@pytest.mark.parametrize("missing", ["torch", "transformers", "torch._C"])
def test_a_missing_engine_module_is_a_typed_refusal_with_the_install_command(
    missing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = console.run(typer.main.get_command(_app(missing)), ["--json", "deposit"])
    assert code == 1
    body = json.loads(capsys.readouterr().out)["error"]
    assert body["code"] == "ENGINE_NOT_INSTALLED", body
    assert missing.partition(".")[0] in body["message"]
    assert "kvreg[engine]" in body["hint"]


def test_another_missing_module_stays_unexpected(capsys: pytest.CaptureFixture[str]) -> None:
    code = console.run(typer.main.get_command(_app("left_pad")), ["deposit"])
    assert code == 1
    err = capsys.readouterr().err
    assert "unexpected ModuleNotFoundError" in err
    assert "ENGINE_NOT_INSTALLED" not in err
