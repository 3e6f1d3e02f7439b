"""The flywheel model's character-level tokenizer, saved as a ``PreTrainedTokenizerFast``.

One token per character of :data:`kvreg.engine.flywheel.task.ALPHABET` plus the four
special tokens used across kvreg's tiny models (``<unk> <s> </s> <pad>`` with ids
0–3): 23 tokens. Encoding prepends ``<s>``; decoding concatenates characters.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from kvreg.engine.flywheel.task import ALPHABET

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")


def vocabulary() -> dict[str, int]:
    tokens = list(SPECIAL_TOKENS) + list(ALPHABET)
    return {t: i for i, t in enumerate(tokens)}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer (deterministic: no training)."""
    tok = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    bos = vocabulary()["<s>"]
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
