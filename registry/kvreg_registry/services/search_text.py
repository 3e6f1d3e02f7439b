"""The searchable text of an envelope: its words, the texts it is made of, and its search columns.

Each envelope row keeps ``search_text``: the words of its title, question, other
annotations, verifier, model name, prompt text and verified solution text (the
manifest's ``prompt`` and ``text`` objects, UTF-8, at most ``MAX_TEXT_BYTES`` of each
read from storage). :func:`searchable_text` makes it: NFKC, case-folded, split into
words (letters and digits, with their combining marks; anything else separates
words), each word at most ``MAX_WORD_CHARS``, each distinct word once,
space-separated, at most ``MAX_SEARCH_BYTES`` in all. The query side
(``services.search``) splits the user's text with the same function (:func:`words`),
so that both backends' tokenizers only ever see plain words split by spaces.

This module reads text objects from storage but touches no database: storing the
fields is ``services.envelopes``' job, querying them ``services.search``', rewriting
them all ``services.search_index``'.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import unicodedata
from collections.abc import Iterable

from kvreg.core.digest import Digest
from kvreg.core.errors import ObjectNotFoundError
from kvreg.core.manifest import Manifest
from kvreg_registry.storage.base import ObjectStorage

log = logging.getLogger(__name__)

#: Longer words are cut to this many characters (when indexed and when searched alike).
MAX_WORD_CHARS = 64
#: At most this many bytes of the solution text (and of the prompt) are read and indexed.
MAX_TEXT_BYTES = 1 << 20
#: The searchable text of one envelope is cut to this many UTF-8 bytes of distinct words
#: (PostgreSQL refuses a tsvector whose lexemes exceed 1 MiB in all).
MAX_SEARCH_BYTES = 512 * 1024


_ASCII_WORD = re.compile(r"[a-z0-9]+")


def _class(code_points: list[int]) -> str:
    """A regex character class body for ``code_points`` (sorted), as ranges."""
    out: list[str] = []
    i = 0
    while i < len(code_points):
        j = i
        while j + 1 < len(code_points) and code_points[j + 1] == code_points[j] + 1:
            j += 1
        out.append(f"{re.escape(chr(code_points[i]))}-{re.escape(chr(code_points[j]))}")
        i = j + 1
    return "".join(out)


@functools.cache
def _unicode_words() -> tuple[dict[int, str], re.Pattern[str]]:
    """What splits non-ASCII text into words: a table that blanks the "other" numbers
    (category ``No``: circled digits, fractions, superscripts left by NFKC), which
    PostgreSQL's parser does not take as word characters, and a pattern for a word: a
    letter or digit (``\\w`` without ``_``: categories L, Nd, Nl once ``No`` is blanked)
    followed by letters, digits and combining marks (M, which scripts such as Devanagari
    have inside words). Built once from ``unicodedata``; the planes scanned hold every
    mark and ``No`` character (planes 4 to 13 are unassigned, 15 and 16 private use)."""
    marks: list[int] = []
    others: list[int] = []
    for cp in itertools.chain(range(0x40000), range(0xE0000, 0xF0000)):
        category = unicodedata.category(chr(cp))
        if category[0] == "M":
            marks.append(cp)
        elif category == "No":
            others.append(cp)
    # Marks of the first plane and the others apart: a regex class is a fast bitmap only
    # within the first plane.
    bmp = _class([cp for cp in marks if cp < 0x10000])
    beyond = _class([cp for cp in marks if cp >= 0x10000])
    pattern = re.compile(rf"[^\W_](?:[^\W_]|[{bmp}]|[{beyond}])*")
    return dict.fromkeys(others, " "), pattern


def _fold(value: str) -> str:
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())


def words(value: str) -> list[str]:
    """The searchable words of ``value`` in order (repeats kept), each cut to ``MAX_WORD_CHARS``."""
    folded = _fold(value)
    if folded.isascii():
        found = _ASCII_WORD.findall(folded)
    else:
        blank_others, pattern = _unicode_words()
        found = pattern.findall(folded.translate(blank_others))
    return [w[:MAX_WORD_CHARS] for w in found]


def searchable_text(parts: Iterable[str]) -> str:
    """The ``search_text`` of an envelope: the distinct words of ``parts`` in order of first
    appearance, space-separated, at most ``MAX_SEARCH_BYTES`` UTF-8 bytes."""
    seen: dict[str, None] = {}
    budget = MAX_SEARCH_BYTES
    for part in parts:
        for w in words(part):
            if w in seen:
                continue
            cost = len(w.encode("utf-8")) + 1
            if cost > budget:
                return " ".join(seen)
            budget -= cost
            seen[w] = None
    return " ".join(seen)


def artifact_texts(storage: ObjectStorage, manifest: Manifest) -> tuple[str, str]:
    """The solution text and the prompt text of an artifact (``""`` if none), read from
    storage, at most ``MAX_TEXT_BYTES`` each, decoded as UTF-8 (invalid bytes replaced).

    An object missing from storage gives ``""`` and a warning: the envelope stays
    searchable by its annotations, and ``kvreg-admin search reindex`` fills it in later."""
    text_value, prompt_value, _complete = read_texts(storage, manifest)
    return text_value, prompt_value


def read_texts(storage: ObjectStorage, manifest: Manifest) -> tuple[str, str, bool]:
    """:func:`artifact_texts`, and whether every text object was in storage."""
    complete = True

    def read(digest: Digest) -> str:
        nonlocal complete
        try:
            data = b"".join(storage.read_range(digest, 0, MAX_TEXT_BYTES))
        except ObjectNotFoundError:
            log.warning("search: object %s of manifest %s is not in storage", digest, manifest.digest)
            complete = False
            return ""
        return data.decode("utf-8", errors="replace")

    text_value = read(manifest.text.digest)
    prompt_value = read(manifest.prompt.digest) if manifest.prompt is not None else ""
    return text_value, prompt_value, complete


def search_fields(manifest: Manifest, *, text: str = "", prompt: str = "") -> dict[str, object]:
    """The columns search filters on. ``search_text`` holds the words of the annotations, the
    verifier, the model name, the prompt and the verified solution text (``text`` and
    ``prompt``: the decoded text objects, see :func:`artifact_texts`), normalized by
    :func:`searchable_text` for the full-text index."""
    a = manifest.annotations
    parts: list[str] = []
    for key in ("title", "question", "answer"):
        v = a.get(key)
        if isinstance(v, str):
            parts.append(v)
    tags = a.get("tags")
    if isinstance(tags, list):
        parts.extend(t for t in tags if isinstance(t, str))
    for key, v in sorted(a.items()):
        if key not in {"title", "question", "answer", "tags"} and isinstance(v, str):
            parts.append(v)
    v = manifest.verification
    if v is not None:
        parts.append(v.verifier)
    parts.append(manifest.model.name or "")
    parts.append(prompt)
    parts.append(text)
    return {
        "title": a.get("title") if isinstance(a.get("title"), str) else "",
        "question": a.get("question") if isinstance(a.get("question"), str) else "",
        "search_text": searchable_text(parts),
        "verifier": v.verifier[:200] if v else None,
        "verdict": v.verdict if v else None,
    }
