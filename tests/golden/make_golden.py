"""Regenerate the golden cross-host data in this folder (see README.md).

Usage, from the repository root, with the project's environment:

    PYTHONPATH=client:registry .venv/bin/python tests/golden/make_golden.py

It builds the tiny model (seeded random weights, ``kvreg.engine.tiny``) into
``model/``, then, in a temporary store, generates a signing key and deposits
``text.txt`` with ``--profile portable --dtype float32`` through ``python -m kvreg``
(a fresh process, so the profile's environment is in place before torch loads), and
copies into ``home/`` what a graft needs: the objects, the envelope, the ref, the
trust policy and the public key (never the private key, the logs or the cache).
Finally it writes ``host.json``: the CPU and the versions it was made with.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REF = "golden/p07"
BLOCK = "16"
# Small on purpose: two layers of width 32 (the committed model stays ~250 KB).
MODEL_CONFIG = {"hidden_size": 32, "num_layers": 2}


def kvreg(home: Path, *args: str | Path) -> str:
    env = {**os.environ, "KVREG_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    for name in ("KVREG_REEXECUTED", "KVREG_TOKEN", "ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "kvreg", *map(str, args)], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"kvreg {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    from kvreg.engine.tiny import build_model_dir

    model = HERE / "model"
    shutil.rmtree(model, ignore_errors=True)
    build_model_dir(model, "llama", seed=0, **MODEL_CONFIG)
    for path in model.iterdir():
        path.chmod(0o644)

    out = HERE / "home"
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        kvreg(home, "keys", "generate")
        deposit = json.loads(
            kvreg(
                home, "deposit", model, "--text-file", HERE / "text.txt", "--ref", REF,
                "--profile", "portable", "--dtype", "float32", "--block-size", BLOCK,
                "--title", "golden", "--json",
            )
        )  # fmt: skip
        manifest = json.loads(kvreg(home, "show", REF, "--json"))
        for part in ("objects", "envelopes", "refs"):
            shutil.copytree(home / part, out / part, ignore=shutil.ignore_patterns(".lock"))
        (out / "keys").mkdir()
        shutil.copy(home / "keys" / "default.pub", out / "keys" / "default.pub")
        shutil.copy(home / "trust.json", out / "trust.json")
    for path in out.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)

    fields = manifest["config"]["fields"]
    host = {
        "made_on": {
            "cpu": cpu_model(),
            "machine": platform.machine(),
            "native_cpu_capability": native_capability(),
        },
        "ref": REF,
        "manifest_digest": deposit["manifest_digest"],
        "profile": fields["profile"],
        "dtype": fields["dtype"],
        "cpu_capability": fields["cpu_capability"],
        "versions": fields["versions"],
    }
    (HERE / "host.json").write_text(json.dumps(host, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(host, indent=2))


def native_capability() -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY",)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


if __name__ == "__main__":
    main()
