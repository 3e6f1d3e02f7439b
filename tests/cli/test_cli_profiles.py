"""Numerics profiles through the CLI: the environment is in place before torch loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvreg.engine.profiles import PORTABLE_ENV

from .helpers import BLOCK, REF, kvreg, kvreg_env


@pytest.mark.slow
def test_portable_deposit_grafts_byte_exactly_in_another_process(tmp_path, models, texts):
    home = tmp_path / "home"
    kvreg(home, "keys", "generate")
    args = ["--text-file", texts["text"], "--ref", REF, "--block-size", BLOCK, "--profile", "portable"]
    kvreg(home, "deposit", models["llama"], *args, "--json")
    manifest = kvreg(home, "show", REF, "--json").json
    assert manifest["config"]["profile"] == "portable"
    assert manifest["config"]["fields"]["environment"] == dict(PORTABLE_ENV)
    # No --profile here: the recorded config decides, and the CLI sets the environment.
    graft = kvreg(home, "graft", REF, "--model", models["llama"], "--check", "--json").json
    assert graft["check"]["byte_exact"] is True
    assert graft["check"]["sha256_equal_steps"] == 32


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
