"""``WWW-Authenticate`` challenges of OCI registries, and the scopes of the Docker token flow.

A registry says how it wants to be authenticated in the ``WWW-Authenticate`` header
of a ``401`` (RFC 7235): ``Basic realm="..."`` (send the user name and password with
every request) or ``Bearer realm="...",service="...",scope="..."`` (the Docker
registry token specification: ask the token service at ``realm`` for a token
covering ``service`` and the scopes a request needs). Scopes are
``repository:<name>:<actions>`` (``pull``, ``pull,push``) or
``registry:catalog:*``.

This module parses; it sends nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["CATALOG_SCOPE", "Challenge", "parse_challenge", "pull_scope", "push_scope"]

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?')
#: The scope of ``GET /v2/_catalog``.
CATALOG_SCOPE = "registry:catalog:*"


@dataclass(frozen=True, slots=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` challenge: ``scheme`` (lower case) and its parameters."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str | None:
        return self.params.get("realm")

    @property
    def service(self) -> str | None:
        return self.params.get("service")

    def same_authority(self, other: Challenge | None) -> bool:
        """Whether ``other`` asks for the same scheme from the same token service."""
        return (
            other is not None
            and other.scheme == self.scheme
            and (self.scheme != "bearer" or (other.realm, other.service) == (self.realm, self.service))
        )


def parse_challenge(header: str | None) -> Challenge | None:
    """The first challenge of a ``WWW-Authenticate`` value (``Basic`` or ``Bearer``), or None."""
    if not header:
        return None
    text = header.strip()
    scheme, _, rest = text.partition(" ")
    scheme = scheme.lower()
    if scheme not in ("basic", "bearer"):
        return None
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None or m.end() == pos:
            break
        value = m.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params.setdefault(m.group(1).lower(), value)
        pos = m.end()
    return Challenge(scheme, params)


def pull_scope(repository: str) -> str:
    return f"repository:{repository}:pull"


def push_scope(repository: str) -> str:
    return f"repository:{repository}:pull,push"
