"""The Hypothesis profile of the fuzz suite.

``kvreg-fuzz`` is derandomized (the same examples on every run, so CI is
deterministic), has no per-example deadline (the suite bounds itself by example
counts instead) and keeps no example database. It is registered here and used
as the *parent* of each test's settings (``fuzz.strategies.fuzz``), so loading
this suite never changes the Hypothesis defaults of the other suites.

``bench/fuzz.py`` runs the same tests for longer: it sets ``KVREG_FUZZ_SCALE``
(examples multiplied by that factor) and ``KVREG_FUZZ_RANDOM=1`` (a fresh random
seed per run instead of the fixed derandomized one).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "kvreg-fuzz",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
