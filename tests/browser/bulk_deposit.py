"""Deposit many small artifacts in one process (one model load), for the pagination tests.

``python bulk_deposit.py HOME MODEL NAMESPACE COUNT``: deposits ``NAMESPACE/ex01``... signed with
the store's default key, with the code ``kvreg deposit`` runs (``kvreg.engine.deposit.deposit``);
a deposit per subprocess would cost a model load each. Prints the ref names, one a line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvreg.core.names import RefName
from kvreg.engine.deposit import deposit
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import load_model
from kvreg.fileio.keyfiles import load_signing_key
from kvreg.store.home import Home

BLOCK = 16


def main() -> None:
    home_dir, model, namespace, count = sys.argv[1:5]
    home = Home(Path(home_dir))
    key = load_signing_key(home.keys_dir / "default.key")
    lm = load_model(model, EngineSettings(block_size=BLOCK), cache_dir=home.cache_dir)
    for i in range(1, int(count) + 1):
        ref = RefName(namespace, f"ex{i:02d}")
        deposit(
            lm,
            home,
            text=f"Exercise {i}: the sum of {i} and {i} is {2 * i}, checked by hand.",
            ref=ref,
            key=key,
            verification={"verifier": "hand", "verdict": "pass", "evidence": {"answer": str(2 * i)}},
            annotations={"title": f"Paging exercise {i:02d}", "tags": ["paging"]},
        )
        print(ref)


if __name__ == "__main__":
    main()
