"""Fixtures for engine tests: tiny seeded model directories and an isolated store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvreg.app.demo.texts import QUESTION, SOLUTION
from kvreg.core.keys import SigningKey
from kvreg.core.trust import TrustPolicy
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import LoadedModel, load_model
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.home import Home

TEXT = QUESTION + SOLUTION


@pytest.fixture(scope="session")
def llama_dir(tiny_models: Any) -> Path:
    return Path(tiny_models["llama"])


@pytest.fixture(scope="session")
def gemma3_dir(tiny_models: Any) -> Path:
    return Path(tiny_models["gemma3"])


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


@pytest.fixture
def key(home: Home) -> SigningKey:
    signing = SigningKey.generate()
    policy = TrustPolicy()
    policy.allow("*", signing.public_key)
    save_trust_policy(policy, home.trust_path)
    return signing


@pytest.fixture(scope="session")
def llama(llama_dir: Path) -> LoadedModel:
    return load_model(llama_dir, EngineSettings(block_size=16))


@pytest.fixture(scope="session")
def gemma3(gemma3_dir: Path) -> LoadedModel:
    return load_model(gemma3_dir, EngineSettings(block_size=16))
