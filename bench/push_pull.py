"""Push and pull over loopback: kvreg's transfers next to a raw HTTP copy of the same bytes.

One run, side by side (so that the ratios mean something on a small, shared host):

1. **The artifact** is a real deposit: a Llama-shaped model with seeded random
   weights whose KV is large per token (32 layers, 8 KV heads of dimension 128,
   float32: 256 KiB per token; hidden size 64, so the prefill stays cheap) reads a
   deterministic text of ``--size-mib`` x 4 tokens (default 1,024 MiB: 4,096
   tokens, 64 chunks of 16 MiB with ``--block-size 64``); the artifact is computed,
   signed with a fresh Ed25519 key and stored in a fresh local store.
2. **A real registry**: ``python -m kvreg serve`` on 127.0.0.1 and a free port, data
   in a fresh folder (embedded defaults: SQLite + folder; ``--backend postgres-s3``
   uses the test services of ``scripts/services.sh``, object GETs redirected to
   presigned URLs). The first admin and its
   token come from ``python -m kvreg_registry.admin --data DIR --json``; the
   namespaces, a user with the ``write`` role and the depositor's key are made
   through the HTTP API.
3. One untimed warm-up round (a raw copy, a push into its own namespace, a pull), so that
   the timed rounds measure warm processes, as a long-running registry and client are
   (the first push of a fresh ``kvreg serve`` cost up to 0.5 CPU s more: imports, SQL
   statements compiled on first use, buffers mapped and faulted in); then rounds of, in
   this order (``--repeat``; medians are reported):

   - **raw**: ``python -m http.server`` bound to 127.0.0.1 serves one file holding
     the same bytes (every object of the artifact, concatenated); ``curl -s -o
     FILE`` downloads it; then, untimed in that row, the copy is fsynced and the
     fsync's time is printed apart ("raw copy, then an fsync of it", no goal: the
     durability a push and a pull pay and the raw copy does not);
   - **push**: ``kvreg.remote.push`` of the artifact into a fresh namespace (every
     object missing): upload session, every object streamed and digest-checked by
     the server, envelope (signature, Merkle root, objects present), ref;
   - **pull**: ``kvreg.remote.pull`` of it into a fresh ``KVREG_HOME``: signature
     against the local trust policy, every object downloaded and hashed, staged,
     installed into the store, the ref set.

   Only the transfer is timed (the curl process; the ``push``/``pull`` call), not
   starting servers, making namespaces or the checks after; ``os.sync()`` runs
   before each measurement, so none pays for the previous one's dirty pages.
   Every round checks the bytes: the curl copy hashes to the source file, the
   push sent every object, the pulled store holds every object under its digest.
   The CPU seconds of the server and of the client during each transfer are
   reported, and the pull's time in ``Staging.install`` (wrapped with a timer),
   which moves the verified staged objects into the store.

   With ``--remote oci``, each round also pushes the same deposit to, and pulls it
   from, the two open OCI registries that ``scripts/services.sh`` runs (CNCF
   distribution on a folder, and on S3 redirecting every blob download to a presigned
   URL of the store), timed the same way (``bench/oci_transfers.py``). Rows "kvreg
   push -> OCI (folder)", "kvreg pull <- OCI (folder)" and the same "on S3 (307s)".

   Two diagnostic rows (no goal) split the registry's share from the client's:
   ``curl --parallel`` PUTs every object into another fresh namespace of the
   same ``kvreg serve`` (the server's side of a push, with no kvreg client), and
   GETs every object from it (the server's side of a pull), ``--jobs`` at a time.
4. **Dedupe**: a small model (``kvreg.engine.tiny``'s default Llama) deposits
   ``--artifacts`` artifacts (default 100) that share a ``--prefix-tokens``-token
   prefix (default 1,024, a multiple of the block size) and each add a short
   distinct suffix; all are pushed into one namespace of a second, fresh registry;
   then the files in its storage are listed and compared with the unique objects
   the manifests reference (plus the manifests themselves): the stored bytes must
   equal the unique objects' bytes exactly, and the stored chunk bytes the unique
   chunks' bytes.

Goals (from the issue): pull >= 0.8 of the raw copy's throughput, push >= 0.6;
stored bytes == unique bytes. A missed timing goal is reported, not an error; a
failed correctness check exits 1.

Usage::

    .venv/bin/python bench/push_pull.py [--size-mib 1024] [--repeat 5] [--artifacts 100]
        [--prefix-tokens 1024] [--block-size 64] [--jobs 4] [--backend sqlite-folder] [--remote oci]
        [--quick] [--keep] [--out bench/out]

``--quick`` (64 MiB, 10 artifacts, one round) is the smoke test's run; its
figures mean nothing. The last line of stdout is the whole report as JSON.
"""

from __future__ import annotations

import os

# The deposits prefill with torch on a host shared with other jobs: OpenMP's
# default busy-waiting then costs 10-20x (measured). Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import contextlib
import hashlib
import importlib.util
import json
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.fileio.directio import o_direct_supported
from kvreg.fileio.keyfiles import save_trust_policy
from oci_transfers import OCI_LABELS, OCI_ROWS, PUSH_PULL, oci_round  # bench/, beside this script

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "out"
MIB = 1 << 20

# KV per token: 32 layers x (key + value) x 8 heads x 128 x 4 bytes = 256 KiB.
BIG_MODEL: dict[str, int] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 32,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 16384,
}
#: Ratios to the raw copy's throughput (at least) and CPU seconds per GiB moved (at most).
GOALS = {
    "pull_over_raw": 0.8,
    "push_over_raw": 0.6,
    "push_server_cpu_s_per_gib": 1.5,
    "pull_client_cpu_s_per_gib": 1.5,
}
AT_MOST = frozenset({"push_server_cpu_s_per_gib", "pull_client_cpu_s_per_gib"})
#: A transfer whose disk was busy this share of its wall time or more is reported as bound by it.
DISK_BOUND = 0.85
GIB = 1 << 30
ADMIN = "bench-admin"
WRITER = "bench-writer"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def kv_bytes_per_token(spec: dict[str, int], itemsize: int = 4) -> int:
    return spec["num_hidden_layers"] * 2 * spec["num_key_value_heads"] * spec["head_dim"] * itemsize


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- models and deposits ---------------------------------------------------------------------


def _cached_model(out: Path, name: str, wanted: dict[str, Any], build: Any) -> Path:
    """``out/name``, rebuilt when ``wanted`` (config and the source of kvreg.engine.tiny) changes."""
    from kvreg.engine import tiny

    stamp_doc = {**wanted, "tiny": hashlib.sha256(Path(tiny.__file__).read_bytes()).hexdigest()}
    stamp_text = json.dumps(stamp_doc, sort_keys=True)
    path = out / name
    stamp = path / "kvreg-bench.json"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return path
    log(f"building {path} ...")
    tmp = out / f"{name}.incomplete"
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    (tmp / "kvreg-bench.json").write_text(stamp_text)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def big_model_dir(out: Path) -> Path:
    """The Llama with 256 KiB of float32 KV per token (``kvreg.engine.tiny`` fixes head_dim)."""

    def build(dest: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig

        from kvreg.engine.tiny import build_tokenizer

        dest.mkdir(parents=True)
        tokenizer = build_tokenizer(512)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=3,
            architectures=["LlamaForCausalLM"],
            **BIG_MODEL,
        )
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(dest, safe_serialization=True)
        tokenizer.save_pretrained(dest)

    return _cached_model(out, "model-pushpull-kv256k", {"arch": "llama", "seed": 0, **BIG_MODEL}, build)


def small_model_dir(out: Path) -> Path:
    """``kvreg.engine.tiny``'s default Llama (4 layers, 2 KV heads of 16: 1 KiB of KV per token)."""

    def build(dest: Path) -> None:
        from kvreg.engine.tiny import build_model_dir

        build_model_dir(dest, "llama", seed=0)

    return _cached_model(
        out, "model-pushpull-tiny", {"arch": "llama", "seed": 0, "tiny_defaults": True}, build
    )


def load(model_path: Path, block_size: int, cache_dir: Path) -> Any:
    from kvreg.engine.pinned import EngineSettings
    from kvreg.engine.runtime import load_model

    threads = min(2, os.cpu_count() or 1)
    settings = EngineSettings(
        dtype="float32", attn_implementation="sdpa", threads=threads, block_size=block_size
    )
    return load_model(model_path, settings, cache_dir=cache_dir)


def text_tokens(lm: Any, n: int, salt: str = "") -> list[int]:
    """Exactly ``n`` token ids of a deterministic text (the tokenizer corpus, numbered lines)."""
    from kvreg.engine.tiny import CORPUS

    lines = [line for line in CORPUS.splitlines() if line.strip()]
    parts: list[str] = []
    i = 0
    while True:
        for _ in range(max(8, n // 16)):
            parts.append(f"[{salt}{i}] {lines[i % len(lines)]}")
            i += 1
        tokens = lm.encode("\n".join(parts), first=True)
        if len(tokens) >= n:
            return tokens[:n]


@dataclass
class Depositor:
    """A local store with a signing key trusted for its namespace."""

    home: Any
    key: Any
    namespace: str

    @classmethod
    def create(cls, root: Path, namespace: str) -> Depositor:
        from kvreg.core.keys import SigningKey

        key = SigningKey.generate()
        return cls(trusting_home(root, namespace, key.public_key), key, namespace)

    def deposit(self, lm: Any, tokens: list[int], name: str, title: str) -> Any:
        """Compute, sign and store the artifact of exactly ``tokens`` as ``namespace/name``."""
        from kvreg.core.envelope import sign_envelope
        from kvreg.core.names import RefName
        from kvreg.engine import deposit
        from kvreg.store.artifacts import open_artifact, store_artifact

        computed = deposit.compute_artifact(lm, tokens)
        manifest, objects = deposit.build_manifest(
            lm, computed, text=lm.decode(tokens), prompt=None, verification=None, annotations={"title": title}
        )
        del computed
        envelope = sign_envelope(manifest.raw_bytes, self.key)
        ref = RefName.parse(f"{self.namespace}/{name}")
        store_artifact(self.home, objects, manifest, envelope, ref)
        del objects
        return open_artifact(self.home, str(ref)).manifest


def trusting_home(root: Path, namespace: str, key: Any) -> Any:
    """A fresh local store at ``root`` whose trust policy allows ``key`` to sign for ``namespace``."""
    from kvreg.core.trust import TrustPolicy
    from kvreg.store.home import Home

    home = Home(root)
    home.ensure()
    policy = TrustPolicy()
    policy.allow(namespace, key)
    save_trust_policy(policy, home.trust_path)
    return home


# --- the registry -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str, proc: subprocess.Popen[bytes], what: str, log_path: Path, timeout: float = 90
) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail(log_path)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer within {timeout:.0f} s:\n{tail(log_path)}")


def tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``kvreg serve --workers N`` runs N worker processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return out


def disk_of(path: Path) -> str | None:
    """The name in ``/proc/diskstats`` of the block device that holds ``path`` (Linux; ``None``
    where there is none, e.g. tmpfs or an overlay)."""
    try:
        dev = path.stat().st_dev
        name = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve().name
    except OSError:
        return None
    return name if disk_counters(name) is not None else None


def disk_counters(device: str) -> tuple[float, float] | None:
    """``(MiB written, seconds busy)`` of ``device`` since boot, from ``/proc/diskstats`` (the
    busy time is the time with at least one request in flight: near the wall time of a
    transfer, the disk set its pace)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/diskstats").read_text().splitlines():
            fields = line.split()
            if len(fields) > 12 and fields[2] == device:
                return int(fields[9]) * 512 / MIB, int(fields[12]) / 1000
    return None


def sha256_cpu_s_per_gib() -> float:
    """CPU seconds SHA-256 takes per GiB on this CPU (hashlib, 256 MiB in 8 MiB pieces): the
    part of a push's or pull's CPU that no implementation avoids."""
    data = memoryview(os.urandom(8 * MIB))
    h = hashlib.sha256()
    started = time.thread_time()
    for _ in range(32):
        h.update(data)
    return (time.thread_time() - started) * 4


def receive_and_hash_cpu_s_per_gib(mib: int = 256) -> float:
    """CPU seconds per GiB that receiving bytes from a loopback TCP socket and hashing them
    takes one thread (1 MiB reads into an 8 MiB buffer, each piece hashed as it arrives, the
    way the registry's and the client's loops do it, minus everything else): the floor of the
    server's CPU per GiB pushed and of the client's per GiB pulled, before a byte is written."""
    piece, buffer_size = MIB, 8 * MIB
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def send() -> None:
            data = memoryview(os.urandom(buffer_size))
            with socket.create_connection(("127.0.0.1", port)) as out:
                for _ in range(mib * MIB // buffer_size):
                    out.sendall(data)

        sender = threading.Thread(target=send, name="bench-floor-sender", daemon=True)
        sender.start()
        conn, _ = listener.accept()
    with conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, piece)
        view = memoryview(bytearray(buffer_size))
        h = hashlib.sha256()
        received = 0
        started = time.thread_time()
        while True:
            at = received % buffer_size
            n = conn.recv_into(view[at : min(at + piece, buffer_size)])
            if n == 0:
                break
            h.update(view[at : at + n])
            received += n
        cpu = time.thread_time() - started
    sender.join()
    if received != mib * MIB:
        raise RuntimeError(f"the floor measurement received {received} of {mib * MIB} bytes")
    return cpu * GIB / received


def reset_peak_rss(pid: int) -> None:
    """Start a new peak-RSS measurement for ``pid`` (Linux: ``clear_refs`` 5 resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss_mib(pid: int) -> float:
    """The peak resident memory of a running process since :func:`reset_peak_rss`, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def run_child(command: list[str]) -> dict[str, float]:
    """Run a command to its end: its wall time, CPU seconds (``wait4``) and peak RSS.

    The peak RSS is read from ``/proc/PID/status`` while it runs (``wait4``'s
    ``ru_maxrss`` would count the pages of this big process that the child shared
    between its fork and its exec).
    """
    t = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    peak = [float("nan")]

    def watch() -> None:
        while proc.returncode is None:
            value = peak_rss_mib(proc.pid)
            if value == value:  # not NaN: the process is still there
                peak[0] = value if peak[0] != peak[0] else max(peak[0], value)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    watcher.join()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return {
        "seconds": seconds,
        "client_cpu_seconds": usage.ru_utime + usage.ru_stime,
        "client_peak_rss_mib": peak[0],
    }


@dataclass
class Registry:
    """A ``kvreg serve`` subprocess on loopback with its own data (and database/bucket)."""

    root: Path
    backend: str
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    admin_token: str = ""
    writer_token: str = ""
    storage_url: str = ""
    s3: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)
    workers: int = 1

    @property
    def data(self) -> Path:
        return self.root / "data"

    def admin_cli(self, *args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "kvreg_registry.admin", "--data", str(self.data), "--json", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kvreg-admin {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return json.loads(done.stdout)

    def start(self) -> None:
        self.admin_cli("user", "create", ADMIN, "--admin")
        self.admin_token = self.admin_cli("token", "create", ADMIN, "--label", "bench")["token"]
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = self.root / "server.log"
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "kvreg", "serve", "--data", str(self.data)),
                    *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
                    *("--workers", str(self.workers)),
                ],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_http(f"{self.url}/api/v1/", self.proc, "kvreg serve", self.log_path)
        with self.http(self.admin_token) as c:
            ok(c.post("/users", json={"name": WRITER}), 201)
            self.writer_token = ok(c.post(f"/users/{WRITER}/tokens", json={"label": "bench"}), 201)["token"]

    def http(self, token: str) -> Any:
        import httpx

        return httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def namespace(self, name: str, public_key: Any) -> str:
        """A fresh namespace where the writer may write and ``public_key`` may sign."""
        with self.http(self.admin_token) as c:
            ok(c.post("/namespaces", json={"name": name}), 201)
            ok(c.put(f"/namespaces/{name}/roles/{WRITER}", json={"role": "write"}), 204)
            ok(c.post(f"/namespaces/{name}/keys", json={"public_key": public_key.to_text()}), 201)
        return name

    def client(self) -> Any:
        from kvreg.remote import RegistryClient

        return RegistryClient(self.url, self.writer_token)

    def cpu_seconds(self) -> float:
        """CPU seconds of the server's processes so far (its workers included)."""
        if self.proc is None:
            return float("nan")
        return sum(process_cpu_seconds(p) for p in process_tree(self.proc.pid))

    def reset_peak_rss(self) -> None:
        if self.proc is not None:
            for p in process_tree(self.proc.pid):
                reset_peak_rss(p)

    def peak_rss_mib(self) -> float:
        """The sum of the peak RSS of the server's processes since :meth:`reset_peak_rss`."""
        if self.proc is None:
            return float("nan")
        return sum(peak_rss_mib(p) for p in process_tree(self.proc.pid))

    def stored_files(self) -> tuple[dict[str, int], dict[str, int]]:
        """Everything in the object storage, looked at directly: ``({digest: size}, {other: size})``.

        ``other``: anything that is not an object (upload temp files, stray keys).
        """
        objects: dict[str, int] = {}
        other: dict[str, int] = {}
        if self.backend == "sqlite-folder":
            base = Path(self.storage_url)
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                rel = path.relative_to(base).parts
                if len(rel) == 3 and rel[0] == "objects" and len(rel[1]) == 2 and len(rel[2]) == 62:
                    objects[f"sha256:{rel[1]}{rel[2]}"] = path.stat().st_size
                else:
                    other["/".join(rel)] = path.stat().st_size
            return objects, other
        from services import s3_client

        bucket, _, prefix = self.storage_url.removeprefix("s3://").partition("/")
        client = s3_client(self.s3)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                rel = item["Key"][len(prefix) :].split("/")
                if len(rel) == 3 and rel[0] == "objects" and len(rel[1]) == 2 and len(rel[2]) == 62:
                    objects[f"sha256:{rel[1]}{rel[2]}"] = int(item["Size"])
                else:
                    other[item["Key"]] = int(item["Size"])
        return objects, other


def ok(response: Any, status: int) -> Any:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text}"
        )
    return response.json() if response.content else None


@contextlib.contextmanager
def running_registry(root: Path, backend: str, workers: int = 1) -> Iterator[Registry]:
    root.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
    env["KVREG_DATA"] = str(root / "data")
    with contextlib.ExitStack() as stack:
        registry = Registry(root, backend, env, storage_url=str(root / "data" / "objects"), workers=workers)
        if backend == "postgres-s3":
            sys.path.insert(0, str(ROOT / "tests"))
            from services import fresh_bucket, fresh_pg_database, s3_settings

            env["KVREG_DATABASE_URL"] = stack.enter_context(fresh_pg_database())
            bucket = stack.enter_context(fresh_bucket())
            registry.s3 = s3_settings()
            registry.storage_url = f"s3://{bucket}/kvreg/"
            env.update(
                KVREG_STORAGE=registry.storage_url,
                KVREG_S3_ENDPOINT=registry.s3["endpoint_url"],
                KVREG_S3_ACCESS_KEY=registry.s3["access_key"],
                KVREG_S3_SECRET_KEY=registry.s3["secret_key"],
                KVREG_S3_REGION=registry.s3["region"],
                KVREG_S3_REDIRECT="1",  # object GETs answer 307 to a presigned SeaweedFS URL
            )
        try:
            registry.start()
            yield registry
        finally:
            stop_process(registry.proc)


# --- measurements ------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb", buffering=0) as f:
        while block := f.read(4 * MIB):
            h.update(block)
    return "sha256:" + h.hexdigest()


def settle() -> None:
    """Write back dirty pages (untimed), so that no measurement pays for the previous one's writes."""
    os.sync()


@dataclass
class RawServer:
    """``python -m http.server`` on loopback serving one file; ``curl`` downloads it."""

    folder: Path
    name: str
    curl: str
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self) -> None:
        port = free_port()
        log_path = self.folder.parent / "http-server.log"
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "http.server", str(port)),
                    *("--bind", "127.0.0.1", "--directory", str(self.folder)),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{port}/{self.name}"
        wait_http(f"http://127.0.0.1:{port}/", self.proc, "python -m http.server", log_path, timeout=30)

    def download(self, dest: Path) -> dict[str, float]:
        assert self.proc is not None
        settle()
        reset_peak_rss(self.proc.pid)
        server_cpu = process_cpu_seconds(self.proc.pid)
        sample = run_child([self.curl, "-s", "-S", "-f", "-o", str(dest), self.url])
        sample["server_cpu_seconds"] = process_cpu_seconds(self.proc.pid) - server_cpu
        sample["server_peak_rss_mib"] = peak_rss_mib(self.proc.pid)
        # Not in the raw copy's time: what it would take to make the copy durable, as a push and
        # a pull make every object (curl leaves it in the page cache).
        started = time.perf_counter()
        fd = os.open(dest, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        sample["fsync_seconds"] = time.perf_counter() - started
        return sample


def curl_registry(
    curl: str, registry: Registry, work: Path, jobs: int, transfers: list[tuple[str, Path]], *, upload: bool
) -> dict[str, float]:
    """The server's side alone: ``curl --parallel`` GETs (or PUTs) the objects' URLs, no kvreg client.

    ``transfers``: (URL, file) pairs; downloads write the files, uploads send them.
    """
    header = work / "curl-auth"
    header.write_text(f"Authorization: Bearer {registry.writer_token}\nExpect:\n")
    config = work / "curl-config"
    option = "upload-file" if upload else "output"
    config.write_text("".join(f'url = "{url}"\n{option} = "{path}"\n' for url, path in transfers))
    command = [curl, "-s", "-S", "-f", "--parallel", "--parallel-max", str(jobs), "-H", f"@{header}"]
    command += ["--retry", "5", "--retry-delay", "1"]  # 503 from an overloaded S3 store: as kvreg retries
    command += ["-K", str(config)]
    if upload:
        command += ["-H", "Content-Type: application/octet-stream"]
    else:
        command += ["-L"]  # follow a redirect to presigned storage (curl keeps the token to itself)
    settle()
    registry.reset_peak_rss()
    server_cpu = registry.cpu_seconds()
    sample = run_child(command)
    sample["server_cpu_seconds"] = registry.cpu_seconds() - server_cpu
    sample["server_peak_rss_mib"] = registry.peak_rss_mib()
    return sample


def warm_up(
    args: argparse.Namespace, work: Path, registry: Registry, depositor: Depositor, raw: RawServer | None
) -> None:
    """One untimed round before the timed ones (a raw copy, a push, a pull of the artifact), so
    that every row measures a warm process, as a registry and a client that have run before:
    not the first call's imports, compiled SQL statements, buffers to map and fault in."""
    from kvreg.core.names import RefName
    from kvreg.remote import pull, push

    log("[transfer] warm-up round (untimed): raw, push, pull ...")
    if raw is not None:
        raw.download(work / "raw-warm-up.bin")
        (work / "raw-warm-up.bin").unlink()
    ns = registry.namespace("bench-warm-up", depositor.key.public_key)
    remote = RefName.parse(f"{ns}/big")
    with registry.client() as client:
        push(depositor.home, client, RefName.parse("bench/big"), remote_ref=remote, jobs=args.jobs)
    home = trusting_home(work / "pull-warm-up", ns, depositor.key.public_key)
    with registry.client() as client:
        pull(home, client, remote, jobs=args.jobs)
    shutil.rmtree(home.root)


def timed_call(registry: Registry, fn: Any, disk: str | None = None) -> tuple[Any, dict[str, float]]:
    """Run ``fn()``; its wall time, and the CPU seconds and peak RSS of this process and of the
    server meanwhile (this process's RSS before the call is reported too: it holds torch), and
    what the block device ``disk`` wrote and how long it was busy."""
    settle()
    registry.reset_peak_rss()
    reset_peak_rss(os.getpid())
    client_before = peak_rss_mib(os.getpid())
    disk_before = None if disk is None else disk_counters(disk)
    server_cpu = registry.cpu_seconds()
    client_cpu = time.process_time()
    t = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t
    sample = {
        "seconds": seconds,
        "server_cpu_seconds": registry.cpu_seconds() - server_cpu,
        "client_cpu_seconds": time.process_time() - client_cpu,
        "server_peak_rss_mib": registry.peak_rss_mib(),
        "client_peak_rss_mib": peak_rss_mib(os.getpid()),
        "client_rss_before_mib": client_before,
    }
    disk_after = None if disk is None else disk_counters(disk)
    if disk_before is not None and disk_after is not None:
        sample["disk_written_mib"] = disk_after[0] - disk_before[0]
        sample["disk_busy_seconds"] = disk_after[1] - disk_before[1]
    return result, sample


class PhaseTimer:
    """Wall time spent in ``Staging.install`` (staged objects copied into the store) during a pull."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def around_install(self) -> Iterator[None]:
        from kvreg.remote import staging

        original = staging.Staging.install

        def timed(this: Any, *args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return original(this, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        staging.Staging.install = timed  # type: ignore[method-assign]
        try:
            yield
        finally:
            staging.Staging.install = original  # type: ignore[method-assign]


def check_store(home: Any, manifest: Any) -> bool:
    """Every object of ``manifest`` is in ``home`` and hashes to its name (read from disk again)."""
    for d in [*manifest.object_digests(), manifest.digest]:
        if sha256_file(home.objects.path(d)) != str(d):
            return False
    return True


def measure_transfers(args: argparse.Namespace, work: Path, checks: dict[str, bool]) -> dict[str, Any]:
    from kvreg.core.names import RefName
    from kvreg.remote import pull, push

    tokens_wanted = round(args.size_mib * MIB / kv_bytes_per_token(BIG_MODEL))
    model_path = big_model_dir(args.out)
    lm = load(model_path, args.block_size, args.out / "cache")
    tokens = text_tokens(lm, tokens_wanted)
    depositor = Depositor.create(work / "depositor", "bench")
    log(f"[transfer] depositing {len(tokens)} tokens ({args.size_mib} MiB of KV) ...")
    t = time.perf_counter()
    manifest = depositor.deposit(lm, tokens, "big", "push/pull benchmark")
    deposit_seconds = time.perf_counter() - t
    del lm
    objects = manifest.object_digests()
    sizes = {d: depositor.home.objects.size(d) for d in objects}
    total = sum(sizes.values())
    log(f"[transfer] deposit took {deposit_seconds:.1f} s: {len(objects)} objects, {total / MIB:.1f} MiB")

    # The raw copy's source: the same bytes, in one file.
    raw_dir = work / "raw"
    raw_dir.mkdir()
    raw_file = raw_dir / "artifact.bin"
    with raw_file.open("wb") as f:
        for d in objects:
            with depositor.home.objects.path(d).open("rb") as src:
                shutil.copyfileobj(src, f, 4 * MIB)
    raw_digest = sha256_file(raw_file)
    curl = shutil.which("curl")
    raw_server = None
    if curl is None:
        log("[transfer] curl is not installed: no raw baseline (apt-get install curl)")
    else:
        raw_server = RawServer(raw_dir, raw_file.name, curl)
        raw_server.start()

    samples: dict[str, list[dict[str, float]]] = {
        "raw": [],
        "push": [],
        "pull": [],
        "curl_put_to_registry": [],
        "curl_get_from_registry": [],
        **{f"{row}_{way}": [] for row in OCI_ROWS for way in ("push", "pull")},
    }
    pushes: list[dict[str, Any]] = []
    pulls: list[dict[str, Any]] = []
    disk = disk_of(work)  # where the registry's objects and the pulled stores are written
    try:
        with running_registry(work / "registry", args.backend, args.server_workers) as registry:
            warm_up(args, work, registry, depositor, raw_server)
            for i in range(args.repeat):
                log(f"[transfer] round {i + 1}/{args.repeat}: raw, push, pull ...")
                if raw_server is not None:
                    dest = work / "raw-copy.bin"
                    samples["raw"].append(raw_server.download(dest))
                    checks.setdefault("raw_copy_identical", True)
                    checks["raw_copy_identical"] &= (
                        dest.stat().st_size == total and sha256_file(dest) == raw_digest
                    )
                    dest.unlink()

                ns = registry.namespace(f"bench-big-{i}", depositor.key.public_key)
                local = RefName.parse("bench/big")
                remote = RefName.parse(f"{ns}/big")
                with registry.client() as client:
                    report, sample = timed_call(
                        registry,
                        lambda client=client, local=local, remote=remote: push(
                            depositor.home, client, local, remote_ref=remote, jobs=args.jobs
                        ),
                        disk,
                    )
                samples["push"].append(sample)
                pushes.append(report.to_dict())
                checks.setdefault("push_sent_everything", True)
                checks["push_sent_everything"] &= (
                    report.objects_sent == len(objects) and report.bytes_sent == total and report.envelope_new
                )

                home = trusting_home(work / f"pull-{i}", ns, depositor.key.public_key)
                timer = PhaseTimer()
                with registry.client() as client, timer.around_install():
                    report, sample = timed_call(
                        registry,
                        lambda client=client, home=home, remote=remote: pull(
                            home, client, remote, jobs=args.jobs
                        ),
                        disk,
                    )
                sample["install_seconds"] = timer.seconds
                sample["download_seconds"] = sample["seconds"] - timer.seconds
                samples["pull"].append(sample)
                pulls.append(report.to_dict())
                checks.setdefault("pull_complete_and_verified", True)
                checks["pull_complete_and_verified"] &= (
                    report.digest == str(manifest.digest)
                    and report.objects_downloaded == len(objects)
                    and report.bytes_downloaded == total
                    and check_store(home, manifest)
                )
                shutil.rmtree(home.root)

                for row, kind in OCI_ROWS.items() if args.remote == "oci" else {}.items():
                    log(f"[transfer] round {i + 1}/{args.repeat}: push to, pull from OCI ({kind}) ...")
                    rounds = oci_round(args.jobs, work, depositor, manifest, i, kind, timed_call)
                    for way, (report, sample, ok) in rounds.items():
                        samples[f"{row}_{way}"].append(sample)
                        (pushes if way == "push" else pulls).append(report)
                        done = "sent_everything" if way == "push" else "complete_and_verified"
                        checks[f"{row}_{way}_{done}"] = checks.get(f"{row}_{way}_{done}", True) and ok

                if curl is not None:  # diagnostics: the registry's side alone, with curl as the client
                    base = f"{registry.url}/api/v1/namespaces"
                    got = work / "curl-get"
                    got.mkdir()
                    gets = [(f"{base}/{ns}/objects/{d}", got / d.hex) for d in objects]
                    samples["curl_get_from_registry"].append(
                        curl_registry(curl, registry, work, args.jobs, gets, upload=False)
                    )
                    checks.setdefault("curl_get_from_registry_complete", True)
                    checks["curl_get_from_registry_complete"] &= all(
                        path.stat().st_size == sizes[d] for d, (_, path) in zip(objects, gets, strict=True)
                    )
                    shutil.rmtree(got)
                    ns_put = registry.namespace(f"bench-curl-{i}", depositor.key.public_key)
                    puts = [(f"{base}/{ns_put}/objects/{d}", depositor.home.objects.path(d)) for d in objects]
                    samples["curl_put_to_registry"].append(
                        curl_registry(curl, registry, work, args.jobs, puts, upload=True)
                    )
                    with registry.client() as client:
                        checks.setdefault("curl_put_to_registry_complete", True)
                        checks["curl_put_to_registry_complete"] &= client.missing(ns_put, objects) == []
            server_log = tail(registry.log_path, 2000)
    finally:
        if raw_server is not None:
            stop_process(raw_server.proc)

    def summary(name: str) -> dict[str, Any] | None:
        runs = samples[name]
        if not runs:
            return None
        seconds = median([r["seconds"] for r in runs])
        out = {
            "seconds": seconds,
            "mib_per_s": total / MIB / seconds,
            "samples": runs,
        }
        for key in runs[0]:
            if key != "seconds":
                out[f"{key}_median"] = median([r[key] for r in runs])
        for side in ("server", "client"):
            out[f"{side}_cpu_s_per_gib"] = out[f"{side}_cpu_seconds_median"] * GIB / total
        return out

    raw, pushed, pulled = summary("raw"), summary("push"), summary("pull")
    assert pushed is not None and pulled is not None
    measured: dict[str, float | None] = {
        "push_over_raw": None if raw is None else raw["seconds"] / pushed["seconds"],
        "pull_over_raw": None if raw is None else raw["seconds"] / pulled["seconds"],
        "push_server_cpu_s_per_gib": pushed["server_cpu_s_per_gib"],
        "pull_client_cpu_s_per_gib": pulled["client_cpu_s_per_gib"],
    }
    durable = None if raw is None else raw["seconds"] + raw["fsync_seconds_median"]
    return {
        "model": {"arch": "llama", **BIG_MODEL},
        "kv_bytes_per_token": kv_bytes_per_token(BIG_MODEL),
        "tokens": len(tokens),
        "chunks": len(manifest.chunks),
        "chunk_bytes": sum(c.size for c in manifest.chunks),
        "objects": len(objects),
        "bytes": total,
        "manifest_digest": str(manifest.digest),
        "deposit_seconds": deposit_seconds,
        "disk": disk,
        "curl": curl,
        "raw": raw,
        "push": pushed,
        "pull": pulled,
        "diagnostics": {
            "curl_put_to_registry": summary("curl_put_to_registry"),
            "curl_get_from_registry": summary("curl_get_from_registry"),
        },
        **{f"{row}_{way}": summary(f"{row}_{way}") for row in OCI_ROWS for way in ("push", "pull")},
        "push_reports": pushes,
        "pull_reports": pulls,
        "ratios": {k: v for k, v in measured.items() if k not in AT_MOST},
        # No goal: against the raw copy plus an fsync of it (the durability a push and a pull pay).
        "raw_fsynced_seconds": durable,
        "ratios_to_raw_fsynced": None
        if durable is None
        else {"push": durable / pushed["seconds"], "pull": durable / pulled["seconds"]},
        "measured": measured,
        "goals_met": {k: goal_met(k, v) for k, v in measured.items()},
        "server_log_tail": server_log if server_log.strip() else "",
    }


def goal_met(name: str, value: float | None) -> bool | None:
    if value is None:
        return None
    return value <= GOALS[name] if name in AT_MOST else value >= GOALS[name]


def suffix_tokens(lm: Any, i: int) -> list[int]:
    """A short text of its own for artifact ``i`` (about 10 to 150 tokens)."""
    from kvreg.engine.tiny import CORPUS

    lines = [line for line in CORPUS.splitlines() if line.strip()]
    text = "\n".join(f"Variant {i}.{k}: {lines[(i + k) % len(lines)]}" for k in range(1 + i % 4))
    return lm.encode(text, first=False)


def measure_dedupe(args: argparse.Namespace, work: Path, checks: dict[str, bool]) -> dict[str, Any]:
    from kvreg.core.names import RefName
    from kvreg.remote import push

    if args.prefix_tokens % args.block_size:
        raise SystemExit(f"--prefix-tokens {args.prefix_tokens} is not a multiple of --block-size")
    lm = load(small_model_dir(args.out), args.block_size, args.out / "cache")
    prefix = text_tokens(lm, args.prefix_tokens, salt="p")
    depositor = Depositor.create(work / "depositor-dedupe", "dd")
    log(f"[dedupe] depositing {args.artifacts} artifacts sharing a {len(prefix)}-token prefix ...")
    t = time.perf_counter()
    manifests = []
    suffix_lengths = []
    for i in range(args.artifacts):
        suffix = suffix_tokens(lm, i)
        suffix_lengths.append(len(suffix))
        manifests.append(depositor.deposit(lm, prefix + suffix, f"a{i:03d}", f"variant {i}"))
    deposit_seconds = time.perf_counter() - t
    prefix_blocks = args.prefix_tokens // args.block_size
    shared = {tuple(c.digest for c in m.chunks[:prefix_blocks]) for m in manifests}
    checks["dedupe_prefix_chunks_identical"] = len(shared) == 1

    sizes: dict[str, int] = {}
    logical = logical_chunks = 0
    chunk_digests: set[str] = set()
    for m in manifests:
        for d in [*m.object_digests(), m.digest]:
            size = depositor.home.objects.size(d)
            sizes[str(d)] = size
            logical += size
        for c in m.chunks:
            chunk_digests.add(str(c.digest))
            logical_chunks += c.size
    unique_bytes = sum(sizes.values())
    unique_chunk_bytes = sum(sizes[d] for d in chunk_digests)
    expected_chunks = prefix_blocks + sum(-(-n // args.block_size) for n in suffix_lengths)

    log(f"[dedupe] pushing {args.artifacts} artifacts into one namespace of a fresh registry ...")
    with running_registry(work / "registry-dedupe", args.backend) as registry:
        ns = registry.namespace("bench-dedupe", depositor.key.public_key)
        bytes_sent = 0
        t = time.perf_counter()
        with registry.client() as client:
            for i in range(args.artifacts):
                report = push(
                    depositor.home,
                    client,
                    RefName.parse(f"dd/a{i:03d}"),
                    remote_ref=RefName.parse(f"{ns}/a{i:03d}"),
                    jobs=args.jobs,
                )
                bytes_sent += report.bytes_sent
        push_seconds = time.perf_counter() - t
        stored, other = registry.stored_files()
    stored_bytes = sum(stored.values())
    stored_chunk_bytes = sum(size for d, size in stored.items() if d in chunk_digests)
    checks["dedupe_stored_equals_unique"] = (
        set(stored) == set(sizes) and stored == sizes and stored_bytes == unique_bytes and not other
    )
    checks["dedupe_stored_chunks_equal_unique_chunks"] = (
        stored_chunk_bytes == unique_chunk_bytes and len(chunk_digests) == expected_chunks
    )
    checks["dedupe_sent_only_unique"] = bytes_sent == unique_bytes - sum(
        sizes[str(m.digest)] for m in manifests
    )
    return {
        "artifacts": args.artifacts,
        "prefix_tokens": args.prefix_tokens,
        "block_size": args.block_size,
        "suffix_tokens": {
            "min": min(suffix_lengths),
            "max": max(suffix_lengths),
            "total": sum(suffix_lengths),
        },
        "deposit_seconds": deposit_seconds,
        "push_seconds": push_seconds,
        "bytes_sent": bytes_sent,
        "logical_bytes": logical,
        "logical_chunk_bytes": logical_chunks,
        "unique_objects": len(sizes),
        "unique_bytes": unique_bytes,
        "unique_chunks": len(chunk_digests),
        "expected_unique_chunks": expected_chunks,
        "unique_chunk_bytes": unique_chunk_bytes,
        "stored_objects": len(stored),
        "stored_bytes": stored_bytes,
        "stored_chunk_bytes": stored_chunk_bytes,
        "stored_other_files": other,
        "ratio": logical / stored_bytes if stored_bytes else None,
        "chunk_ratio": logical_chunks / stored_chunk_bytes if stored_chunk_bytes else None,
    }


# --- report ----------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import httpx
    import uvicorn

    import kvreg

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=False
        ).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    flags: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                flags = [f for f in ("sha_ni", "avx2", "avx512f") if f in present]
                break
    curl = shutil.which("curl")
    curl_version = None
    if curl is not None:
        curl_version = subprocess.run(
            [curl, "--version"], capture_output=True, text=True, check=False
        ).stdout.split("\n")[0]
        curl_version = " ".join(curl_version.split()[:2])  # "curl 7.88.1"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "cpu_flags": flags,
        "python": platform.python_version(),
        "kvreg": kvreg.__version__,
        "uvicorn": uvicorn.__version__,
        "http parser": "httptools" if importlib.util.find_spec("httptools") else "h11",
        "httpx": httpx.__version__,
        "o_direct": o_direct_supported(ROOT / "bench"),
        "curl": curl_version,
        "sha256_cpu_s_per_gib": sha256_cpu_s_per_gib(),
        "receive_and_hash_cpu_s_per_gib": receive_and_hash_cpu_s_per_gib(),
    }


def source_state() -> dict[str, Any]:
    """The commit measured, and whether client/ or registry/ differ from it (None: not a git checkout)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "client", "registry"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "client_or_registry_modified": None}
    return {"commit": commit, "client_or_registry_modified": bool(changes)}


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    t = report["transfer"]
    d = report["dedupe"]
    lines: list[str] = [
        f"machine: {m['nproc']} CPUs, {m['cpu']} ({' '.join(m['cpu_flags']) or 'no sha_ni/avx'}), "
        f"python {m['python']}, uvicorn {m['uvicorn']} "
        f"({m['http parser']}), httpx {m['httpx']}, {m['curl'] or 'no curl'}, "
        f"O_DIRECT {'yes' if m['o_direct'] else 'no'}; SHA-256 alone "
        f"{m['sha256_cpu_s_per_gib']:.2f} CPU s per GiB; a loopback socket read and hashed, nothing "
        f"else (the floor of both CPU goals): {m['receive_and_hash_cpu_s_per_gib']:.2f}",
        "load average (1 min) at start {:.2f}, at end {:.2f}".format(*report["load_average"]),
        "source: commit {} ({})".format(
            (report["source"]["at_start"]["commit"] or "unknown")[:12],
            {
                (False, False): "client/ and registry/ unmodified",
                (None, None): "not a git checkout",
            }.get(
                (
                    report["source"]["at_start"]["client_or_registry_modified"],
                    report["source"]["at_end"]["client_or_registry_modified"],
                ),
                "client/ or registry/ MODIFIED in the working tree",
            ),
        ),
        f"registry: kvreg serve ({report['backend']}, {report['server_workers']} worker"
        f"{'s' if report['server_workers'] != 1 else ''}) on 127.0.0.1; client: kvreg.remote push/pull, "
        f"{report['jobs']} jobs; medians of {report['repeat']} rounds (raw, push, pull); "
        "reads from the page cache",
        "",
        f"artifact: {t['tokens']} tokens, {t['chunks']} chunks of {report['block_size']} tokens, "
        f"{t['objects']} objects, {t['bytes'] / MIB:.1f} MiB (a real deposit: {t['deposit_seconds']:.0f} s)",
        f"  {'':36}{'seconds':>8}{'MiB/s':>7}{'CPU s per GiB':>17}{'peak RSS MiB':>17}",
        f"  {'':36}{'':>8}{'':>7}{'server':>9}{'client':>8}{'server':>9}{'client':>8}",
    ]
    diagnostics = t["diagnostics"]
    rows = [
        ("raw: http.server -> curl", t["raw"]),
        ("kvreg push (fresh namespace)", t["push"]),
        ("kvreg pull (fresh store)", t["pull"]),
        (f"diagnostic: curl x{report['jobs']} PUT -> serve", diagnostics["curl_put_to_registry"]),
        (f"diagnostic: serve -> curl x{report['jobs']} GET", diagnostics["curl_get_from_registry"]),
    ]
    for row, label in OCI_LABELS.items():
        if t.get(f"{row}_push") is not None:
            rows += [(f"kvreg {way} {arrow} {label}", t[f"{row}_{way}"]) for way, arrow in PUSH_PULL]
    for label, r in rows:
        if r is None:
            lines.append(f"  {label:36}{'(not measured: no curl)':>40}")
            continue
        lines.append(
            f"  {label:36}{r['seconds']:8.2f}{r['mib_per_s']:7.0f}"
            f"{r['server_cpu_s_per_gib']:9.2f}{r['client_cpu_s_per_gib']:8.2f}"
            f"{r['server_peak_rss_mib_median']:9.0f}{r['client_peak_rss_mib_median']:8.0f}"
        )
        if r is t["pull"]:
            lines.append(
                f"    of which Staging.install (staged objects into the store) "
                f"{r['install_seconds_median']:.2f} s, the rest (ref, envelope, downloads) "
                f"{r['download_seconds_median']:.2f} s"
            )
        if "disk_busy_seconds_median" in r:  # the push and pull rows, where the work folder is on a disk
            lines.append(disk_line(t.get("disk"), r))
    if t.get("raw_fsynced_seconds") is not None:
        lines.append(
            f"  raw copy, then an fsync of it: {t['raw_fsynced_seconds']:.2f} s (fsync "
            f"{t['raw']['fsync_seconds_median']:.2f} s); push / that "
            f"{t['ratios_to_raw_fsynced']['push']:.2f}, pull / that {t['ratios_to_raw_fsynced']['pull']:.2f} "
            "(no goal)"
        )
    lines.append(
        f"  the client's RSS before a push or pull (this process, torch loaded): "
        f"{t['push']['client_rss_before_mib_median']:.0f} MiB"
    )
    for key, label in (
        ("push_over_raw", "push / raw throughput"),
        ("pull_over_raw", "pull / raw throughput"),
        ("push_server_cpu_s_per_gib", "server CPU s per GiB pushed"),
        ("pull_client_cpu_s_per_gib", "client CPU s per GiB pulled"),
    ):
        value = t["measured"][key]
        if value is None:
            lines.append(f"  {label:36}   not measured (no curl)")
        else:
            met = "met" if t["goals_met"][key] else "NOT met"
            sign = "<=" if key in AT_MOST else ">="
            lines.append(f"  {label:36}{value:8.2f}   goal {sign} {GOALS[key]:.2f}: {met}")
    if d is None:
        lines += ["", "dedupe: not measured (--transfers-only)"]
    else:
        lines += [
            "",
            f"dedupe: {d['artifacts']} artifacts, a shared {d['prefix_tokens']}-token prefix + "
            f"{d['suffix_tokens']['min']}-{d['suffix_tokens']['max']} tokens each, "
            f"blocks of {d['block_size']}",
            *(
                f"  {label:60}{value:>16,}"
                for label, value in (
                    ("logical bytes (every object of every artifact, manifests)", d["logical_bytes"]),
                    (f"unique objects' bytes ({d['unique_objects']} objects)", d["unique_bytes"]),
                    (f"stored in the registry's storage ({d['stored_objects']} files)", d["stored_bytes"]),
                    (f"unique chunks' bytes ({d['unique_chunks']} chunks)", d["unique_chunk_bytes"]),
                    ("stored chunk bytes", d["stored_chunk_bytes"]),
                )
            ),
            f"  dedupe ratio logical / stored {d['ratio']:.2f}x (chunks only {d['chunk_ratio']:.2f}x); "
            f"pushes sent {d['bytes_sent']:,} bytes in {d['push_seconds']:.1f} s",
        ]
    lines += [
        "",
        "checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in report["checks"].items()),
    ]
    return "\n".join(lines) + "\n"


def disk_line(device: str | None, r: dict[str, Any]) -> str:
    """The disk's share of a transfer: busy most of its wall time means the disk set the pace."""
    busy, seconds = r["disk_busy_seconds_median"], r["seconds"]
    line = (
        f"    disk {device}: busy {busy:.2f} s of the {seconds:.2f} s ({busy / seconds:.0%}), "
        f"{r['disk_written_mib_median']:.0f} MiB written"
    )
    if busy >= DISK_BOUND * seconds:
        line += ": bound by the disk"
    return line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--size-mib", type=int, default=None, help="KV of the artifact in MiB (default 1024, --quick 64)"
    )
    p.add_argument(
        "--repeat", type=int, default=None, help="rounds of raw, push, pull (default 5, --quick 1)"
    )
    p.add_argument(
        "--artifacts", type=int, default=None, help="artifacts of the dedupe test (default 100, --quick 10)"
    )
    p.add_argument("--prefix-tokens", type=int, default=1024, help="their shared prefix (default 1024)")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument(
        "--jobs", type=int, default=4, help="objects in flight in push and pull (the CLI's default 4)"
    )
    p.add_argument("--backend", choices=("sqlite-folder", "postgres-s3"), default="sqlite-folder")
    p.add_argument(
        "--remote",
        choices=("kvreg", "oci"),
        default="kvreg",
        help="oci: also push the deposit to, and pull it from, the two open OCI registries of the\n"
        "test services (CNCF distribution on a folder, and on S3 redirecting blob downloads to\n"
        "presigned URLs; make services), beside the kvreg rows",
    )
    p.add_argument(
        "--server-workers", type=int, default=1, help="kvreg serve --workers for the transfers (default 1)"
    )
    p.add_argument("--quick", action="store_true", help="64 MiB, 10 artifacts, one round: a smoke test")
    p.add_argument(
        "--transfers-only", action="store_true", help="skip the dedupe part (e.g. for --size-mib 4096)"
    )
    p.add_argument("--keep", action="store_true", help="keep the work folder (stores, registry data)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="models and work folder (default bench/out)")
    args = p.parse_args(argv)
    args.size_mib = args.size_mib or (64 if args.quick else 1024)
    args.repeat = args.repeat or (1 if args.quick else 5)
    args.artifacts = args.artifacts or (10 if args.quick else 100)
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    source = source_state()
    work = Path(tempfile.mkdtemp(prefix="push-pull-", dir=args.out))
    checks: dict[str, bool] = {}
    try:
        transfer = measure_transfers(args, work, checks)
        shutil.rmtree(work / "raw", ignore_errors=True)
        dedupe = None if args.transfers_only else measure_dedupe(args, work, checks)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "bench": "push_pull",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "quick": args.quick,
        "backend": args.backend,
        "remote": args.remote,
        "jobs": args.jobs,
        "server_workers": args.server_workers,
        "repeat": args.repeat,
        "block_size": args.block_size,
        "machine": machine(),
        "source": {"at_start": source, "at_end": source_state()},
        "goals": GOALS,
        "transfer": transfer,
        "dedupe": dedupe,
        "checks": checks,
        "ok": all(checks.values()),
        "load_average": [load_start, os.getloadavg()[0]],
        "wall_seconds": time.perf_counter() - started,
    }
    print(render(report), end="")
    print(f"(wall time {report['wall_seconds']:.0f} s{'; work folder ' + str(work) if args.keep else ''})")
    print(json.dumps(report, separators=(",", ":")))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
