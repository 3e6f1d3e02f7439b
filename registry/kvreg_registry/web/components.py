"""The components drawn on every row of long lists, in Python: a status badge, a verdict, a moment.

``templates/components.html`` exports these as ``c.badge``, ``c.verdict`` and ``c.time`` (its
other components are Jinja macros). They are functions rather than macros because a list page
draws hundreds of them and a Jinja macro call costs several times a function call (the audit
list rendered three times slower with macros). Every value is escaped here, as autoescaping
would.
"""

from __future__ import annotations

import datetime as dt

from markupsafe import Markup, escape

from kvreg_registry.web.status import tone_of, verdict_status


def format_time(value: object) -> str:
    if not isinstance(value, dt.datetime):
        return "–" if value is None else str(value)
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_time(value: object) -> str:
    """``2026-12-06T04:18:00Z``: a ``<time datetime>`` value."""
    if not isinstance(value, dt.datetime):
        return ""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relative_time(value: object, now: dt.datetime | None = None) -> str:
    """ "just now", "3 min ago", "5 h ago", "2 days ago"; the date beyond 30 days (or ahead of now)."""
    if not isinstance(value, dt.datetime):
        return "–" if value is None else str(value)
    when = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    seconds = ((now or dt.datetime.now(dt.UTC)) - when).total_seconds()
    if seconds < -60 or seconds >= 30 * 86400:
        return when.astimezone(dt.UTC).strftime("%Y-%m-%d")
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return f"{days} day{'' if days == 1 else 's'} ago"


# Each function builds its markup from escaped values in an f-string: Markup.format would escape
# them too, at several times the cost on a list of hundreds of rows.


def badge(status: str, label: object = None, title: object = None, id: str | None = None) -> Markup:
    """``<span data-status=STATUS class="badge TONE">LABEL</span>``; the tone comes from the status."""
    attrs = (f' id="{escape(id)}"' if id else "") + (f' title="{escape(title)}"' if title else "")
    text = escape(status if label is None else label)
    html = f'<span data-status="{escape(status)}" class="badge {tone_of(status)}"{attrs}>{text}</span>'
    return Markup(html)  # noqa: S704 - every value in it is escaped above


def verdict(value: object, id: str | None = None) -> Markup:
    """A verifier's verdict: ``pass``, ``fail``, ``unknown``, or "not verified" when there is none."""
    if value:
        return badge(verdict_status(value), value, "the verifier's verdict", id)
    return badge("unverified", "not verified", "the depositor recorded no verification", id)


def time(value: object) -> Markup:
    """``<time>``: "3 min ago", the exact UTC time on hover and in ``datetime``; "–" for none."""
    if not value:
        return Markup("–")
    exact, ago = escape(format_time(value)), escape(relative_time(value))
    html = f'<time datetime="{iso_time(value)}" title="{exact}">{ago}</time>'
    return Markup(html)  # noqa: S704 - every value in it is escaped (iso_time: digits and separators)
