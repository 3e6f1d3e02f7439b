"""The chunk-sharing bar of the artifact page: the chunks in order, coloured by who else holds them.

:func:`chunk_map` groups consecutive chunks held by the same set of other artifacts
(typically: the first blocks shared with the artifacts this one extends or is
extended by, then blocks of its own) and draws one inline SVG bar, one rectangle per
chunk. Colours are CSS classes (``seg-0`` ... ``seg-5`` for shared runs, ``seg-own``
for chunks no other readable artifact holds) that ``kvreg.css`` fills from its colour
variables, so dark mode works; the SVG has ``role="img"``, a ``<title>`` and a
``<desc>``, and every rectangle a ``<title>`` of its own. The legend and the text
alternative are :attr:`ChunkMap.runs`, rendered as HTML by the template.

Every text put in the SVG is escaped here (the SVG is returned as ``Markup``). This
module runs no query: the holders come from ``views_artifact.shared_chunks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from markupsafe import Markup

WIDTH = 1000  # viewBox units; the bar stretches to the page width
HEIGHT = 28
PALETTE = 6  # seg-0 .. seg-5, cycled


class Holder(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def digest(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def url(self) -> str: ...


class ChunkLike(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def digest(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


@dataclass(frozen=True)
class Run:
    """Consecutive chunks held by the same other artifacts (none: only by this one)."""

    first: int
    last: int
    start_token: int
    end_token: int
    holders: tuple[Holder, ...]
    css: str  # "seg-own" or "seg-N"

    @property
    def chunks(self) -> int:
        return self.last - self.first + 1

    @property
    def span(self) -> str:
        return f"chunk {self.first}" if self.first == self.last else f"chunks {self.first}–{self.last}"

    @property
    def text(self) -> str:
        """The run in words (the legend entry and the text alternative)."""
        tokens = f"tokens {self.start_token}–{self.end_token}"
        if not self.holders:
            return f"{self.span} ({tokens}): only in this artifact"
        n = len(self.holders)
        return f"{self.span} ({tokens}): shared with {n} other artifact{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class ChunkMap:
    runs: list[Run]
    svg: Markup
    shared_chunks: int
    total_chunks: int


def _key(holders: Sequence[Holder]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((h.namespace, h.digest) for h in holders))


def chunk_map(chunks: Sequence[ChunkLike], holders: Mapping[str, Sequence[Holder]], title: str) -> ChunkMap:
    """The runs of ``chunks`` (in order) by their holders, and the SVG bar drawing them."""
    runs: list[Run] = []
    colours: dict[tuple[tuple[str, str], ...], str] = {}
    for c in chunks:
        others = tuple(holders.get(c.digest, ()))
        key = _key(others)
        if runs and _key(runs[-1].holders) == key:
            prev = runs[-1]
            runs[-1] = Run(prev.first, c.index, prev.start_token, c.end, prev.holders, prev.css)
            continue
        css = "seg-own" if not others else colours.setdefault(key, f"seg-{len(colours) % PALETTE}")
        runs.append(Run(c.index, c.index, c.start, c.end, others, css))
    shared = sum(1 for c in chunks if holders.get(c.digest))
    return ChunkMap(runs, _svg(chunks, runs, title, shared), shared, len(chunks))


def _svg(chunks: Sequence[ChunkLike], runs: list[Run], title: str, shared: int) -> Markup:
    n = len(chunks)
    summary = f"{title}: {shared} of {n} chunks shared with other artifacts"
    parts = [
        Markup(
            '<svg class="chunk-bar" role="img" aria-labelledby="chunk-bar-title chunk-bar-desc" '
            'viewBox="0 0 {} {}" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg">'
            '<title id="chunk-bar-title">{}</title><desc id="chunk-bar-desc">{}</desc>'
        ).format(WIDTH, HEIGHT, summary, "; ".join(r.text for r in runs))
    ]
    if n:
        step = WIDTH / n
        gap = min(step * 0.08, 2.0) if n > 1 else 0.0
        for run in runs:
            names = ", ".join(h.label for h in run.holders) or "only this artifact"
            for i in range(run.first, run.last + 1):
                parts.append(
                    Markup(
                        '<rect class="{}" x="{}" y="0" width="{}" height="{}"><title>{}</title></rect>'
                    ).format(
                        run.css,
                        f"{i * step:.2f}",
                        f"{max(step - gap, 0.5):.2f}",
                        HEIGHT,
                        f"chunk {i}: {names}",
                    )
                )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)
