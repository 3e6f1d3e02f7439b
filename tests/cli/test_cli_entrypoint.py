"""The real entry point: ``python -m kvreg`` in a subprocess, once per top-level command.

Every other command-line test runs the Typer app in the test process
(``helpers.kvreg``, see ``tests/cli/inprocess.py``). These smoke tests keep what only
a fresh process shows covered: the ``__main__`` module and ``main()``, the exit codes
0/1/2/3 as the operating system sees them, the ``--json`` error documents on stdout,
and commands that load torch from scratch. (``kvreg demo`` and ``kvreg serve`` run as
subprocesses in test_cli_commands.py and the integration suite; raw ``kvreg cat`` bytes
in test_cli_maintenance.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kvreg as kvreg_package

from .helpers import REF, TEXT, Run, flip_bit, kvreg_subprocess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, deposited: dict[str, Any]) -> Path:
    """A copy of the session's deposited store that these tests may change."""
    import shutil

    home = tmp_path_factory.mktemp("entrypoint") / "home"
    shutil.copytree(deposited["home"], home, symlinks=True)
    return home


def error_code(run: Run) -> str:
    return str(run.json["error"]["code"])


def test_version(tmp_path: Path) -> None:
    run = kvreg_subprocess(tmp_path, "--version")
    assert run.out.strip() == f"kvreg {kvreg_package.__version__}"


def test_keys_and_trust(home: Path) -> None:
    keys = kvreg_subprocess(home, "keys", "list", "--json").json["keys"]
    assert [k["name"] for k in keys] == ["default"]
    assert kvreg_subprocess(home, "trust", "list", "--json").json["trust"][0]["namespace"] == "*"


def test_deposit_graft_verify(home: Path, models: Any, texts: dict[str, Path]) -> None:
    dep = kvreg_subprocess(
        home, "deposit", models["llama"], "--text-file", texts["other"], "--ref", "smoke/other",
        "--block-size", "16", "--json",
    ).json  # fmt: skip
    assert dep["ref"] == "smoke/other"
    grafted = kvreg_subprocess(
        home, "graft", REF, "--model", models["llama"], "--check", "--max-new-tokens", "4", "--json"
    ).json
    assert grafted["check"]["byte_exact"] is True
    assert kvreg_subprocess(home, "verify", "smoke/other", "--json").json["ok"] is True


def test_route_and_ask(home: Path, models: Any, texts: dict[str, Path]) -> None:
    routed = kvreg_subprocess(
        home,
        "route",
        "--model",
        models["llama"],
        "--prompt-file",
        texts["extended"],
        "--block-size",
        "16",
        "--json",
    ).json
    assert routed["artifact"]["ref"] == REF
    asked = kvreg_subprocess(
        home, "ask", "--model", models["llama"], "--prompt-file", texts["question"], "--mode", "off",
        "--max-new-tokens", "2", "--json",
    ).json  # fmt: skip
    assert asked["mode"] == "off" and asked["decoded_tokens"] == 2


def test_store_commands(home: Path, deposited: dict[str, Any]) -> None:
    assert REF in kvreg_subprocess(home, "show", REF).out
    assert REF in [r["ref"] for r in kvreg_subprocess(home, "ls", "--json").json["refs"]]
    assert kvreg_subprocess(home, "cat", deposited["manifest"]["text"]["digest"]).out == TEXT
    assert kvreg_subprocess(home, "fsck", "--json").json["ok"] is True
    assert "removed_objects" in kvreg_subprocess(home, "gc", "--json").json


def test_paging_commands(home: Path) -> None:
    kvreg_subprocess(home, "pin", REF)
    assert REF in kvreg_subprocess(home, "pins").out
    kvreg_subprocess(home, "unpin", REF)
    kvreg_subprocess(home, "evict", "--dry-run", "--json")
    kvreg_subprocess(home, "config", "set", "store.max-bytes", "1G")
    assert kvreg_subprocess(home, "config", "get", "store.max-bytes").out.strip() == str(1 << 30)


def test_remote_commands(home: Path) -> None:
    kvreg_subprocess(home, "remote", "add", "nowhere", "http://127.0.0.1:9")
    assert kvreg_subprocess(home, "remote", "list", "--json").json["remotes"][0]["name"] == "nowhere"
    # Unreachable: an error (1) with its JSON document. The transfer commands only parse their
    # arguments here (usage errors, 2): each retry against a dead port would cost seconds.
    login = kvreg_subprocess(home, "--json", "login", "nowhere", "--token", "kvreg_" + "x" * 43, expect=1)
    assert error_code(login), str(login)
    for command in (["push"], ["pull"], ["ls-remote"], ["audit", "show"]):
        assert error_code(kvreg_subprocess(home, "--json", *command, expect=2)) == "USAGE"
    kvreg_subprocess(home, "logout", "nowhere", expect=None)
    kvreg_subprocess(home, "remote", "remove", "nowhere")


def test_exit_codes_and_json_error_documents(
    tmp_path: Path, store_copy: Path, deposited: dict[str, Any]
) -> None:
    usage = kvreg_subprocess(tmp_path, "--json", "graft", expect=2)
    assert error_code(usage) == "USAGE"
    kvreg_subprocess(tmp_path, "no-such-command", expect=2)
    missing = kvreg_subprocess(store_copy, "--json", "show", "no/such", expect=1)
    assert error_code(missing) == "REF_UNKNOWN"
    flip_bit(store_copy, deposited["manifest"]["chunks"][0]["digest"])
    damaged = kvreg_subprocess(store_copy, "fsck", "--json", expect=3)
    assert damaged.json["ok"] is False and damaged.json["error"]["code"]


def test_flywheel_and_demo_refuse_bad_options(tmp_path: Path) -> None:
    assert (
        error_code(kvreg_subprocess(tmp_path, "--json", "flywheel", "--repeat-easy", "-1", expect=2))
        == "USAGE"
    )
    kvreg_subprocess(tmp_path, "demo", "--help")
    kvreg_subprocess(tmp_path, "serve", "--help")
