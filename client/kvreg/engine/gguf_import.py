"""Convert a GGUF file into a Hugging Face model folder, byte for byte the same on every host.

:func:`read_gguf_summary` opens the file with ``gguf`` (the llama.cpp project's
reader) and checks what can be checked before the heavy work: the magic and
header parse, every tensor lies inside the file (a truncated download fails
here), and the architecture is one transformers converts from GGUF.
:func:`convert_gguf` then lets transformers read the file (it dequantizes every
tensor to float32 with ``gguf``'s numpy kernels: elementwise IEEE arithmetic,
the same bits on every CPU), copies the weights into a plain model of the same
config (transformers marks a GGUF-loaded model as quantized and will not save
it), and writes:

- ``model.safetensors``: float32 weights (tied weights stored once);
- ``config.json``, ``generation_config.json`` and the tokenizer's JSON files,
  rewritten with sorted keys and without ``transformers_version``, so that their
  bytes depend on the GGUF file only;
- the tokenizer files transformers writes (``tokenizer.json``,
  ``tokenizer_config.json``, ``chat_template.jinja`` when the file has a chat
  template).

This module writes into the folder it is given and nothing else; choosing the
folder, the atomic rename into the model library, the fingerprints and the
record of the import are :mod:`kvreg.app.models`' job.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.core.errors import ModelError

log = logging.getLogger(__name__)

#: JSON keys transformers writes that name its own version rather than the model.
VOLATILE_KEYS = frozenset(
    {"transformers_version", "_name_or_path", "name_or_path", "is_local", "local_files_only"}
)


@dataclass(frozen=True)
class GgufSummary:
    """What the GGUF header says, read before converting."""

    architecture: str  # general.architecture, e.g. "llama"
    name: str | None  # general.name, when the file has one
    tensor_count: int
    has_chat_template: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "name": self.name,
            "tensor_count": self.tensor_count,
            "has_chat_template": self.has_chat_template,
        }


def supported_architectures() -> list[str]:
    """The GGUF architectures this transformers converts (its own list)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(str(a) for a in GGUF_SUPPORTED_ARCHITECTURES)


def _field_text(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    except (IndexError, UnicodeDecodeError, TypeError):
        return None


def read_gguf_summary(path: Path) -> GgufSummary:
    """Parse the header of ``path``; raise :class:`ModelError` for anything that cannot be converted."""
    from gguf import GGUFReader

    if not path.is_file():
        raise ModelError(f"GGUF file {path} does not exist")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(
            f"{path} is not a GGUF file (it does not start with the GGUF magic)",
            hint="kvreg model import reads .gguf files, as published with llama.cpp",
        )
    size = path.stat().st_size
    try:
        reader = GGUFReader(path, "r")
        ends = [int(t.data_offset) + int(t.n_bytes) for t in reader.tensors]
    except Exception as e:
        raise ModelError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e})") from None
    if ends and max(ends) > size:
        raise ModelError(f"{path} is truncated: its tensors need {max(ends)} bytes, the file has {size}")
    architecture = _field_text(reader, "general.architecture")
    if architecture is None:
        raise ModelError(f"{path} has no general.architecture field")
    supported = supported_architectures()
    if architecture not in supported:
        raise ModelError(
            f"{path}: GGUF architecture {architecture!r} cannot be converted",
            hint=f"this transformers converts: {', '.join(supported)}",
        )
    return GgufSummary(
        architecture=architecture,
        name=_field_text(reader, "general.name"),
        tensor_count=len(reader.tensors),
        has_chat_template="tokenizer.chat_template" in reader.fields,
    )


def _strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip_volatile(v) for v in value]
    return value


def normalize_json_file(path: Path) -> None:
    """Rewrite a JSON file with sorted keys, two-space indent and no version keys."""
    data = _strip_volatile(json.loads(path.read_bytes()))
    text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    path.write_text(text, encoding="utf-8")


def convert_gguf(path: Path, out_dir: Path) -> GgufSummary:
    """Write the Hugging Face folder of the GGUF file ``path`` into the empty folder ``out_dir``."""
    summary = read_gguf_summary(path)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        loaded = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, local_files_only=True, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError, RuntimeError, AttributeError) as e:
        raise ModelError(f"transformers cannot read {path}: {e}") from e
    # A GGUF-loaded model is marked quantized and transformers refuses to save it: copy its
    # (already dequantized) weights into a plain model built from the same config.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    plain.eval()
    plain.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    for json_file in sorted(out_dir.glob("*.json")):
        normalize_json_file(json_file)
    log.info(
        "converted %s (%s, %d tensors) into %s", path, summary.architecture, summary.tensor_count, out_dir
    )
    return summary
