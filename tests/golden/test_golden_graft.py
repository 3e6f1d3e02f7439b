"""Golden cross-host data: a portable deposit made on another host grafts byte-exactly here.

``tests/golden/`` holds a tiny model and a ``--profile portable --dtype float32`` deposit
of it (objects, envelope, ref, trust policy, public key), made once on the host that
``host.json`` names (see README.md; ``make_golden.py`` regenerates them). Whatever x86-64
host with AVX2 runs the suite must graft it with ``--check`` byte-exactly and recompute
every stored chunk bit for bit: that is the portable profile's promise, checked against
bytes that this host did not write.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors
import torch
import transformers

from cli.helpers import kvreg

GOLDEN = Path(__file__).resolve().parent
HOST = json.loads((GOLDEN / "host.json").read_text(encoding="utf-8"))

pytestmark = pytest.mark.slow


def _skip_unless_same_libraries() -> None:
    installed = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
    }
    if installed != HOST["versions"]:
        pytest.skip(
            f"the golden deposit was made with {HOST['versions']}, this host has {installed}: "
            "the portable profile promises exactness only with the same library builds; "
            "regenerate it with tests/golden/make_golden.py"
        )


@pytest.fixture
def golden(tmp_path: Path) -> tuple[Path, Path]:
    """Private copies of the golden store (objects read-only, as kvreg writes them) and model."""
    home, model = tmp_path / "home", tmp_path / "model"
    shutil.copytree(GOLDEN / "home", home)
    shutil.copytree(GOLDEN / "model", model)
    for folder in ("objects", "envelopes"):
        for path in (home / folder).rglob("*"):
            if path.is_file():
                path.chmod(0o444)
    return home, model


def test_golden_portable_deposit_grafts_byte_exactly_on_this_host(golden: tuple[Path, Path]) -> None:
    _skip_unless_same_libraries()
    home, model = golden
    ref = HOST["ref"]
    assert kvreg(home, "fsck", "--json").json["ok"] is True

    grafted = kvreg(home, "graft", ref, "--model", model, "--check", "--max-new-tokens", "16", "--json").json
    assert grafted["manifest_digest"] == HOST["manifest_digest"]
    assert grafted["prefill_tokens"] == 0 and grafted["verified"] is True
    assert grafted["check"]["byte_exact"] is True
    assert grafted["check"]["sha256_equal_steps"] == grafted["check"]["steps"] == 16
    assert grafted["probe"]["kv_equal"] is True and grafted["probe"]["witness_equal"] is True

    recomputed = kvreg(home, "verify", ref, "--model", model, "--recompute", "--json").json
    assert recomputed["recompute"]["byte_exact"] is True
