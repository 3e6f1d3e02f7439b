"""Fixtures of the crash-consistency suite: one registry per backend that the tests may kill.

These registries are not the integration suite's shared ones: the tests here kill and
restart them (``rig.CrashRig``). They are started once per session, on first use, and
shared by the modules here; every test works in namespaces of its own and leaves the
registry consistent (it retries what it crashed). The depositor's store and the tiny model
are the integration suite's fixtures, imported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from integration.conftest import depositor, llama  # noqa: F401 (fixtures)
from integration.registry_server import BACKENDS, running_registry

from .rig import CrashRig


@pytest.fixture(scope="session")
def _rigs(
    tmp_path_factory: pytest.TempPathFactory,
    depositor: dict[str, Any],  # noqa: F811
) -> Iterator[dict[str, CrashRig]]:
    with ExitStack() as stack:

        class Lazy(dict[str, CrashRig]):
            def __missing__(self, backend: str) -> CrashRig:
                root = tmp_path_factory.mktemp(f"crash-{backend}")
                reg = stack.enter_context(running_registry(backend, root))
                rig = CrashRig(reg, depositor, root)
                stack.callback(rig.close)
                self[backend] = rig
                return rig

        yield Lazy()


@pytest.fixture(params=BACKENDS)
def rig(request: pytest.FixtureRequest, _rigs: dict[str, CrashRig]) -> CrashRig:
    return _rigs[request.param]


@pytest.fixture(scope="session")
def sqlite_rig(_rigs: dict[str, CrashRig]) -> CrashRig:
    """The SQLite + folder registry only: for the tests of client crashes, whose subject is the
    client's store (the registry's backend does not matter there)."""
    return _rigs["sqlite-folder"]
