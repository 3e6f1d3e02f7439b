"""Reading a registry's ``GET /metrics`` in the tests: samples by name and labels, and Prometheus's
own linter (``promtool check metrics``, from Debian's ``prometheus``, which ``make services``
installs; a test that needs it fails, never skips, when it is missing)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

HOW = "install Debian's prometheus (`make services` does: scripts/services.sh)"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape: ``(name, labels) -> value``."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


def value(text: str, name: str, **labels: str) -> float:
    """The value of one sample (0 when the scrape does not have it)."""
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def label_values(text: str, name: str, label: str) -> set[str]:
    return {dict(key)[label] for (n, key) in samples(text) if n == name and label in dict(key)}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: {HOW}", pytrace=False)
    return path


def promtool_check(text: str) -> None:
    """``promtool check metrics`` must pass the scrape: its format and Prometheus's naming rules."""
    done = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"promtool check metrics:\n{done.stdout}{done.stderr}"
