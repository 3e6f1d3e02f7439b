"""The library of imported models: where ``kvreg model import`` puts them and how a name is found.

Imported models are shared by every store on the host (a store is a ``$KVREG_HOME``;
a model is hundreds of megabytes and the same for all of them), so the library has
its own root, in order: ``$KVREG_MODELS``, ``$XDG_CACHE_HOME/kvreg/models``,
``~/.cache/kvreg/models``. Layout::

    <root>/<name>/                 a Hugging Face model folder (read-only files)
    <root>/<name>/kvreg-model.json the import record (:class:`ModelRecord`)
    <root>/.incoming-<name>-<hex>/ a folder being written; renamed into place when whole
    <root>/.lock                   serializes imports and removals

A model folder appears by one ``rename`` of a complete folder, so a reader sees a
whole model or none. This module lays out and reads the library; converting a
file into a folder is the engine's job (``kvreg.engine.gguf_import``) and the
import itself is :mod:`kvreg.app.models`'.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.core.errors import ModelError, NotFoundError
from kvreg.core.names import validate_name
from kvreg.fileio.atomicfile import fsync_dir
from kvreg.fileio.locks import flock

ENV_VAR = "KVREG_MODELS"
RECORD_NAME = "kvreg-model.json"
RECORD_FORMAT = "kvreg.imported-model/v1"
_INCOMING = ".incoming-"


def resolve_library_root(environ: Mapping[str, str] | None = None) -> Path:
    """The library's root: ``$KVREG_MODELS``, else ``$XDG_CACHE_HOME/kvreg/models``, else
    ``~/.cache/kvreg/models``; absolute, ``~`` expanded."""
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR):
        chosen = Path(env[ENV_VAR])
    elif env.get("XDG_CACHE_HOME"):
        chosen = Path(env["XDG_CACHE_HOME"]) / "kvreg" / "models"
    else:
        chosen = Path.home() / ".cache" / "kvreg" / "models"
    return Path(os.path.abspath(chosen.expanduser()))  # noqa: PTH100 (no symlink resolution wanted)


@dataclass(frozen=True)
class ModelRecord:
    """What an import wrote: the source file, the fingerprints, every file's digest."""

    name: str
    source: dict[str, Any]  # file (base name), size, sha256
    gguf: dict[str, Any]  # architecture, name, tensor_count, has_chat_template
    model_fingerprint: str
    tokenizer_fingerprint: str
    chat_template: str | None  # "sha256:..." of the template string, when the tokenizer has one
    files: dict[str, str]  # file name -> "sha256:..."

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "name": self.name,
            "source": self.source,
            "gguf": self.gguf,
            "model_fingerprint": self.model_fingerprint,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "chat_template": self.chat_template,
            "files": self.files,
        }

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_dict(cls, data: Any, where: Path) -> ModelRecord:
        try:
            if data.get("format") != RECORD_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, expected {RECORD_FORMAT!r}")
            return cls(
                name=str(data["name"]),
                source=dict(data["source"]),
                gguf=dict(data["gguf"]),
                model_fingerprint=str(data["model_fingerprint"]),
                tokenizer_fingerprint=str(data["tokenizer_fingerprint"]),
                chat_template=None if data.get("chat_template") is None else str(data["chat_template"]),
                files={str(k): str(v) for k, v in dict(data["files"]).items()},
            )
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ModelError(
                f"{where} is not a valid import record: {e}",
                hint="import the model again: kvreg model rm NAME, then kvreg model import FILE --name NAME",
            ) from None


class ModelLibrary:
    """The imported models under one root. Cheap to construct; touches the disk lazily."""

    def __init__(self, root: Path | None = None, *, environ: Mapping[str, str] | None = None) -> None:
        self.root = root if root is not None else resolve_library_root(environ)

    def path(self, name: str) -> Path:
        """The folder of the model ``name`` (validated: no separators, no ``..``)."""
        return self.root / validate_name(name)

    def has(self, name: str) -> bool:
        return (self.path(name) / RECORD_NAME).is_file()

    def record(self, name: str) -> ModelRecord:
        where = self.path(name) / RECORD_NAME
        try:
            data = json.loads(where.read_bytes())
        except FileNotFoundError:
            raise NotFoundError(
                f"no imported model named {name!r} in {self.root}",
                hint="kvreg model ls lists the imported models; "
                "kvreg model import FILE.gguf --name NAME adds one",
            ) from None
        except ValueError as e:
            raise ModelError(f"{where} is not valid JSON: {e}") from None
        return ModelRecord.from_dict(data, where)

    def records(self) -> list[ModelRecord]:
        """Every imported model, by name; folders being written are skipped."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(".") or not (entry / RECORD_NAME).is_file():
                continue
            out.append(self.record(entry.name))
        return out

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the library's lock (imports and removals take it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with flock(self.root / ".lock"):
            yield

    def incoming(self, name: str) -> Path:
        """A new, empty folder to write the model ``name`` into, beside its final place."""
        self.root.mkdir(parents=True, exist_ok=True)
        folder = self.root / f"{_INCOMING}{validate_name(name)}-{secrets.token_hex(4)}"
        folder.mkdir()
        return folder

    def install(self, incoming: Path, name: str) -> Path:
        """Make every file of ``incoming`` read-only and durable, then rename it to ``name``."""
        final = self.path(name)
        if final.exists():
            raise ModelError(f"{final} already exists", hint=f"remove it first: kvreg model rm {name}")
        for file in sorted(incoming.iterdir()):
            with file.open("rb") as f:
                os.fsync(f.fileno())
            file.chmod(0o444)
        fsync_dir(incoming)
        incoming.rename(final)
        fsync_dir(self.root)
        return final

    def remove(self, name: str) -> None:
        """Delete the model ``name``: renamed aside first, so no reader sees half a folder."""
        final = self.path(name)
        if not final.exists():
            raise NotFoundError(f"no imported model named {name!r} in {self.root}")
        doomed = self.root / f"{_INCOMING}removed-{name}-{secrets.token_hex(4)}"
        final.rename(doomed)
        fsync_dir(self.root)
        discard(doomed)

    def sweep(self) -> None:
        """Delete folders left by imports that crashed (call it under :meth:`locked`)."""
        if self.root.is_dir():
            for entry in self.root.iterdir():
                if entry.name.startswith(_INCOMING) and entry.is_dir():
                    discard(entry)


def discard(folder: Path) -> None:
    """Delete ``folder`` and its (possibly read-only) files."""
    for file in folder.iterdir() if folder.is_dir() else ():
        if file.is_file():
            file.chmod(0o644)
    shutil.rmtree(folder, ignore_errors=True)
