"""What ``kvreg flywheel`` checks before it loads the engine: whether the library's signer is trusted.

Reads the store's trust policy; imports no engine module (no torch), so the CLI
can warn before the model loads. It does not change the policy.
"""

from __future__ import annotations

from kvreg.core.keys import PublicKey
from kvreg.fileio.keyfiles import load_trust_policy
from kvreg.store.home import Home


def signer_trusted(home: Home, key: PublicKey, namespace: str) -> bool:
    """Whether the store's trust policy accepts ``key`` for ``namespace`` (else the second exam
    cannot graft the library)."""
    return any(k.keyid == key.keyid for k in load_trust_policy(home.trust_path).keys_for(namespace))
