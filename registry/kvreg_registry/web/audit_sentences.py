"""Each audit entry as a plain sentence: "root placed a legal hold on aime25/other: litigation hold".

:func:`sentence` reads the fields docs/audit.md (section 2) lists for each entry type and says
what happened in words; artifacts are named by their titles where ``names`` (digest -> title,
the entry's own namespace only) knows them. An entry whose fields are not what its type holds
(an altered or an unknown entry) gets the type's words without them, never an exception:
the entry's page shows its raw JSON. :func:`links` gives the ref and the artifact an entry is
about, for the list's links. Nothing here queries or decides who may read what.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _subject(doc: dict[str, Any]) -> str | None:
    subjects = doc.get("subjects")
    first = subjects[0] if isinstance(subjects, list) and subjects else None
    return _s(first)


def _name(digest: str | None, names: Mapping[str, str]) -> str:
    if digest is None:
        return "an artifact"
    title = names.get(digest)
    return f"“{title}”" if title else (digest[:19] + "…" if _DIGEST.fullmatch(digest) else digest)


def _ref(doc: dict[str, Any]) -> str | None:
    return _s(_d(doc.get("details")).get("ref")) or _s(_d(doc.get("new")).get("ref"))


def sentence(
    type_: str, actor: str | None, namespace: str | None, doc: dict[str, Any] | None, names: Mapping[str, str]
) -> str:
    """What the entry says happened, in one sentence (without a final full stop)."""
    if doc is None:
        return "The stored entry is not a JSON object: open it to see its bytes"
    who = actor or "someone"
    ns = namespace or "the registry"
    old, new, details = doc.get("old"), doc.get("new"), _d(doc.get("details"))
    nd, od = _d(new), _d(old)
    ref = _ref(doc)
    target = ref if ref and "/" in ref else (f"{ns}/{ref}" if ref else ns)
    subject = _subject(doc)
    reason = _s(details.get("reason")) or _s(nd.get("reason"))
    match type_:
        case "namespace.created":
            public = nd.get("public")
            kind = " (public)" if public is True else (" (private)" if public is False else "")
            return f"{who} created the namespace {ns}{kind}"
        case "namespace.visibility":
            made = "public" if new is True else "private" if new is False else "public or private"
            return f"{who} made {ns} {made}"
        case "namespace.description":
            return f"{who} changed the description of {ns}"
        case "user.created":
            user = _s(nd.get("user")) or "a user"
            return f"{who} created the user {user}" + (", a server admin" if nd.get("admin") else "")
        case "user.disabled":
            return f"{who} disabled the user {_s(nd.get('user')) or _s(new) or 'a user'}"
        case "user.enabled":
            return f"{who} enabled the user {_s(nd.get('user')) or _s(new) or 'a user'} again"
        case "token.created":
            label = _s(nd.get("label"))
            return f"{who} created an API token for {_s(nd.get('user')) or 'a user'}" + (
                f" ({label})" if label else ""
            )
        case "token.revoked":
            return f"{who} revoked API token {_s(old) or od.get('id') or old or ''}".rstrip()
        case "role.set":
            was = _s(old) or _s(od.get("role"))
            return (
                f"{who} gave {_s(nd.get('user')) or 'a user'} the {_s(nd.get('role')) or 'a'} role in {ns}"
                + (f" (was {was})" if was else "")
            )
        case "role.removed":
            return f"{who} took away the role of {_s(old) or _s(od.get('user')) or 'a user'} in {ns}"
        case "key.registered":
            return f"{who} registered the signing key {_name(subject, {})} for {ns}"
        case "key.revoked":
            return f"{who} revoked the signing key {_name(subject, {})} of {ns}"
        case "upload.opened":
            return f"{who} opened an upload to {ns}"
        case "upload.closed":
            return f"{who} closed an upload to {ns}"
        case "object.held":
            return f"{ns} now holds the object {_name(subject, {})}"
        case "envelope.stored":
            return f"{who} stored {_name(subject, names)} in {ns}"
        case "envelope.deleted":
            why = f" ({reason})" if reason else ""
            return f"{who} deleted {_name(subject or _s(od.get('digest')), names)} from {ns}{why}"
        case "ref.created":
            return f"{who} created the ref {target} for {_name(_s(new) or subject, names)}"
        case "tag.created":
            return f"{who} tagged {_name(_s(new) or subject, names)} as {target}"
        case "ref.moved":
            return f"{who} moved {target} from {_name(_s(old), names)} to {_name(_s(new), names)}"
        case "ref.deleted":
            return f"{who} deleted the ref {target} (it named {_name(_s(old), names)})"
        case "gc.run":
            return f"{who} ran garbage collection"
        case "retention.set":
            keep = [f"the {nd['keep_versions']} newest"] if nd.get("keep_versions") else []
            keep += [f"{nd['keep_days']} days"] if nd.get("keep_days") else []
            return f"{who} set the retention of {ns}" + (f": keep {' and '.join(keep)}" if keep else "")
        case "retention.cleared":
            return f"{who} cleared the retention policy of {ns}"
        case "hold.placed":
            on = f"{ns}/{_s(nd.get('ref'))}" if _s(nd.get("ref")) else f"the whole of {ns}"
            return f"{who} placed a legal hold on {on}" + (f": {reason}" if reason else "")
        case "hold.lifted":
            on = f"{ns}/{_s(od.get('ref'))}" if _s(od.get("ref")) else ns
            return f"{who} lifted the legal hold on {on}" + (f": {reason}" if reason else "")
        case "envelope.delete.refused" | "ref.delete.refused" | "ref.move.refused":
            what = {
                "envelope.delete.refused": "delete",
                "ref.delete.refused": "delete",
                "ref.move.refused": "move",
            }
            thing = target if ref else _name(subject, names)
            return f"a legal hold stopped {who} from trying to {what} {thing}"
        case "graft.receipt":
            check = _d(nd.get("check"))
            host = _s(nd.get("host"))
            result = (
                "byte-exact"
                if check.get("byte_exact") is True
                else ("NOT byte-exact" if check.get("byte_exact") is False else "no logits compared")
            )
            by = f" on {host}" if host else ""
            return f"{who} grafted {_name(subject, names)}{by}: {result}"
    return f"{who}: {type_} in {ns}"


def links(namespace: str | None, doc: dict[str, Any] | None) -> dict[str, str]:
    """The pages an entry is about: ``{"ref": url, "artifact": url}`` (either may be missing)."""
    out: dict[str, str] = {}
    if not namespace or doc is None:
        return out
    ref = _ref(doc)
    if ref:
        name = ref.split("/", 1)[1] if ref.startswith(f"{namespace}/") else ref
        if "/" not in name:
            out["ref"] = f"/ns/{namespace}/refs/{name}"
    subject = _subject(doc)
    new = doc.get("new")
    digest = _s(new) if _s(new) and _DIGEST.fullmatch(str(new)) else subject
    if digest and _DIGEST.fullmatch(digest) and not doc.get("type", "").startswith(("object.", "key.")):
        out["artifact"] = f"/ns/{namespace}/artifacts/{digest}"
    return out
