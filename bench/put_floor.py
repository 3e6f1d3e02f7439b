"""The floor of a registry's upload cost on this host: a minimal Python server that does only
the per-byte work of an object PUT, measured with the same curl upload as bench/push_pull.py.

The server (this script run with ``--serve PORT DIR``) reads one request per connection: it
reads into a page-aligned buffer, hashes with SHA-256, writes whole buffers with
``O_DIRECT`` (``kvreg.fileio.directio.AlignedWriter``) and fsyncs the file; no HTTP framework,
no database, no authentication. The driver makes ``--objects`` files of ``--object-mib`` random
bytes, PUTs them with ``curl --parallel --parallel-max 4`` and prints the wall time and the
server's CPU seconds per GiB. docs/benchmarks.md compares it with ``kvreg serve``'s figure.

    .venv/bin/python bench/put_floor.py [--objects 64] [--object-mib 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client"))


def serve(port: int, folder: Path) -> None:
    from kvreg.fileio.directio import AlignedWriter

    def handle(conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                piece = conn.recv(65536)
                if not piece:
                    return
                head += piece
            header, _, body = head.partition(b"\r\n\r\n")
            length = 0
            for line in header.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            fd = os.open(
                folder / f"{time.time_ns()}-{threading.get_ident()}", os.O_WRONLY | os.O_CREAT, 0o644
            )
            writer, digest = AlignedWriter(fd), hashlib.sha256(body)
            writer.write(body)
            got = len(body)
            while got < length:
                view = writer.free()
                n = conn.recv_into(view, min(len(view), length - got))
                if not n:
                    return
                digest.update(view[:n])
                writer.advance(n)
                got += n
            writer.close()
            os.fsync(fd)
            os.close(fd)
            reply = digest.hexdigest().encode()
            conn.sendall(
                b"HTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                % (len(reply), reply)
            )

    listener = socket.create_server(("127.0.0.1", port))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=64)
    ap.add_argument("--object-mib", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", nargs=2, metavar=("PORT", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(int(args.serve[0]), Path(args.serve[1]))
        return
    curl = shutil.which("curl")
    if curl is None:
        sys.exit("curl is needed (apt-get install curl)")
    work = Path(
        tempfile.mkdtemp(
            prefix="put-floor-", dir=REPO / "bench" / "out" if (REPO / "bench" / "out").is_dir() else None
        )
    )
    try:
        sources, digests = [], set()
        for i in range(args.objects):
            path = work / f"object-{i}"
            data = os.urandom(args.object_mib << 20)
            path.write_bytes(data)
            sources.append(path)
            digests.add(hashlib.sha256(data).hexdigest())
        received = work / "received"
        received.mkdir()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(received)])
        try:
            time.sleep(1.0)
            gib = args.objects * args.object_mib / 1024
            command = [
                curl,
                "-sSf",
                "--no-progress-meter",
                "-H",
                "Expect:",
                "--parallel",
                "--parallel-max",
                "4",
            ]
            for path in sources:
                command += ["-T", str(path), f"http://127.0.0.1:{port}/{path.name}", "-o", "/dev/null"]
            for r in range(args.rounds):
                os.sync()
                cpu, t = cpu_seconds(server.pid), time.perf_counter()
                subprocess.run(command, check=True)
                seconds, used = time.perf_counter() - t, cpu_seconds(server.pid) - cpu
                print(f"round {r + 1}: {seconds:.2f} s, server {used / gib:.2f} CPU s per GiB", flush=True)
                got = set()
                for f in received.iterdir():
                    with f.open("rb") as stored:
                        got.add(hashlib.file_digest(stored, "sha256").hexdigest())
                    f.unlink()
                if got != digests:  # the floor of a server that loses bytes would mean nothing
                    sys.exit(f"round {r + 1}: the server stored other bytes than were sent")
        finally:
            server.kill()
            server.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
