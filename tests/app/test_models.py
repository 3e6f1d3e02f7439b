"""The model library's names and records, and how ``--model`` is resolved (no conversion here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreg.app.models import default_name, resolve_model
from kvreg.core.errors import InvalidNameError, ModelError, NotFoundError
from kvreg.store.model_library import RECORD_FORMAT, RECORD_NAME, ModelLibrary, resolve_library_root


def _fake_import(library: ModelLibrary, name: str) -> Path:
    folder = library.path(name)
    folder.mkdir(parents=True)
    record = {
        "format": RECORD_FORMAT,
        "name": name,
        "source": {"file": "x.gguf", "size": 1, "sha256": "0" * 64},
        "gguf": {"architecture": "llama"},
        "model_fingerprint": "sha256:" + "1" * 64,
        "tokenizer_fingerprint": "sha256:" + "2" * 64,
        "chat_template": None,
        "files": {},
    }
    (folder / RECORD_NAME).write_text(json.dumps(record))
    return folder


def test_library_root_order(tmp_path: Path) -> None:
    assert resolve_library_root({"KVREG_MODELS": str(tmp_path)}) == tmp_path
    assert resolve_library_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "kvreg" / "models"
    assert resolve_library_root({}) == Path.home() / ".cache" / "kvreg" / "models"


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct.q4_1"),
        ("My Model (v2).GGUF", "my-model-v2"),
        ("..weird...name.gguf", "weird.name"),
        ("$$$.gguf", "model"),
    ],
)
def test_default_name(file: str, name: str) -> None:
    assert default_name(Path(file)) == name


def test_resolve_folder_name_and_missing(tmp_path: Path) -> None:
    library = ModelLibrary(tmp_path / "models")
    folder = tmp_path / "plain"
    folder.mkdir()
    assert resolve_model(folder, library) == folder
    imported = _fake_import(library, "mine")
    assert resolve_model("mine", library) == imported
    with pytest.raises(ModelError, match="no model folder 'other' and no imported model") as caught:
        resolve_model("other", library)
    assert "imported models: mine" in (caught.value.hint or "")
    with pytest.raises(ModelError, match=r"no model folder '\./gone'"):
        resolve_model("./gone", library)
    with pytest.raises(ModelError):
        resolve_model("../escape", library)


def test_the_bundled_model_has_a_name_an_import_can_shadow(tmp_path: Path) -> None:
    library = ModelLibrary(tmp_path / "models")
    bundled = resolve_model("kvreg-addition", library)
    assert (bundled / "config.json").is_file() and (bundled / "model.safetensors").is_file()
    assert resolve_model("kvreg-addition", library) == bundled
    imported = _fake_import(library, "kvreg-addition")  # the user's own model of that name wins
    assert resolve_model("kvreg-addition", library) == imported
    with pytest.raises(ModelError) as caught:
        resolve_model("nothing-here", ModelLibrary(tmp_path / "empty"))
    assert "kvreg-addition" in (caught.value.hint or "")


def test_names_cannot_leave_the_library(tmp_path: Path) -> None:
    library = ModelLibrary(tmp_path)
    for bad in ("../x", "a/b", "..", ""):
        with pytest.raises(InvalidNameError):
            library.path(bad)


def test_records_list_and_refuse_damage(tmp_path: Path) -> None:
    library = ModelLibrary(tmp_path / "models")
    assert library.records() == []
    _fake_import(library, "b")
    _fake_import(library, "a")
    (library.root / ".incoming-c-1234").mkdir()  # a crashed import: not listed
    assert [r.name for r in library.records()] == ["a", "b"]
    with pytest.raises(NotFoundError, match="no imported model named 'c'") as caught:
        library.record("c")
    assert "kvreg model ls" in (caught.value.hint or "")
    (library.path("a") / RECORD_NAME).write_text('{"format": "other"}')
    with pytest.raises(ModelError, match="not a valid import record"):
        library.record("a")
    library.sweep()
    assert not (library.root / ".incoming-c-1234").exists()
