"""The shifted (approximate) graft: correct rotation, honest labelling."""

from __future__ import annotations

import pytest
import torch

from kvreg.core.errors import UsageError
from kvreg.core.keys import SigningKey
from kvreg.core.names import RefName
from kvreg.engine import deposit, shifted
from kvreg.engine.runtime import LoadedModel
from kvreg.store.artifacts import open_artifact, read_tokens
from kvreg.store.home import Home

from .conftest import TEXT


def test_rotations_compose(llama: LoadedModel) -> None:
    x = torch.randn(2, 5, llama.info["head_dim"], generator=torch.Generator().manual_seed(0))
    c7, s7 = shifted.rotation(llama, "full_attention", 7, x)
    c3, s3 = shifted.rotation(llama, "full_attention", 3, x)
    c10, s10 = shifted.rotation(llama, "full_attention", 10, x)
    twice = shifted.shift_keys(shifted.shift_keys(x, c7, s7), c3, s3)
    once = shifted.shift_keys(x, c10, s10)
    assert (twice - once).abs().max().item() < 1e-5
    c0, s0 = shifted.rotation(llama, "full_attention", 0, x)
    assert torch.equal(shifted.shift_keys(x, c0, s0), x)


def test_shifted_keys_equal_keys_computed_at_the_new_position(llama: LoadedModel) -> None:
    """Keys of the same tokens, computed at positions p and p+Δ, differ by the rotation R(Δ)."""
    from kvreg.engine.runtime import new_cache, prefill

    tokens = llama.encode(TEXT, first=True)[:16]
    at_zero = new_cache(llama)
    prefill(llama, at_zero, tokens, 0)
    moved = new_cache(llama)
    # layer 0 keys depend only on each token's own embedding and its position
    prefill(llama, moved, [tokens[0]] * 16 + tokens, 0)
    k0 = at_zero.layers[0].keys[0]
    k16 = moved.layers[0].keys[0, :, 16:, :]
    cos, sin = shifted.rotation(llama, "full_attention", 16, k0)
    assert (shifted.shift_keys(k0, cos, sin) - k16).abs().max().item() < 1e-4


@pytest.mark.parametrize("model", ["llama", "gemma3"])
def test_shifted_graft_reports_an_approximate_residual(
    model: str, home: Home, key: SigningKey, request: pytest.FixtureRequest
) -> None:
    lm: LoadedModel = request.getfixturevalue(model)
    deposit.deposit(lm, home, text=TEXT, ref=RefName("ns", "a"), key=key)
    artifact = open_artifact(home, "ns/a")
    tokens = read_tokens(home, artifact.manifest)
    prefix = lm.encode("An unrelated preamble before the solution.", first=True)
    report = shifted.shifted_graft(lm, home, artifact.manifest, tokens, prefix, steps=8).to_dict()
    assert report["mode"] == "shifted-approximate" and report["exact"] is False
    assert "byte_exact" not in report
    assert report["steps"] == 8 and report["offset"] == len(prefix)
    assert 0.0 < report["max_kl"] < 1.0 and 0.0 <= report["argmax_agreement"] <= 1.0
    with pytest.raises(UsageError):
        shifted.shifted_graft(lm, home, artifact.manifest, tokens, [], steps=2)
