"""Fixtures for the command-line tests.

Commands run in the test process (``helpers.kvreg``: the Typer app, with the
environment, streams and logging a fresh process would have; see ``inprocess.py``),
each with its own ``KVREG_HOME``; a command that must start torch afresh (another
numerics profile or an emulated host) runs ``python -m kvreg`` instead, and
test_cli_entrypoint.py runs every top-level command that way once. Tiny model
directories are built once per session and shared with the other suites.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from .helpers import BLOCK, EXTENSION, QUESTION, REF, SOLUTION, SUFFIX, TEXT, kvreg


@pytest.fixture(scope="session")
def models(tiny_models: Any) -> Any:
    """``models[arch]``: the session's seed-0 tiny model directories (tests/conftest.py)."""
    return tiny_models


@pytest.fixture(scope="session")
def texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("texts")
    files = {
        "text": TEXT,
        "question": QUESTION,
        "solution": SOLUTION,
        "extended": TEXT + EXTENSION,
        "suffix": SUFFIX,
        "other": "A compliance ruling: the transfer is permitted because the counterparty is registered "
        "and the amount is below the reporting threshold of 10,000 units. Reviewed and approved.",
    }
    out = {}
    for name, content in files.items():
        out[name] = d / f"{name}.txt"
        out[name].write_text(content, encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def deposited(
    tmp_path_factory: pytest.TempPathFactory, models: Any, texts: dict[str, Path]
) -> dict[str, Any]:
    """A store with a key and one llama float32 artifact (blocks of 16) under ``test/p07``.

    Do not change it: tests that damage a store work on a copy (``store_copy``).
    """
    home = tmp_path_factory.mktemp("deposited") / "home"
    kvreg(home, "keys", "generate")
    dep = kvreg(
        home,
        "--json",
        "deposit",
        models["llama"],
        "--text-file",
        texts["text"],
        "--ref",
        REF,
        "--block-size",
        BLOCK,
        "--verifier",
        "checker",
        "--verdict",
        "pass",
        "--evidence",
        '{"answer": "738"}',
        "--title",
        "p07",
    ).json
    manifest = kvreg(home, "show", REF, "--json").json
    return {"home": home, "deposit": dep, "manifest": manifest}


@pytest.fixture
def store_copy(tmp_path: Path, deposited: dict[str, Any]) -> Path:
    """A private copy of the ``deposited`` store (modes kept) that a test may damage."""
    home = tmp_path / "home"
    shutil.copytree(deposited["home"], home, symlinks=True)
    return home
