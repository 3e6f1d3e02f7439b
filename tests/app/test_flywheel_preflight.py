"""``kvreg.app.flywheel.preflight``: the check ``kvreg flywheel`` makes before the model loads."""

from __future__ import annotations

from pathlib import Path

from kvreg.app.flywheel.preflight import signer_trusted
from kvreg.core.keys import SigningKey
from kvreg.core.trust import WILDCARD, TrustPolicy
from kvreg.fileio.keyfiles import save_trust_policy
from kvreg.store.home import Home


def test_signer_trusted(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    key, other = SigningKey.generate(), SigningKey.generate()
    assert not signer_trusted(home, key.public_key, "flywheel")
    save_trust_policy(TrustPolicy({"flywheel": [key.public_key]}), home.trust_path)
    assert signer_trusted(home, key.public_key, "flywheel")
    assert not signer_trusted(home, other.public_key, "flywheel")
    assert not signer_trusted(home, key.public_key, "elsewhere")
    policy = TrustPolicy()
    policy.allow(WILDCARD, other.public_key)
    save_trust_policy(policy, home.trust_path)
    assert signer_trusted(home, other.public_key, "elsewhere")
