"""The home page's small chart of the library's growth and of grafts over time: inline SVG.

:func:`render` draws, for each day with activity, a bar of the artifacts stored that day and
a bar of the graft receipts received, and a line of the running total of artifacts. Colours
come from CSS classes (``.chart-art``, ``.chart-rec``, ``.chart-total`` in kvreg.css, using
the page's custom properties), so dark mode applies; the SVG has ``role="img"``, a
``<title>`` and a ``<desc>``, and the page shows the same numbers as a table. It does not
query anything (``views_library.overview`` does).
"""

from __future__ import annotations

from markupsafe import Markup, escape

WIDTH = 480  # drawn at this size on a desktop, scaled down to fit a phone
HEIGHT = 160
PAD_LEFT = 36
PAD_RIGHT = 8
PAD_TOP = 12
PAD_BOTTOM = 28


def describe(days: list[tuple[str, int, int]]) -> str:
    """The chart in words (its ``<desc>``)."""
    if not days:
        return "No artifact stored and no graft received yet."
    arts = sum(d[1] for d in days)
    recs = sum(d[2] for d in days)
    return (
        f"{arts} artifact{'s' if arts != 1 else ''} stored and "
        f"{recs} graft receipt{'s' if recs != 1 else ''} received over "
        f"{len(days)} day{'s' if len(days) != 1 else ''} with activity, {days[0][0]} to {days[-1][0]}."
    )


def render(days: list[tuple[str, int, int]], *, title: str = "Library growth and grafts per day") -> Markup:
    """The chart of ``days`` (``(YYYY-MM-DD, artifacts, receipts)``, oldest first) as an ``<svg>``."""
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    n = max(1, len(days))
    running = []
    total = 0
    for _, arts, _recs in days:
        total += arts
        running.append(total)
    peak = max([1, total, *(d[2] for d in days)])
    slot = plot_w / n
    bar = max(1.0, min(24.0, slot * 0.35))
    base = PAD_TOP + plot_h

    def y(v: int) -> float:
        return base - plot_h * v / peak

    parts = [
        f'<svg class="chart timeline" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        ' role="img"'
        ' aria-labelledby="tl-title tl-desc" preserveAspectRatio="xMidYMid meet">',
        f'<title id="tl-title">{escape(title)}</title>',
        f'<desc id="tl-desc">{escape(describe(days))}</desc>',
        f'<line class="chart-axis" x1="{PAD_LEFT}" y1="{base}" x2="{WIDTH - PAD_RIGHT}" y2="{base}"/>',
        f'<text class="chart-label" x="{PAD_LEFT - 4}" y="{PAD_TOP + 4}" text-anchor="end">{peak}</text>',
        f'<text class="chart-label" x="{PAD_LEFT - 4}" y="{base}" text-anchor="end">0</text>',
    ]
    points = []
    for i, (day, arts, recs) in enumerate(days):
        cx = PAD_LEFT + slot * (i + 0.5)
        if arts:
            parts.append(
                f'<rect class="chart-art" x="{cx - bar:.1f}" y="{y(arts):.1f}" width="{bar:.1f}" '
                f'height="{base - y(arts):.1f}"><title>{escape(day)}: {arts} stored</title></rect>'
            )
        if recs:
            parts.append(
                f'<rect class="chart-rec" x="{cx:.1f}" y="{y(recs):.1f}" width="{bar:.1f}" '
                f'height="{base - y(recs):.1f}"><title>{escape(day)}: {recs} grafts</title></rect>'
            )
        points.append(f"{cx:.1f},{y(running[i]):.1f}")
    if points:
        if len(points) == 1:
            px, py = points[0].split(",")
            parts.append(f'<circle class="chart-total" cx="{px}" cy="{py}" r="3"/>')
        else:
            parts.append(f'<polyline class="chart-total" points="{" ".join(points)}"/>')
        parts.append(f'<text class="chart-label" x="{PAD_LEFT}" y="{HEIGHT - 8}">{escape(days[0][0])}</text>')
        if len(days) > 1:
            parts.append(
                f'<text class="chart-label" x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 8}" text-anchor="end">'
                f"{escape(days[-1][0])}</text>"
            )
    parts.append("</svg>")
    # Every piece of text above went through escape(); the rest is markup made here.
    return Markup("".join(parts))  # noqa: S704
