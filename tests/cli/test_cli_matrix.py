"""The acceptance matrix: deposit in one process, graft and check in others, byte-exact.

Five architectures (Gemma2 with eager attention, Gemma3 with sliding-window
layers) in float32 and bfloat16, each in its own store: the whole artifact
grafted and 32 decode steps compared with a fresh computation, then a graft at a
block boundary followed by a new suffix.

The ``matrix`` fixture runs the chains of the selected combinations (keys, deposit,
graft, graft) once, one after the other, with the command in the test process
(``helpers.kvreg``: no torch import per command, so running them side by side in
subprocesses no longer pays); the tests then assert on their outputs one by one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import BLOCK, REF, Run, kvreg

ARCHS = ("llama", "qwen2", "gemma2", "gemma3", "gpt_neox")
DTYPES = ("float32", "bfloat16")
TEST_NAME = "test_deposit_then_graft_is_byte_exact"


def _chain(home: Path, model: Path, texts: dict[str, Path], arch: str, dtype: str) -> dict[str, Run]:
    runs: dict[str, Run] = {"keys": kvreg(home, "keys", "generate", expect=None)}
    attn = ["--attn", "eager"] if arch == "gemma2" else []
    runs["deposit"] = kvreg(
        home,
        "deposit",
        model,
        "--text-file",
        texts["text"],
        "--ref",
        REF,
        "--block-size",
        BLOCK,
        "--dtype",
        dtype,
        *attn,
        "--json",
        expect=None,
    )
    if runs["deposit"].rc != 0:
        return runs
    runs["whole"] = kvreg(
        home, "graft", REF, "--model", model, "--check", "--max-new-tokens", "32", "--json", expect=None
    )
    runs["boundary"] = kvreg(
        home,
        "graft",
        REF,
        "--model",
        model,
        "--append-file",
        texts["suffix"],
        "--blocks",
        "2",
        "--check",
        "--json",
        expect=None,
    )
    return runs


@pytest.fixture(scope="module")
def matrix(request, tmp_path_factory, models, texts) -> dict[tuple[str, str], dict[str, Run]]:
    wanted = sorted(
        {
            (item.callspec.params["arch"], item.callspec.params["dtype"])
            for item in request.session.items
            if getattr(item, "originalname", None) == TEST_NAME and hasattr(item, "callspec")
        }
    )
    root = tmp_path_factory.mktemp("matrix")
    return {
        (arch, dtype): _chain(root / f"{arch}-{dtype}", models[arch], texts, arch, dtype)
        for arch, dtype in wanted
    }


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_deposit_then_graft_is_byte_exact(matrix, arch, dtype):
    runs = matrix[(arch, dtype)]
    assert runs["keys"].rc == 0, str(runs["keys"])
    assert runs["deposit"].rc == 0, str(runs["deposit"])
    dep = runs["deposit"].json
    assert dep["ref"] == REF
    assert dep["chunk_count"] > 3
    assert dep["token_count"] > 3 * int(BLOCK)
    assert dep["bytes_new"] == dep["bytes_written"]

    assert runs["whole"].rc == 0, str(runs["whole"])
    whole = runs["whole"].json
    assert whole["manifest_digest"] == dep["manifest_digest"]
    assert whole["graft_tokens"] == dep["token_count"]
    assert whole["prefill_tokens"] == 0
    assert whole["decoded_tokens"] == 32
    assert whole["verified"] is True
    assert whole["probe"]["kv_equal"] is True
    assert whole["probe"]["witness_equal"] is True
    check = whole["check"]
    assert check["byte_exact"] is True
    assert check["steps"] == 32
    assert check["sha256_equal_steps"] == 32
    assert check["max_kl"] == 0.0
    assert check["argmax_agreement"] == 1.0

    assert runs["boundary"].rc == 0, str(runs["boundary"])
    boundary = runs["boundary"].json
    assert boundary["graft_tokens"] == 2 * int(BLOCK)
    assert boundary["chunks_read"] == 2
    assert boundary["prefill_tokens"] > dep["token_count"] - 2 * int(BLOCK)
    assert boundary["check"]["byte_exact"] is True
    assert boundary["check"]["sha256_equal_steps"] == boundary["check"]["steps"] == 32
