"""``kvreg.core`` and the registry package import no engine, HTTP or database library."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import kvreg.core

FORBIDDEN = ("torch", "transformers", "safetensors", "sqlalchemy", "httpx", "numpy")

_SCRIPT = """
import importlib, json, pkgutil, sys
import kvreg.core
names = ["kvreg.core"] + [
    "kvreg.core." + m.name for m in pkgutil.iter_modules(kvreg.core.__path__) if not m.name.startswith("_")
]
for name in names:
    importlib.import_module(name)
import kvreg_registry
forbidden = {forbidden!r}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in forbidden)
print(json.dumps({{"imported": names, "loaded": loaded}}))
"""


def test_core_and_registry_import_without_heavy_libraries() -> None:
    code = _SCRIPT.format(forbidden=FORBIDDEN)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    expected = {"kvreg.core." + m.name for m in pkgutil.iter_modules(kvreg.core.__path__)}
    for name in (
        "canonical",
        "merkle",
        "names",
        "blockkey",
        "manifest",
        "keys",
        "trust",
        "envelope",
        "digest",
    ):
        assert f"kvreg.core.{name}" in expected
    assert set(report["imported"]) >= {n for n in expected if not n.rsplit(".", 1)[1].startswith("_")}
    assert report["loaded"] == [], f"kvreg.core or kvreg_registry imported {report['loaded']}"


_APP_SCRIPT = """
import json, sys
import kvreg_registry.app, kvreg_registry.admin, kvreg.remote, kvreg.cli.main
app = kvreg_registry.app.create_app()
engine = ("torch", "transformers", "safetensors", "numpy")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in engine)))
"""


def test_registry_app_and_remote_client_never_import_the_engine() -> None:
    """docs/design.md, "Layers": the server imports kvreg.core, never torch; nor do client and CLI."""
    result = subprocess.run(
        [sys.executable, "-c", _APP_SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
