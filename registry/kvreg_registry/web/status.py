"""The one map from a status the web UI shows to the colour ("tone") that says what it means.

Every status badge of every page is drawn by the ``badge`` macro of ``templates/components.html``,
which looks its status up here: a ``pass`` verdict is the same green on the home page, a
namespace page and an artifact page; ``unknown`` is the same amber everywhere; ``public`` is
neutral wherever it is shown. The browser sweep (``tests/browser/test_every_page.py``) reads
this map and fails on a badge whose colour is not its tone's.

Tones and what they mean (their colours are the custom properties of ``TONE_COLOURS`` in
``static/kvreg.css``, light and dark):

- ``ok``: checked and good (a verdict that passed, a verified signature or proof, an active key);
- ``bad``: checked and failed, or no longer valid (a failed verdict, a revoked token);
- ``warn``: not checked, or needs a person's attention (no verdict, an unregistered key, a hold);
- ``info``: about you or your session (this session's token, your own user, a server admin);
- ``neutral``: a plain property with no judgement in it (visibility, a role, a ref name).
"""

from __future__ import annotations

from typing import Final, Literal

Tone = Literal["ok", "bad", "warn", "info", "neutral"]

# tone -> the CSS custom property of its text (and border) colour; the badge's background is
# the same name with ``-bg`` appended.
TONE_COLOURS: Final[dict[Tone, str]] = {
    "ok": "--ok",
    "bad": "--bad",
    "warn": "--warn",
    "info": "--accent",
    "neutral": "--fg",
}

STATUS_TONES: Final[dict[str, Tone]] = {
    # verdicts of a verifier (``unverified``: the depositor recorded none)
    "pass": "ok",
    "fail": "bad",
    "unknown": "warn",
    "unverified": "warn",
    # signatures, proofs, checkpoints, graft receipts
    "verified": "ok",
    "not-verified": "bad",
    "byte-exact": "ok",
    "not-byte-exact": "bad",
    "mismatch": "bad",
    "registered-key": "ok",
    "unregistered-key": "warn",
    # tokens, users, keys
    "active": "ok",
    "revoked": "bad",
    "disabled": "bad",
    "expired": "warn",
    "you": "info",
    "this-session": "info",
    "server-admin": "info",
    # namespaces
    "public": "neutral",
    "private": "neutral",
    "role": "neutral",
    "hold": "warn",
    # comparisons
    "same": "ok",
    "differ": "neutral",
    # anything else shown as a badge: a ref, a tag, a count
    "label": "neutral",
}


def tone_of(status: str) -> Tone:
    """The tone of ``status``; a status missing from the map is a template bug, not a grey badge."""
    try:
        return STATUS_TONES[status]
    except KeyError:
        raise KeyError(f"status {status!r} is not in kvreg_registry.web.status.STATUS_TONES") from None


def verdict_status(verdict: object) -> str:
    """The status of a verifier's verdict: ``pass``, ``fail``, ``unknown``, or ``unverified`` (none)."""
    if verdict in ("pass", "fail"):
        return str(verdict)
    return "unknown" if verdict else "unverified"
