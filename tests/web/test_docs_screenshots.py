"""docs/web-ui.md shows the screenshots tests/browser/test_every_page.py takes
(``scripts/refresh-screenshots.sh`` copies them): every picture it names is there, every
picture there is named, and they stay small."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
MAX_BYTES = 400_000


def test_every_screenshot_of_the_web_ui_doc_exists_and_is_small() -> None:
    text = (DOCS / "web-ui.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\]\(screenshots/([a-z0-9-]+\.png)\)", text))
    present = {p.name for p in (DOCS / "screenshots").glob("*.png")}
    assert named and named == present, (sorted(named - present), sorted(present - named))
    shots = (REPO / "tests" / "browser" / "test_every_page.py").read_text(encoding="utf-8")
    for name in named:
        assert f'"{name[:-4]}"' in shots, f"{name} is not taken by test_every_page.py"
    for name in present:
        size = (DOCS / "screenshots" / name).stat().st_size
        assert size <= MAX_BYTES, f"{name}: {size} bytes"
