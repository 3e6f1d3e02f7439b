"""`make docs` (and so `make check`) fails on a broken link: the command the Makefile runs, run on
a one-page site that has one. (mkdocs 1.6 with --quiet drops its warnings before --strict counts
them and passes: this caught that.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def docs_command() -> str:
    """The recipe of the Makefile's `docs` target, without remaking its prerequisites."""
    venv = Path(sys.executable).parent.parent
    dry = subprocess.run(
        ["make", "-n", "-o", "install", "-o", f"{venv}/.kvreg-installed", f"VENV={venv}", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in dry.stdout.splitlines() if "mkdocs build" in line]
    assert len(lines) == 1, dry.stdout
    return lines[0]


def build(site: Path, page: str) -> subprocess.CompletedProcess[str]:
    (site / "docs").mkdir()
    (site / "docs" / "index.md").write_text(page, encoding="utf-8")
    (site / "mkdocs.yml").write_text("site_name: t\nnav:\n  - index.md\n", encoding="utf-8")
    return subprocess.run(["bash", "-c", docs_command()], cwd=site, capture_output=True, text=True)


def test_the_docs_target_fails_on_a_broken_link(tmp_path: Path) -> None:
    result = build(tmp_path, "# Home\n\n[gone](missing.md)\n")
    assert result.returncode != 0
    assert "missing.md" in result.stderr


def test_the_docs_target_passes_on_a_sound_page(tmp_path: Path) -> None:
    result = build(tmp_path, "# Home\n\nNothing broken.\n")
    assert result.returncode == 0, result.stderr
