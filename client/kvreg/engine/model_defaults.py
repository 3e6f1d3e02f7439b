"""What a model directory ships for generation: its end-of-turn ids and its sampling defaults.

A Hugging Face model says in ``generation_config.json`` which token ids end its turn
(``eos_token_id``, one id or a list: Llama 3 lists ``<|end_of_text|>``, ``<|eom_id|>`` and
``<|eot_id|>``, Gemma ``<eos>`` and ``<end_of_turn>``) and, for many instruct models, how it
is meant to be sampled (``temperature``, ``top_p``, ``top_k``, ``min_p``,
``repetition_penalty``, and ``max_new_tokens``). :func:`model_defaults` reads them as vLLM's
``--generation-config auto`` (its default) does: the file's values, literally, whatever
``do_sample`` says; a folder without the file takes the end ids of ``config.json``, as
transformers derives a generation config from the model's. The tokenizer's EOS is always an
end id.

A value out of its range (a temperature above 2, a ``top_p`` of 0...) or of the wrong type is
left out with a warning rather than applied: a default must never make every request fail.
Nothing here imports torch or loads the model; the file is not part of the model fingerprint
(defaults change how a token is chosen, never the logits).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GENERATION_CONFIG = "generation_config.json"
#: The sampling settings a generation config may set, and what each must be to be applied.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass(frozen=True)
class ModelDefaults:
    """A model's end-of-turn token ids and the sampling defaults it ships (only those it sets)."""

    end_ids: frozenset[int] = frozenset()
    sampling: Mapping[str, float | int] = field(default_factory=dict)
    max_tokens: int | None = None  # the generation config's max_new_tokens
    source: str | None = None  # the file they were read from; None: no file

    def as_dict(self) -> dict[str, Any]:
        """A plain JSON-ready dict: the sampling defaults (and ``max_tokens`` when set)."""
        out: dict[str, Any] = dict(self.sampling)
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        return out


def _ids(value: object) -> list[int] | None:
    """An ``eos_token_id`` value as a list of ids; None when it is neither an id nor a list of ids."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return [value]
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return list(value)
    return None


def _valid(key: str, value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if not math.isfinite(value):
        return False
    if key == "temperature":
        return 0 <= value <= 2
    if key == "top_p":
        return 0 < value <= 1
    if key == "top_k":
        return isinstance(value, int) and value >= -1
    if key == "min_p":
        return 0 <= value <= 1
    return value > 0  # repetition_penalty


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("model defaults: %s cannot be read (%s); it is not used", path, exc)
        return None
    if not isinstance(data, dict):
        log.warning("model defaults: %s is not a JSON object; it is not used", path)
        return None
    return data


def model_defaults(model_dir: Path, tokenizer_eos: int | None = None) -> ModelDefaults:
    """The end-of-turn ids and sampling defaults of the model in ``model_dir``; ``tokenizer_eos``
    (the tokenizer's EOS id) is always one of the end ids."""
    ends: set[int] = set() if tokenizer_eos is None else {int(tokenizer_eos)}
    gen = _read_json(model_dir / GENERATION_CONFIG)
    if gen is None:  # transformers derives one from the model's config: its end ids
        config = _read_json(model_dir / "config.json") or {}
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
        for source in (config, text or {}):
            ends.update(_ids(source.get("eos_token_id")) or [])
        return ModelDefaults(frozenset(ends))
    where = str(model_dir / GENERATION_CONFIG)
    if "eos_token_id" in gen:
        ids = _ids(gen["eos_token_id"])
        if ids is None:
            log.warning(
                "model defaults: %s: eos_token_id %r is not a token id or a list of them",
                where,
                gen["eos_token_id"],
            )
        ends.update(ids or [])
    sampling: dict[str, float | int] = {}
    for key in SAMPLING_KEYS:
        value = gen.get(key)
        if value is None:
            continue
        if _valid(key, value):
            sampling[key] = value
        else:
            log.warning("model defaults: %s: %s %r is out of range; it is not applied", where, key, value)
    limit = gen.get("max_new_tokens")
    max_tokens = None
    if limit is not None:
        if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
            max_tokens = limit
        else:
            log.warning("model defaults: %s: max_new_tokens %r is not a positive integer", where, limit)
    return ModelDefaults(frozenset(ends), sampling, max_tokens, where)
