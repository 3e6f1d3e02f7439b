"""``kvreg model ls/show/rm`` and ``--model NAME`` on the command line, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.helpers import kvreg
from kvreg.app.models import SMOLLM2 as SMOLLM2_NAME


def test_ls_and_show_verify(smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVREG_MODELS", str(smollm2.parent))
    listing = kvreg(tmp_path, "model", "ls", "--json").json
    names = [m["name"] for m in listing["models"]]
    assert SMOLLM2_NAME in names
    shown = kvreg(tmp_path, "model", "show", SMOLLM2_NAME, "--verify", "--json").json
    assert shown["verified"] is True
    assert shown["path"] == str(smollm2)
    assert shown["model_fingerprint"].startswith("sha256:")
    assert shown["source"]["file"].endswith(".gguf")


def test_unknown_model_names_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVREG_MODELS", str(tmp_path / "models"))
    run = kvreg(tmp_path, "model", "show", "nosuch", expect=1)
    assert "no imported model named 'nosuch'" in run.err and "kvreg model import" in run.err
    text = tmp_path / "t.txt"
    text.write_text("hello")
    kvreg(tmp_path, "keys", "generate")
    run = kvreg(tmp_path, "deposit", "nosuch", "--ref", "a/b", "--text-file", text, expect=1)
    assert "no model folder 'nosuch'" in run.err and "kvreg model import FILE.gguf" in run.err


def test_rm_removes_a_copy(smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    library = tmp_path / "models"
    shutil.copytree(smollm2, library / "copy")
    monkeypatch.setenv("KVREG_MODELS", str(library))
    kvreg(tmp_path, "model", "rm", "copy")
    assert not (library / "copy").exists()
    assert kvreg(tmp_path, "model", "ls", "--json").json == {"models": []}
