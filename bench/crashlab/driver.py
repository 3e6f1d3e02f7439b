"""The recorded process: runs a workload's steps and writes what was acknowledged, in order.

``python -m crashlab.driver SPEC.json`` (with ``bench/`` on ``PYTHONPATH``) is what strace starts;
everything it starts (``kvreg serve``, ``kvreg`` commands) is recorded with it, in one order.
The spec is ``{"ack_file": PATH, "steps": [...]}``; each step is one of:

``{"ack": PAYLOAD}``
    write ``PAYLOAD`` as acknowledged now (what was durable before the workload began);
``{"serve": {"data": DIR, "port": N, "env": {...}}}``
    start ``kvreg serve`` on ``DIR`` and wait until it answers;
``{"run": [ARGS...], "home": DIR, "env": {...}, "acks": [PAYLOAD...]}``
    run ``kvreg ARGS`` with ``KVREG_HOME=DIR`` (if ``run`` is given); it must exit 0; then
    acknowledge each payload, completed with what it names as it is now: a ``ref`` of the
    client store gets the ref's digest, an ``artifact`` of the registry its digest read back
    over HTTP, a ``pin`` the size of the checkpoint the store pinned, a ``checkpoint`` a fresh
    signed checkpoint of the registry;
``{"stop": true}``
    stop the server (``SIGTERM``, as an operator would) and wait for it.

With ``"fault": NAME`` in the spec, every ``kvreg`` process runs with that fault
(``crashlab.faults``): a deliberately broken build.

An acknowledgement is one JSON line written with one ``write(2)`` to ``ack_file`` (which lies
outside the recorded roots): ``crashlab.trace`` turns it into a marker at that point of the trace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


class Driver:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.ack_fd = os.open(spec["ack_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.server: subprocess.Popen[bytes] | None = None
        self.url = ""
        # A deliberately broken build (crashlab.faults): every kvreg process runs with the fault.
        fault = spec.get("fault")
        self.kvreg = (
            [sys.executable, "-m", "crashlab.faults", fault, "kvreg"]
            if fault
            else [sys.executable, "-m", "kvreg"]
        )

    def ack(self, payload: dict[str, Any]) -> None:
        os.write(self.ack_fd, (json.dumps(payload, sort_keys=True) + "\n").encode())

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env.update(extra)
        return env

    def serve(self, opts: dict[str, Any]) -> None:
        self.url = f"http://127.0.0.1:{opts['port']}"
        log = Path(opts["data"]).parent / "server.log"
        argv = [*self.kvreg, "serve", "--host", "127.0.0.1", "--port", str(opts["port"])]
        self.server = subprocess.Popen(
            [*argv, "--log-level", "warning"],
            env=self.env({"KVREG_DATA": opts["data"], **opts.get("env", {})}),
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise SystemExit(f"kvreg serve exited with {self.server.returncode}: see {log}")
            try:
                if httpx.get(f"{self.url}/api/v1/", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit("kvreg serve did not answer within 120 s")

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            self.server.wait(60)
        self.server = None

    def run(self, step: dict[str, Any]) -> None:
        if "run" in step:
            env = self.env({"KVREG_HOME": step["home"], **step.get("env", {})})
            done = subprocess.run(
                [*self.kvreg, *step["run"]], env=env, capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise SystemExit(f"kvreg {' '.join(step['run'])} failed ({done.returncode}):\n{done.stderr}")
        for payload in step.get("acks", []):
            self.ack(self.complete(step.get("home", ""), dict(payload)))

    def complete(self, home: str, payload: dict[str, Any]) -> dict[str, Any]:
        kind = payload["kind"]
        if kind == "ref":
            from kvreg.core.names import RefName
            from kvreg.store.home import Home

            payload["digest"] = str(Home(Path(home)).refs.get(RefName.parse(payload["ref"])))
        elif kind == "artifact":
            ns, name = payload["ref"].split("/", 1)
            r = httpx.get(f"{self.url}/api/v1/namespaces/{ns}/refs/{name}", timeout=30)
            r.raise_for_status()
            payload["digest"] = r.json()["digest"]
        elif kind == "checkpoint":
            payload.update(checkpoint(self.url))
        elif kind == "pin":
            from kvreg.store.audit_state import RemoteLogStore
            from kvreg.store.home import Home

            state = RemoteLogStore(Home(Path(home))).load(payload["remote"])
            assert state is not None and state.checkpoint is not None
            payload["size"] = state.checkpoint.size
        return payload

    def main(self) -> None:
        try:
            for step in self.spec["steps"]:
                if "ack" in step:
                    self.ack(step["ack"])
                elif "serve" in step:
                    self.serve(step["serve"])
                elif "run" in step or "acks" in step:
                    self.run(step)
                elif "stop" in step:
                    self.stop()
                else:
                    raise SystemExit(f"unknown step {step}")
        finally:
            if self.server is not None and self.server.poll() is None:
                self.server.kill()
            os.close(self.ack_fd)


def checkpoint(url: str) -> dict[str, Any]:
    """A fresh signed checkpoint of the registry at ``url``: its size and root (base64)."""
    r = httpx.get(f"{url}/api/v1/log/checkpoint", timeout=30)
    r.raise_for_status()
    lines = r.text.split("\n")
    return {"size": int(lines[1]), "hash": lines[2]}


if __name__ == "__main__":
    Driver(json.loads(Path(sys.argv[1]).read_text())).main()
