"""Fixtures of the integration suite: real registries, a depositor's store, client homes.

Every test that takes ``registry`` runs twice: against SQLite + a folder and against
PostgreSQL + SeaweedFS (S3), each a real ``kvreg serve`` on loopback. The servers
are started once per session and shared; each test works in namespaces of its
own, so tests never see each other's refs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from cli.helpers import BLOCK, EXTENSION, TEXT, kvreg

from .registry_server import BACKENDS, Registry, running_registry

LIBRARY_BLOCK = "8"  # the flywheel library's block size (``library``)
#: The text of the depositor's ``src/other``, which shares no block with the others.
OTHER_TEXT = (
    "A compliance ruling: the transfer is permitted because the counterparty is registered "
    "and the amount is below the reporting threshold of 10,000 units. Reviewed and approved."
)


@pytest.fixture(autouse=True)
def no_user_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The developer's own Docker and Podman credentials never reach these tests (the OCI
    client reads them for any registry that asks)."""
    empty = tmp_path / "docker-config"
    empty.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(empty))
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def _registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Registry]]:
    started: dict[str, Registry] = {}
    with ExitStack() as stack:

        class Lazy(dict[str, Registry]):
            def __missing__(self, backend: str) -> Registry:
                root = tmp_path_factory.mktemp(f"registry-{backend}")
                self[backend] = stack.enter_context(running_registry(backend, root))
                return self[backend]

        lazy = Lazy()
        yield lazy
        started.update(lazy)


@pytest.fixture(params=BACKENDS)
def registry(request: pytest.FixtureRequest, _registries: dict[str, Registry]) -> Registry:
    reg = _registries[request.param]
    if reg.proc is not None and reg.proc.poll() is not None:
        pytest.fail(f"the {reg.backend} registry died:\n{reg.log_tail()}")
    return reg


@pytest.fixture(scope="session")
def llama(tiny_models: Any) -> Path:
    """The session's seed-0 tiny llama (tests/conftest.py), shared with the other suites."""
    return Path(tiny_models["llama"])


@pytest.fixture(scope="session")
def depositor(tmp_path_factory: pytest.TempPathFactory, llama: Path) -> dict[str, Any]:
    """A store with a signing key and three llama artifacts (blocks of 16 tokens):

    ``src/p07`` (the demo's question and solution), ``src/p07x`` (the same text and
    more: it shares every full block of ``src/p07``) and ``src/other`` (unrelated).
    Tests must not change it; they push from it and pull into homes of their own.
    """
    root = tmp_path_factory.mktemp("depositor")
    home = root / "home"
    kvreg(home, "keys", "generate")
    public_key = kvreg(home, "keys", "export").out.strip()
    texts = {
        "p07": TEXT,
        "p07x": TEXT + EXTENSION,
        "other": OTHER_TEXT,
    }
    manifests = {}
    for name, text in texts.items():
        path = root / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        kvreg(
            home,
            "deposit",
            llama,
            "--text-file",
            path,
            "--ref",
            f"src/{name}",
            "--block-size",
            BLOCK,
            "--verifier",
            "checker",
            "--verdict",
            "pass",
            "--evidence",
            '{"answer": "738"}',
            "--title",
            name,
        )
        manifests[name] = read_manifest(home, f"src/{name}")
    return {"home": home, "public_key": public_key, "manifests": manifests}


def read_manifest(home: Path, ref: str) -> Any:
    """The ``Manifest`` a local ref points at."""
    from kvreg.core.manifest import Manifest
    from kvreg.core.names import RefName
    from kvreg.store.home import Home

    h = Home(home)
    return Manifest.from_bytes(h.objects.read(h.refs.get(RefName.parse(ref))))


def object_sizes(home: Path, manifest: Any) -> dict[str, int]:
    """Every object an artifact consists of (chunks, tokens, text, witness...) and its size."""
    from kvreg.store.home import Home

    h = Home(home)
    return {str(d): h.objects.size(d) for d in manifest.object_digests()}


def staged_files(staging: Path, sizes: dict[str, int]) -> tuple[list[Path], list[Path]]:
    """The objects an interrupted pull left in its staging folder: ``(complete, partial)``.

    A pull renames what it verified only once its downloads are done (``Staging.settle``), so
    after a kill a whole object is either ``<hex>`` or a ``<hex>.incomplete`` of its full size;
    every complete one must hash to its name."""
    files = [p for p in staging.iterdir() if re.fullmatch("[0-9a-f]{64}([.]incomplete)?", p.name)]
    complete = [p for p in files if p.stat().st_size == sizes[f"sha256:{p.name[:64]}"]]
    for p in complete:
        assert hashlib.sha256(p.read_bytes()).hexdigest() == p.name[:64], f"{p.name} is not its object"
    return complete, [p for p in files if p not in complete]


@pytest.fixture
def make_home(tmp_path: Path):  # type: ignore[no-untyped-def]
    """``make_home(registry, token, trust=None)``: a client store with ``origin`` set and logged in."""
    counter = iter(range(1000))

    def make(registry: Registry, token: str | None, *, trust: dict[str, str] | None = None) -> Path:
        home = tmp_path / f"client{next(counter)}"
        kvreg(home, "remote", "add", "origin", registry.url)
        if token is not None:
            kvreg(home, "login", "origin", "--token", token)
        for ns, key in (trust or {}).items():
            kvreg(home, "trust", "add", ns, key)
        return home

    return make


@pytest.fixture(scope="session")
def library(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with three verified flywheel artifacts (exact-solver entries), blocks of ``LIBRARY_BLOCK``.

    Built once per session for the suites that publish it (test_ask_remote.py, test_serve_remote.py,
    test_adversarial.py); tests must not change it: ``_publish`` copies it into a home of its own.
    """
    from kvreg.app.flywheel.library import deposit_entries, solver_entry
    from kvreg.app.keyring import load_signing_key
    from kvreg.engine.flywheel.exam import hard_exam
    from kvreg.engine.flywheel.model import model_path
    from kvreg.engine.pinned import EngineSettings
    from kvreg.engine.runtime import load_model
    from kvreg.store.home import Home

    root = tmp_path_factory.mktemp("flywheel-depositor")
    kvreg(root / "home", "keys", "generate")
    home = Home(root / "home")
    key = load_signing_key(home, "default")
    lm = load_model(model_path(), EngineSettings(block_size=int(LIBRARY_BLOCK)))
    problems = hard_exam()[:3]
    results = deposit_entries(lm, home, key, [solver_entry(p) for p in problems], namespace="src")
    return {
        "home": root / "home",
        "public_key": key.public_key.to_text(),
        "problems": problems,
        "manifests": [r.manifest for r in results],
    }
