"""The generated reference (scripts/docs_reference.py) names every command, route and error code,
and mkdocs.yml's nav lists every page it generates.

The names are taken from the code independently of how the pages are laid out: the click tree
walked here, the registry app's own route table, the error classes' ``code`` attributes.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from kvreg.core import errors
from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_every_command_has_a_heading_with_its_options(reference: ModuleType) -> None:
    pages = reference.cli_pages()
    headings = {m for text in pages.values() for m in re.findall(r"^#+ `([^`]+)`$", text, re.MULTILINE)}
    commands = set(reference.every_command())
    assert {
        "kvreg",
        "kvreg keys generate",
        "kvreg push",
        "kvreg-admin",
        "kvreg-admin token create",
    } <= commands
    assert commands - headings == set()
    # each command's options, with their help, are on its page
    serve = next(text for text in pages.values() if "# `kvreg serve`" in text)
    assert "* `--data DIR`: Data folder" in serve
    assert "* `--port <int range>`" in serve


def test_every_route_of_the_registry_is_on_the_http_page(reference: ModuleType) -> None:
    # The published OpenAPI document is the API's contract (tests/conformance checks the app
    # answers as it says); every operation in it has a section of its own on the page.
    page = reference.http_api_page()
    document = create_app(Settings()).openapi()
    routes = {f"{method.upper()} {path}" for path, ops in document["paths"].items() for method in ops}
    assert len(routes) > 30
    missing = {r for r in routes if f"### `{r}`" not in page}
    assert missing == set()
    assert "| `ns` | path | string | yes | a namespace |" in page
    assert "### RefIn" in page


def test_every_error_code_is_on_the_errors_page(reference: ModuleType) -> None:
    page = reference.errors_page()
    pending: list[type[errors.KvregError]] = [errors.KvregError]
    codes = set()
    while pending:
        cls = pending.pop()
        codes.add(cls.code)
        pending.extend(cls.__subclasses__())
    assert {"DIGEST_MISMATCH", "LEGAL_HOLD", "USAGE"} <= codes
    rows = set(re.findall(r"^\| (?:&nbsp;)*`([A-Z_]+)` \|", page, re.MULTILINE))
    assert codes - rows == set()
    assert "| &nbsp;&nbsp;&nbsp;&nbsp;`DIGEST_MISMATCH` | 3 integrity | 422 | Bytes hash to another" in page


def test_the_nav_lists_every_generated_page(reference: ModuleType) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def entries(node: object) -> set[str]:
        if isinstance(node, str):
            return {node}
        if isinstance(node, list):
            return set().union(*(entries(n) for n in node))
        if isinstance(node, dict):
            return set().union(*(entries(v) for v in node.values()))
        return set()

    nav = entries(config["nav"])
    generated = {f"{reference.CLI_DIR}/{name}" for name in reference.cli_pages()}
    generated |= {"reference/http-api.md", "reference/errors.md"}
    assert generated - nav == set()
