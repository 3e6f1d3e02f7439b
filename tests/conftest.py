"""Settings for the whole suite.

``OMP_WAIT_POLICY=PASSIVE`` is set before anything imports torch: the command-line tests
run the ``kvreg`` command in this process (``tests/cli/inprocess.py``), and OpenMP
workers that spin while waiting slow everything down on shared CI cores (the bits do
not change; the ``python -m kvreg`` subprocesses get the same setting from
``cli.helpers.kvreg_env``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
