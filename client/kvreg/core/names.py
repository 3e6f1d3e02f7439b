"""Ref names: ``namespace/name``, validated so that they are safe as path parts.

A ref name is exactly one namespace and one name joined by one ``/``
(``aime25/p07``). Namespaces are ``[a-z0-9][a-z0-9_-]{0,62}``; names are
``[A-Za-z0-9][A-Za-z0-9._-]{0,127}`` and never contain ``..``. Only ASCII is
allowed, so Unicode look-alikes (fullwidth solidus, dotless i, ...) are refused,
and neither part can be ``.``, ``..``, empty, absolute, or hold a backslash, a NUL,
whitespace or another separator. The store and the registry may therefore use
the parts as file or URL path segments.

This module only checks spelling. It does not know whether a ref exists, who may
write it, or whether it is a tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvreg.core.errors import InvalidNameError

__all__ = ["NAMESPACE_PATTERN", "NAME_PATTERN", "RefName", "validate_name", "validate_namespace"]

NAMESPACE_PATTERN = r"[a-z0-9][a-z0-9_-]{0,62}"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN, re.ASCII)
_NAME_RE = re.compile(NAME_PATTERN, re.ASCII)

_NAMESPACE_HINT = (
    "a namespace is 1-63 characters: lowercase ASCII letters, digits, '_' and '-', "
    "starting with a letter or digit"
)
_NAME_HINT = (
    "a name is 1-128 characters: ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, "
    "with no '..'"
)


def _describe_bad_chars(s: str, allowed: re.Pattern[str]) -> str:
    bad = sorted({c for c in s if allowed.fullmatch(c) is None})
    if not bad:
        return ""
    shown = ", ".join(repr(c) if c.isprintable() else f"U+{ord(c):04X}" for c in bad[:5])
    return f" (not allowed: {shown})"


_NAMESPACE_CHAR = re.compile(r"[a-z0-9_-]", re.ASCII)
_NAME_CHAR = re.compile(r"[A-Za-z0-9._-]", re.ASCII)


def validate_namespace(namespace: str) -> str:
    """Return ``namespace`` unchanged if it is a valid namespace, else raise ``InvalidNameError``."""
    if not isinstance(namespace, str):
        raise InvalidNameError(f"namespace must be a string, not {type(namespace).__name__}")
    if _NAMESPACE_RE.fullmatch(namespace) is None:
        raise InvalidNameError(
            f"invalid namespace {namespace!r}{_describe_bad_chars(namespace, _NAMESPACE_CHAR)}",
            hint=_NAMESPACE_HINT,
        )
    return namespace


def validate_name(name: str) -> str:
    """Return ``name`` unchanged if it is a valid name (the part after ``/``), else raise."""
    if not isinstance(name, str):
        raise InvalidNameError(f"name must be a string, not {type(name).__name__}")
    if ".." in name:
        raise InvalidNameError(f"invalid name {name!r}: '..' is not allowed", hint=_NAME_HINT)
    if _NAME_RE.fullmatch(name) is None:
        raise InvalidNameError(
            f"invalid name {name!r}{_describe_bad_chars(name, _NAME_CHAR)}",
            hint=_NAME_HINT,
        )
    return name


@dataclass(frozen=True, order=True, slots=True)
class RefName:
    """A validated ``namespace/name``. Constructing one with bad parts raises."""

    namespace: str
    name: str

    def __post_init__(self) -> None:
        validate_namespace(self.namespace)
        validate_name(self.name)

    @classmethod
    def parse(cls, s: str) -> RefName:
        """Parse ``namespace/name``; raise ``InvalidNameError`` with the reason."""
        if not isinstance(s, str):
            raise InvalidNameError(f"ref name must be a string, not {type(s).__name__}")
        if s == "":
            raise InvalidNameError("empty ref name", hint="write it as NAMESPACE/NAME, e.g. aime25/p07")
        if s != s.strip():
            raise InvalidNameError(f"ref name {s!r} has leading or trailing whitespace")
        if "\x00" in s:
            raise InvalidNameError(f"ref name {s!r} contains a NUL character")
        if "\\" in s:
            raise InvalidNameError(
                f"ref name {s!r} contains a backslash", hint="the only separator is one '/'"
            )
        slashes = s.count("/")
        if slashes != 1:
            raise InvalidNameError(
                f"ref name {s!r} must contain exactly one '/', found {slashes}",
                hint="write it as NAMESPACE/NAME, e.g. aime25/p07",
            )
        namespace, name = s.split("/")
        if namespace == "":
            raise InvalidNameError(f"ref name {s!r} has an empty namespace (absolute paths are not names)")
        if name == "":
            raise InvalidNameError(f"ref name {s!r} has an empty name")
        return cls(validate_namespace(namespace), validate_name(name))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
