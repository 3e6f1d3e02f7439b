"""The use cases called in process on a tiny model: deposit, graft (with its check), verify
(with a recomputation), route and ask — no subprocess, no terminal; reports, not output."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.app import keyring
from kvreg.app.ask import AskRequest, answer
from kvreg.app.deposit import DepositRequest, deposit
from kvreg.app.engine_options import EngineOptions
from kvreg.app.graft import GraftRequest, graft
from kvreg.app.router import RouteRequest, route_prompt
from kvreg.app.verify import VerifyRequest, verify
from kvreg.core.errors import ConfigError, FingerprintMismatchError, KeyFileError, UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.fileio.keyfiles import save_signing_key
from kvreg.store.home import Home

from .conftest import TEXT

REF = RefName.parse("tests/tiny")
BLOCK = EngineOptions(block_size=16)


@pytest.fixture
def deposited(home: Home, key: SigningKey, llama_dir: Path) -> Home:
    save_signing_key(key, keyring.key_path(home, keyring.DEFAULT_KEY_NAME))
    report = deposit(home, DepositRequest(model=llama_dir, ref=REF, text=TEXT, engine=BLOCK, pin=True))
    assert report.pinned and report.result.manifest.token_count > 16
    data = report.to_dict()
    assert data["ref"] == str(REF) and data["signer_keyid"] == key.public_key.keyid
    return home


def test_engine_options_over_a_recorded_config() -> None:
    recorded = {
        "dtype": "float32",
        "attn_implementation": "sdpa",
        "threads": 2,
        "device": "cpu",
        "profile": "native",
        "block_size": 16,
    }
    assert EngineOptions(threads=3).over_recorded(recorded)["threads"] == 3
    assert EngineOptions().for_new() == {}
    with pytest.raises(ConfigError, match="block size cannot change"):
        EngineOptions(block_size=64).over_recorded(recorded)


def test_deposit_needs_the_signing_key(home: Home, llama_dir: Path) -> None:
    with pytest.raises(KeyFileError):
        deposit(home, DepositRequest(model=llama_dir, ref=REF, text=TEXT, engine=BLOCK))


def test_graft_checks_byte_exact_and_verify_recomputes(deposited: Home, llama_dir: Path) -> None:
    report = graft(deposited, GraftRequest(ref=str(REF), model=llama_dir, check=True, max_new_tokens=4))
    assert report.error is None
    assert report.check is not None and report.check["byte_exact"]
    assert report.decoded_tokens == 4 and report.verified and report.whole_artifact
    assert "receipt" not in report.to_dict()  # no remote configured, none asked for

    checked = verify(deposited, VerifyRequest(ref=str(REF), model=llama_dir, recompute=True))
    assert checked.ok and checked.error is None and checked.compatible
    assert checked.recompute is not None and checked.recompute["byte_exact"]
    with pytest.raises(UsageError):
        verify(deposited, VerifyRequest(ref=str(REF), recompute=True))


def test_graft_under_another_config_is_refused(deposited: Home, llama_dir: Path) -> None:
    request = GraftRequest(ref=str(REF), model=llama_dir, engine=EngineOptions(dtype="bfloat16"))
    with pytest.raises(FingerprintMismatchError):
        graft(deposited, request)


def test_route_and_ask_find_the_deposit(deposited: Home, llama_dir: Path) -> None:
    prompt = TEXT + " And then?"
    routed = route_prompt(
        deposited, RouteRequest(model=llama_dir, prompt_text=prompt, reindex=True, engine=BLOCK)
    )
    data = routed.to_dict()
    assert data["reindexed"]["manifests"] == 1
    assert not data["fallback"] and data["artifact"]["ref"] == str(REF)

    asked = answer(
        deposited,
        AskRequest(model=llama_dir, prompt_text=prompt, mode="prefix", max_new_tokens=3, engine=BLOCK),
    )
    assert asked.result.used_mode == "prefix" and asked.result.grafted_tokens > 0
    assert asked.to_dict()["completion"] == asked.completion
    with pytest.raises(UsageError):
        answer(deposited, AskRequest(model=llama_dir, prompt_text=prompt, namespaces=("tests",)))


def test_a_library_process_is_never_re_executed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch is loaded already (the fixtures imported it): outside the kvreg command a missing
    profile environment is a ConfigError naming the variables, not an execve of this process."""
    from kvreg.app import numerics
    from kvreg.engine.profiles import PORTABLE_ENV

    monkeypatch.setattr(numerics._Process, "may_reexec", False)
    for name in PORTABLE_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="torch latches at import") as raised:
        numerics.prepare_numerics("portable", "cpu")
    assert "ATEN_CPU_CAPABILITY" in str(raised.value.hint)
