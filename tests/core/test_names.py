"""Ref names: valid spellings, and every traversal or look-alike refused."""

from __future__ import annotations

import dataclasses

import pytest

from kvreg.core.errors import InvalidNameError, UsageError
from kvreg.core.names import RefName, validate_name, validate_namespace


@pytest.mark.parametrize(
    ("text", "namespace", "name"),
    [
        ("aime25/p07", "aime25", "p07"),
        ("a/b", "a", "b"),
        ("0/0", "0", "0"),
        ("my_ns-1/Some.Name_v2-final", "my_ns-1", "Some.Name_v2-final"),
        ("n" * 63 + "/" + "N" * 128, "n" * 63, "N" * 128),
        ("ns/a.b.c", "ns", "a.b.c"),
    ],
)
def test_valid(text: str, namespace: str, name: str) -> None:
    ref = RefName.parse(text)
    assert (ref.namespace, ref.name) == (namespace, name)
    assert str(ref) == text
    assert RefName.parse(str(ref)) == ref


@pytest.mark.parametrize(
    "text",
    [
        "",
        "../x",
        "a/../../b",
        "a/b/c",
        "a\\b",
        "a/b\\c",
        "/abs",
        "/",
        "a/",
        "a/.",
        "a/..",
        "./a",
        "a/..b",
        "a/b..",
        "a/.hidden",
        "a/-x",
        "a/_x",
        "-a/b",
        "_a/b",
        "A/b",  # namespaces are lower case
        "a b/c",
        " a/b",
        "a/b ",
        "a/b\n",
        "a/b\x00",
        "a\x00/b",
        "a/b\t",
        "ab",
        "a//b",
        "a/b/",
        "a:/b",
        "a/b:c",
        "a/b%2fc",
        "a/b?c",
        "n" * 64 + "/b",
        "a/" + "N" * 129,
        "a/b\u2215c",  # division slash look-alike
        "a\uff0fb",  # fullwidth solidus
        "\u0430/b",  # Cyrillic a
        "a/\u0440",  # Cyrillic er
        "a/b\u200b",  # zero-width space
        "a/ı",  # dotless i
        "a/\uff0e\uff0e",  # fullwidth dots
        "é/x",
    ],
)
def test_invalid(text: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        RefName.parse(text)
    assert isinstance(info.value, UsageError)
    assert info.value.exit_code == 2
    assert info.value.message


def test_messages_are_helpful() -> None:
    with pytest.raises(InvalidNameError, match="exactly one '/'") as info:
        RefName.parse("a/b/c")
    assert "NAMESPACE/NAME" in (info.value.hint or "")
    with pytest.raises(InvalidNameError, match=r"'\.\.' is not allowed"):
        RefName.parse("a/x..y")
    with pytest.raises(InvalidNameError, match=r"not allowed: '\uff0f'"):
        validate_namespace("a\uff0fb")
    with pytest.raises(InvalidNameError, match="backslash"):
        RefName.parse("a\\b")
    with pytest.raises(InvalidNameError, match="whitespace"):
        RefName.parse(" a/b")


def test_constructor_validates_and_is_frozen() -> None:
    with pytest.raises(InvalidNameError):
        RefName("a", "..")
    with pytest.raises(InvalidNameError):
        RefName("A", "b")
    ref = RefName("ns", "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.name = "y"  # type: ignore[misc]
    assert {ref, RefName.parse("ns/x")} == {ref}


def test_validators_and_types() -> None:
    assert validate_namespace("aime25") == "aime25"
    assert validate_name("p07") == "p07"
    with pytest.raises(InvalidNameError):
        validate_name("")
    with pytest.raises(InvalidNameError):
        validate_namespace("")
    with pytest.raises(InvalidNameError):
        RefName.parse(None)  # type: ignore[arg-type]
