"""The workloads: what is set up (not recorded), what is recorded, and what it acknowledges.

:func:`build_base` makes, once per run, what every workload starts from: a tiny model
(``kvreg.engine.tiny``), a depositor store with a key and three artifacts (``src/base``,
``src/ext`` sharing its prefix, ``src/other``), a registry (the embedded default: SQLite in WAL
mode and a folder of objects) with a public namespace ``team`` that trusts the depositor's
key and holds ``team/base``, and an empty store that trusts ``team``. :func:`record` copies
the folders a workload needs, snapshots them, and records its driver
(``crashlab.driver``) under strace. The workloads (:data:`WORKLOADS`):

========================  ====================  ===================================================
name                      roots                 recorded
========================  ====================  ===================================================
``deposit-new``           client                ``kvreg deposit`` of a new text into a store with
                                                only a key
``deposit-shared``        client                ``kvreg deposit`` of a text sharing ``src/base``'s
                                                prefix (only the new chunks are written)
``pull-fresh``            client, registry      ``kvreg serve``; ``kvreg pull`` into an empty store
``pull-resumed``          client, registry      the same pull, after one killed half-way
                                                (``client.pull.install:2``)
``gc``                    client                ``kvreg gc --grace 0`` with an unreferenced artifact
                                                and a stale temp file
``evict``                 client                ``kvreg evict --max-bytes 1``, ``src/base`` pinned
``push-put``              registry              ``kvreg serve`` taking one object per PUT; ``kvreg
                                                push`` of a new artifact (objects, envelope, ref
                                                created by compare-and-swap, audit entries); a
                                                signed checkpoint
``push-packs``            registry              the same with object packs
``ref-cas``               registry              ``kvreg push`` moving ``team/base`` to another
                                                artifact (``If-Match``); a signed checkpoint
``audit-pin``             client, registry      ``kvreg audit verify origin``: the store pins the
                                                registry's checkpoint
========================  ====================  ===================================================

What each acknowledges: the refs and artifacts that existed before (they must survive the
workload, unless it moves them: ``ref-cas``), then what the command reported done once it exited
0. A ref the command moves may hold either value until that acknowledgement
(``crashlab.checks``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .trace import Trace
from .trace import record as record_trace

BENCH = Path(__file__).resolve().parent.parent
BLOCK = "16"
OTHER = (
    "A compliance ruling: the transfer is permitted because the counterparty is registered "
    "and the amount is below the reporting threshold of 10,000 units. Reviewed and approved."
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def kvreg(home: Path, *args: str | Path, expect: int = 0, **env: str) -> str:
    """Run ``kvreg ARGS`` (not recorded); its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "kvreg", *map(str, args)],
        env=_env(KVREG_HOME=str(home), **env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != expect:
        raise RuntimeError(f"kvreg {' '.join(map(str, args))}: {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Base:
    """What every workload starts from (see the module docstring)."""

    root: Path
    model: Path
    texts: dict[str, Path]
    keys_home: Path
    depositor: Path
    registry: Path
    puller: Path
    port: int
    key: str
    token: str
    digests: dict[str, str]
    checkpoint: dict[str, Any]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def serving(data: Path, port: int) -> Iterator[str]:
    """``kvreg serve`` on ``data`` (not recorded), stopped after."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvreg", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=_env(KVREG_DATA=str(data)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kvreg serve on {data} did not start")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/v1/", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def build_base(root: Path) -> Base:
    """Build the starting point of every workload under ``root``."""
    from kvreg.app.demo.texts import EXTENSION, QUESTION, SOLUTION

    root.mkdir(parents=True, exist_ok=True)
    model = root / "model"
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"from kvreg.engine.tiny import build_model_dir; build_model_dir({str(model)!r})",
        ],
        env=_env(),
        check=True,
        capture_output=True,
        timeout=600,
    )
    texts = {}
    for name, text in {
        "base": QUESTION + SOLUTION,
        "ext": QUESTION + SOLUTION + EXTENSION,
        "other": OTHER,
    }.items():
        texts[name] = root / f"{name}.txt"
        texts[name].write_text(text, encoding="utf-8")
    keys_home = root / "keys-home"
    kvreg(keys_home, "keys", "generate")
    key = kvreg(keys_home, "keys", "export").strip()
    depositor = root / "depositor"
    shutil.copytree(keys_home, depositor)
    for name in texts:
        kvreg(
            depositor,
            "deposit",
            model,
            "--text-file",
            texts[name],
            "--ref",
            f"src/{name}",
            "--block-size",
            BLOCK,
        )
    registry = root / "registry" / "data"
    registry.mkdir(parents=True)
    admin = [sys.executable, "-m", "kvreg_registry.admin", "--json"]
    renv = _env(KVREG_DATA=str(registry))
    subprocess.run([*admin, "user", "create", "root", "--admin"], env=renv, check=True, capture_output=True)
    out = subprocess.run(
        [*admin, "token", "create", "root", "--label", "crashlab"], env=renv, check=True, capture_output=True
    )
    token = json.loads(out.stdout)["token"]
    port = _free_port()
    puller = root / "puller"
    with serving(registry, port) as url:
        headers = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{url}/api/v1/namespaces", json={"name": "team", "public": True}, headers=headers)
        r.raise_for_status()
        r = httpx.post(f"{url}/api/v1/namespaces/team/keys", json={"public_key": key}, headers=headers)
        r.raise_for_status()
        kvreg(depositor, "remote", "add", "origin", url)
        kvreg(depositor, "login", "origin", "--token", token)
        kvreg(depositor, "push", "origin", "src/base", "--as", "team/base")
        kvreg(puller, "remote", "add", "origin", url)
        kvreg(puller, "trust", "add", "team", key)
        from .driver import checkpoint

        cp = checkpoint(url)
    from kvreg.core.names import RefName
    from kvreg.store.home import Home

    refs = Home(depositor).refs
    digests = {name: str(refs.get(RefName.parse(f"src/{name}"))) for name in texts}
    return Base(root, model, texts, keys_home, depositor, registry, puller, port, key, token, digests, cp)


# --- the workloads -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A workload ready to record: its roots (label -> folder, kind) and its driver's steps."""

    roots: dict[str, Path]
    kinds: dict[str, str]
    steps: list[dict[str, Any]]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _registry_acks(base: Base, label: str) -> list[dict[str, Any]]:
    return [
        {
            "ack": {
                "kind": "artifact",
                "root": label,
                "ref": "team/base",
                "digest": base.digests["base"],
                "key": base.key,
            }
        },
        {"ack": {"kind": "checkpoint", "root": label, **base.checkpoint}},
    ]


def _serve(base: Base, data: Path, **env: str) -> dict[str, Any]:
    return {"serve": {"data": str(data), "port": base.port, "env": env}}


def _deposit(base: Base, work: Path, *, shared: bool) -> Plan:
    home = _copy(base.depositor if shared else base.keys_home, work / "home")
    if shared:
        for name in ("ext", "other"):
            (home / "refs" / "src" / name).unlink()  # their objects stay: gc would remove them
    text = base.texts["ext" if shared else "base"]
    pre = (
        [{"ack": {"kind": "ref", "root": "home", "ref": "src/base", "digest": base.digests["base"]}}]
        if shared
        else []
    )
    run = ["deposit", str(base.model), "--text-file", str(text), "--ref", "src/new", "--block-size", BLOCK]
    step: dict[str, Any] = {
        "run": run,
        "home": str(home),
        "acks": [{"kind": "ref", "root": "home", "ref": "src/new"}],
    }
    return Plan({"home": home}, {"home": "client"}, [*pre, step])


def _pull(base: Base, work: Path, *, resumed: bool) -> Plan:
    home = _copy(base.puller, work / "home")
    data = _copy(base.registry.parent, work / "registry") / "data"
    if resumed:
        with serving(data, base.port):
            kvreg(
                home,
                "pull",
                "origin",
                "team/base",
                expect=-signal.SIGKILL,
                KVREG_CRASH_AT="client.pull.install:2",
            )
    steps = [
        *_registry_acks(base, "registry"),
        _serve(base, data),
        {
            "run": ["pull", "origin", "team/base"],
            "home": str(home),
            "acks": [{"kind": "ref", "root": "home", "ref": "team/base"}],
        },
        {"stop": True},
    ]
    return Plan({"home": home, "registry": data}, {"home": "client", "registry": "registry"}, steps)


def _maintenance(base: Base, work: Path, *, evict: bool) -> Plan:
    home = _copy(base.depositor, work / "home")
    kept = ["base", "ext"]
    if evict:
        kvreg(home, "pin", "src/base")
        old = time.time() - 7 * 86400
        for path in (home / "objects").rglob("*"):
            os.utime(path, (old, old))
        run = ["evict", "--max-bytes", "1"]
    else:
        (home / "refs" / "src" / "other").unlink()
        (home / "tmp" / "stale.incomplete").write_bytes(b"half an object")
        run = ["gc", "--grace", "0"]
    acks = [
        {"ack": {"kind": "ref", "root": "home", "ref": f"src/{n}", "digest": base.digests[n]}} for n in kept
    ]
    return Plan({"home": home}, {"home": "client"}, [*acks, {"run": run, "home": str(home)}])


def _push(base: Base, work: Path, *, source: str, target: str, **env: str) -> Plan:
    pusher = _copy(base.depositor, work / "pusher")
    data = _copy(base.registry.parent, work / "registry") / "data"
    artifact = {"kind": "artifact", "root": "registry", "ref": target, "key": base.key}
    steps = [
        *_registry_acks(base, "registry"),
        _serve(base, data, **env),
        {"run": ["push", "origin", f"src/{source}", "--as", target], "home": str(pusher), "acks": [artifact]},
        {"acks": [{"kind": "checkpoint", "root": "registry"}]},
        {"stop": True},
    ]
    return Plan({"registry": data}, {"registry": "registry"}, steps)


def _audit(base: Base, work: Path) -> Plan:
    home = _copy(base.puller, work / "home")
    data = _copy(base.registry.parent, work / "registry") / "data"
    with serving(data, base.port):
        kvreg(home, "login", "origin", "--token", base.token)  # the log's entries need a reader
    steps = [
        *_registry_acks(base, "registry"),
        _serve(base, data),
        {
            "run": ["audit", "verify", "origin"],
            "home": str(home),
            "acks": [{"kind": "pin", "root": "home", "remote": "origin"}],
        },
        {"stop": True},
    ]
    return Plan({"home": home, "registry": data}, {"home": "client", "registry": "registry"}, steps)


WORKLOADS: dict[str, Callable[[Base, Path], Plan]] = {
    "deposit-new": lambda b, w: _deposit(b, w, shared=False),
    "deposit-shared": lambda b, w: _deposit(b, w, shared=True),
    "pull-fresh": lambda b, w: _pull(b, w, resumed=False),
    "pull-resumed": lambda b, w: _pull(b, w, resumed=True),
    "gc": lambda b, w: _maintenance(b, w, evict=False),
    "evict": lambda b, w: _maintenance(b, w, evict=True),
    "push-put": lambda b, w: _push(b, w, source="ext", target="team/ext", KVREG_MAX_PACK_OBJECTS="1"),
    "push-packs": lambda b, w: _push(b, w, source="other", target="team/other"),
    "ref-cas": lambda b, w: _push(b, w, source="ext", target="team/base"),
    "audit-pin": _audit,
}


@dataclass
class Recorded:
    """A recorded workload: its trace, and what the explorer needs to check its states."""

    name: str
    trace: Trace
    names: dict[str, str]
    kinds: dict[str, str]
    seconds: float


def record(base: Base, name: str, work: Path, *, fault: str | None = None) -> Recorded:
    """Set up workload ``name`` under ``work`` and record it; refuse a trace that missed a change."""
    started = time.monotonic()
    work.mkdir(parents=True)
    plan = WORKLOADS[name](base, work)
    roots = [p.resolve() for p in plan.roots.values()]
    spec = {"ack_file": str((work / "acks.jsonl").resolve()), "steps": plan.steps, "fault": fault}
    (work / "spec.json").write_text(json.dumps(spec, indent=1))
    argv = [sys.executable, "-m", "crashlab.driver", str(work / "spec.json")]
    trace = record_trace(argv, roots, work=work, env=_env())
    names = {str(p.resolve()): label for label, p in plan.roots.items()}
    return Recorded(name, trace, names, plan.kinds, time.monotonic() - started)
