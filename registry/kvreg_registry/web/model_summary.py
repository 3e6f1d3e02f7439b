"""A model as people name it: display name, family, architecture and size, from a manifest's model section.

Manifests carry the model's folder name (``model.name``), its architecture class, its
layer count, KV heads, head dimension and dtype, and its fingerprint. Wherever the web
UI shows a fingerprint it also shows :func:`summarize`'s words: a folder named with a
generic word ("model", "weights", a snapshot hash) reads as "unnamed Llama model";
known short names read as their full names (``smollm2`` is SmolLM2-135M-Instruct,
``kvreg-addition`` the flywheel's bundled model). The size is the KV cache one token
takes (layers x 2 x KV heads x head dim x dtype bytes), the number that decides what a
graft reads, with the layer and head counts. Pure: no database, no HTML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvreg.core.manifest_schema import DTYPE_BYTES, ModelInfo

#: Folder names that say nothing about the model.
GENERIC_NAMES = frozenset({"", "model", "models", "weights", "checkpoint", "snapshot", "main", "hf", "tiny"})
#: Short names kvreg itself gives, read as their full names.
KNOWN_NAMES = {
    "smollm2": "SmolLM2-135M-Instruct",
    "kvreg-addition": "kvreg's bundled addition model",
}
#: Models ``kvreg model import`` knows by these names: ``--model NAME`` works on any host.
IMPORTABLE = frozenset({"smollm2"})
_HASHLIKE = re.compile(r"[0-9a-f]{16,}")
_ARCH_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model")


@dataclass(frozen=True)
class ModelSummary:
    name: str  # what to call it
    named: bool  # the manifest gave a meaningful name (else ``name`` is made from the family)
    folder: str  # the manifest's own ``model.name``
    family: str  # "Llama", from the architecture class
    architecture: str  # "LlamaForCausalLM"
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    kv_bytes_per_token: int | None  # None: unknown dtype

    @property
    def cli_name(self) -> str:
        """What to pass as ``--model`` in the commands the page shows."""
        return self.folder if self.folder in IMPORTABLE else "MODEL"

    @property
    def shape(self) -> str:
        """``4 layers, 4 KV heads x 32, float32``."""
        return f"{self.layers} layers, {self.kv_heads} KV heads × {self.head_dim}, {self.dtype}"


def family_of(architecture: str, model_type: str) -> str:
    """``LlamaForCausalLM`` -> ``Llama``; the model type when the class says nothing."""
    for suffix in _ARCH_SUFFIXES:
        if architecture.endswith(suffix) and len(architecture) > len(suffix):
            return architecture[: -len(suffix)]
    return architecture or model_type or "unknown"


def display_name(folder: str, family: str) -> tuple[str, bool]:
    """The name to show for a model whose folder is ``folder``, and whether it was a real name."""
    key = folder.strip()
    known = KNOWN_NAMES.get(key.lower())
    if known is not None:
        return known, True
    if key.lower() in GENERIC_NAMES or _HASHLIKE.fullmatch(key.lower()):
        return f"unnamed {family} model", False
    return key, True


def summarize(model: ModelInfo) -> ModelSummary:
    family = family_of(model.architecture, model.model_type)
    name, named = display_name(model.name, family)
    width = DTYPE_BYTES.get(model.dtype)
    per_token = None if width is None else model.num_layers * 2 * model.kv_heads * model.head_dim * width
    return ModelSummary(
        name=name,
        named=named,
        folder=model.name,
        family=family,
        architecture=model.architecture,
        layers=model.num_layers,
        kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        dtype=model.dtype,
        kv_bytes_per_token=per_token,
    )


def listing_name(folder: str) -> str:
    """A model's name in a list where only the manifest's name is at hand (search results, a
    namespace's artifacts, the model filter): :func:`display_name` without the family."""
    name, named = display_name(folder, "")
    return name if named else "unnamed model"
