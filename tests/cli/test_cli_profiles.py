"""Numerics profiles through the CLI: the environment is in place before torch loads.

Portable deposits grafted on an emulated AVX2 host: tests/cli/test_cli_portable.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvreg.engine.profiles import PORTABLE_ENV

from .helpers import REF, kvreg_env


@pytest.mark.slow
def test_reexecutes_when_torch_was_imported_without_the_profile_environment(deposited, models):
    """``main()`` in a process that imported torch first: the CLI re-executes itself with
    the portable environment; the re-executed graft then refuses the native artifact by
    its config fingerprint, naming the profile."""
    home = deposited["home"]
    argv = ["-v", "--json", "graft", REF, "--model", str(models["llama"]), "--profile", "portable"]
    script = (
        "import sys, torch\n"
        "from kvreg.cli.main import main\n"
        f"sys.argv = ['kvreg', *{argv!r}]\n"
        "main(sys.argv[1:])\n"
    )
    env = kvreg_env(home)
    for name in PORTABLE_ENV:
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert "re-executing" in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "FINGERPRINT_MISMATCH"
    assert "profile" in err["message"]
    assert "ATEN_CPU_CAPABILITY" in err["message"]  # the re-executed process had the environment
