"""Fixtures of the browser suite: one seeded ``kvreg serve`` per session, Debian's chromium under Playwright.

- ``seeded``: a real registry (SQLite + a folder, on loopback) filled by real ``kvreg`` commands
  (``tests/browser/seed.py``), shared by every test; tests only read it, or sign in and out.
- ``browser``: chromium from ``/usr/bin/chromium`` (``$KVREG_CHROMIUM`` to use another), headless.
  When it is missing the tests FAIL, saying how to install it: a UI suite that skips passes
  without testing anything. ``make test`` installs it (``make browser``).
- ``context``/``page``: a fresh context (cookies, storage) per test, 1280x900; ``phone`` is a
  390x844 touch context. Every dialog (``alert``...) a page opens is recorded in ``page.dialogs``
  and dismissed; every uncaught page error in ``page.errors``.
- ``shot(page, name, full_page=True)``: a screenshot ``name.png`` (the whole page, or the
  window) in the run folder,
  ``$KVREG_SCREENSHOT_DIR`` or ``<repo>/.artifacts/screenshots`` (not committed;
  ``scripts/refresh-screenshots.sh`` copies a fresh set into docs/screenshots/).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.registry_server import running_registry

from .seed import Seeded, seed

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("KVREG_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# Playwright's waits: long enough for a loaded CI host, short enough that a missing element fails fast.
TIMEOUT_MS = 15_000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of this folder ``browser`` (``pytest -m "not browser"`` leaves them out)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.browser)


def screenshot_dir() -> Path:
    d = Path(os.environ.get("KVREG_SCREENSHOT_DIR") or REPO / ".artifacts" / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> Iterator[Seeded]:
    """The registry of ``seed.py``; its GSM8K chat artifact is of the real SmolLM2 (``smollm2``)."""
    from kvreg.engine.tiny import build_model_dir

    root = tmp_path_factory.mktemp("browser")
    model = build_model_dir(root / "models" / "llama", "llama", seed=0)
    with running_registry("sqlite-folder", root / "registry") as registry:
        yield seed(registry, root, model, real_model=smollm2)


@pytest.fixture
def server(seeded: Seeded) -> Seeded:
    """``seeded``, after checking that its server still runs."""
    proc = seeded.registry.proc
    if proc is not None and proc.poll() is not None:
        pytest.fail(f"kvreg serve died:\n{seeded.registry.log_tail()}", pytrace=False)
    return seeded


@pytest.fixture(scope="session")
def _playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        yield pw
    finally:
        pw.stop()


@pytest.fixture(scope="session")
def browser(_playwright: Any) -> Iterator[Any]:
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium. Install it with\n"
            "    sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive "
            "apt-get install -y --no-install-recommends chromium\n"
            "(`make test` does it, through `make browser`), or point $KVREG_CHROMIUM at a chromium.",
            pytrace=False,
        )
    b = _playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    try:
        yield b
    finally:
        b.close()


def _watch(page: Any) -> Any:
    """Record (and dismiss) every dialog and every uncaught error of ``page`` (once)."""
    if hasattr(page, "dialogs"):
        return page
    page.dialogs = []
    page.errors = []

    def on_dialog(dialog: Any) -> None:
        page.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    return page


def _context(browser: Any, seeded: Seeded, **options: Any) -> Any:
    ctx = browser.new_context(base_url=seeded.url, **options)
    ctx.set_default_timeout(TIMEOUT_MS)
    ctx.on("page", _watch)
    return ctx


@pytest.fixture
def context(browser: Any, server: Seeded) -> Iterator[Any]:
    ctx = _context(browser, server, viewport=DESKTOP)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: Any) -> Any:
    return _watch(context.new_page())


@pytest.fixture
def phone(browser: Any, server: Seeded) -> Iterator[Any]:
    ctx = _context(browser, server, viewport=PHONE, device_scale_factor=1, is_mobile=True, has_touch=True)
    try:
        yield _watch(ctx.new_page())
    finally:
        ctx.close()


@pytest.fixture(scope="session")
def shot() -> Callable[..., Path]:
    out = screenshot_dir()

    def take(page: Any, name: str, *, full_page: bool = True) -> Path:
        """``name.png``: the whole page, or with ``full_page=False`` what the window shows
        (the pictures of docs/web-ui.md: smaller files)."""
        path = out / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    return take
