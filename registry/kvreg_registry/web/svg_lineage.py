"""The namespace page's lineage graph: which artifacts extend which (prefix relations), as
inline SVG.

:func:`render` lays the forest out as an indented tree (a row per artifact, a column per
generation) with elbow lines from each prefix to the artifacts that extend it, every node a
link to its artifact page. Colours come from CSS classes (``.lineage-*`` in kvreg.css, via
the page's custom properties); the SVG has ``role="img"``, a ``<title>`` and a ``<desc>``,
and the page lists the same relations as nested lists. It does not query anything
(``views_library.lineage`` does) and does not decide what a prefix is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from markupsafe import Markup, escape

ROW = 26
INDENT = 22
LEFT = 10
WIDTH = 440  # drawn at this size on a desktop, scaled down to fit a phone
MAX_LABEL = 44


@dataclass(frozen=True)
class Placed:
    digest: str
    label: str
    depth: int
    row: int
    parent: str | None


def layout(order: list[str], edges: list[tuple[str, str]], labels: dict[str, str]) -> list[Placed]:
    """Rows in depth-first order (roots in ``order``'s order, children likewise)."""
    children: dict[str, list[str]] = {}
    parent_of: dict[str, str] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
        parent_of[child] = parent
    rank = {d: i for i, d in enumerate(order)}
    placed: list[Placed] = []
    seen: set[str] = set()

    def visit(d: str, depth: int) -> None:
        if d in seen:
            return
        seen.add(d)
        placed.append(Placed(d, labels.get(d, d), depth, len(placed), parent_of.get(d)))
        for c in sorted(children.get(d, []), key=lambda x: rank.get(x, 0)):
            visit(c, depth + 1)

    for d in order:
        if d not in parent_of:
            visit(d, 0)
    for d in order:  # anything left (a cycle cannot happen, but never drop a node)
        visit(d, 0)
    return placed


def _label(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def render(
    placed: list[Placed], href: Callable[[str], str], *, title: str = "Prefix lineage of the artifacts"
) -> Markup:
    """The graph of ``placed`` (from :func:`layout`); ``href(digest)`` is a node's link."""
    height = ROW * len(placed) + 8
    row_of = {p.digest: p for p in placed}
    roots = sum(1 for p in placed if p.parent is None)
    families = f"{roots} prefix famil{'y' if roots == 1 else 'ies'}"
    desc = f"{len(placed)} artifacts in {families}; a line joins a prefix to an artifact that extends it."
    parts = [
        f'<svg class="chart lineage" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        'role="img" '
        'aria-labelledby="lineage-title lineage-desc" preserveAspectRatio="xMinYMin meet">',
        f'<title id="lineage-title">{escape(title)}</title>',
        f'<desc id="lineage-desc">{escape(desc)}</desc>',
    ]
    for p in placed:
        x = LEFT + INDENT * p.depth
        y = 4 + ROW * p.row + ROW / 2
        if p.parent and p.parent in row_of:
            q = row_of[p.parent]
            px = LEFT + INDENT * q.depth
            py = 4 + ROW * q.row + ROW / 2
            parts.append(f'<path class="lineage-edge" d="M{px},{py + 5} V{y} H{x - 5}"/>')
        parts.append(
            f'<a href="{escape(href(p.digest))}"><circle class="lineage-node" cx="{x}" cy="{y}" r="5"/>'
            f'<text class="lineage-label" x="{x + 10}" y="{y + 4}">{escape(_label(p.label))}</text></a>'
        )
    parts.append("</svg>")
    # Every piece of text above went through escape(); the rest is markup made here.
    return Markup("".join(parts))  # noqa: S704
