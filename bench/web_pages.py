"""Server time of every web UI page on the registry ``kvreg demo`` leaves behind.

``kvreg demo --task addition`` (seconds) runs in a fresh work folder with the source tree
under test; then ``kvreg serve`` serves the registry it left (SQLite + a folder) on
127.0.0.1, an admin token is made with ``kvreg_registry.admin``, and each page is fetched
``--samples`` times, signed out, and signed in as the admin (the web sign-in form, as a
browser does). A request's wall time on loopback is its server time plus well under a
millisecond; medians are reported per page, with the HTTP status (a page that does not
exist in the tree under test reads 404 and is left out of the comparison).

    .venv/bin/python bench/web_pages.py                       # this tree
    .venv/bin/python bench/web_pages.py --before DIR          # also DIR (another checkout), side by side
    .venv/bin/python bench/web_pages.py --demo-report FILE    # this tree, on a demo already run

``--demo-report FILE`` skips the demo: FILE is the JSON report of a finished ``kvreg demo
--json`` run whose registry data folder (``registry.data`` in it) is served instead; the
bench adds its admin user and token there. The smoke test uses it to share the suite's one
demo run.

The last line of stdout is the report as JSON. Exit 1 if a page answers 5xx.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
ADMIN = "page-bench-admin"


def run_json(source: Path, args: list[str], env: dict[str, str]) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", *args], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(args[:3])} failed in {source}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def source_env(source: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVREG_")}
    env["PYTHONPATH"] = f"{source / 'client'}{os.pathsep}{source / 'registry'}"
    env["KVREG_HOME"] = str(home)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    if m is None:
        raise RuntimeError("no CSRF field on the sign-in page")
    return m.group(1)


def pages_of(report: dict[str, Any], seqs: list[int]) -> list[str]:
    """The pages to time: every kind of page the UI has, on the demo's own content."""
    fw_refs = report["flywheel"]["library"]["refs"]
    fw_ref = fw_refs[0]
    pages = [
        "/",
        "/?q=add",
        "/?q=%21%21%21",
        "/ns",
        "/ns/demo",
        "/ns/flywheel",
        "/ns/demo/refs/p07",
        f"/ns/{fw_ref.split('/')[0]}/refs/{fw_ref.split('/', 1)[1]}",
        f"/compare?a={fw_refs[0]}&b={fw_refs[-1]}",
        "/compare?a=demo/p07&b=demo/p07",
        "/audit",
        "/signin",
        "/admin",
        "/no/such/page",
    ]
    pages += [f"/audit/entries/{seq}" for seq in seqs]
    return pages


def measure(source: Path, samples: int, work: Path, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the demo with ``source`` (unless ``report`` is one already run), then time every page."""
    home = work / "unused-home"
    env = source_env(source, home)
    if report is None:
        workdir = work / "demo"
        report = run_json(
            source, ["kvreg", "demo", "--workdir", str(workdir), "--json", "--task", "addition"], env
        )
    data = Path(report["registry"]["data"])
    admin = [sys.executable, "-m", "kvreg_registry.admin", "--data", str(data), "--json"]
    subprocess.run([*admin, "user", "create", ADMIN, "--admin"], env=env, check=True, capture_output=True)
    made = subprocess.run(
        [*admin, "token", "create", ADMIN, "--label", "page bench"], env=env, check=True, capture_output=True
    )
    token = json.loads(made.stdout)["token"]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvreg",
            "serve",
            "--data",
            str(data),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/v1/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit(f"kvreg serve did not start for {source}")
            time.sleep(0.2)
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, timeout=30, follow_redirects=False) as client:
            # two audit entries to open: the first, and one from the middle of the log
            size = client.get("/api/v1/log/entries", params={"start": 0, "end": 1}, headers=auth).json()[
                "size"
            ]
            seqs = [0, size // 2]
            pages = pages_of(report, seqs)
            result: dict[str, Any] = {}
            for who in ("signed out", "admin"):
                if who == "admin":
                    form = client.get("/signin")
                    signed = client.post(
                        "/signin", data={"token": token, "csrf": csrf_of(form.text), "next": "/"}
                    )
                    if signed.status_code != 303:
                        sys.exit(f"sign-in failed for {source}: {signed.status_code}")
                for page in pages:
                    # A page that redirects (an artifact's ref to its digest, a private page to the
                    # sign-in) is timed where it lands; the warm-up request finds where that is.
                    landed = client.get(page, follow_redirects=True)
                    target = landed.url.raw_path.decode()
                    times, status = [], 0
                    for _ in range(samples):
                        t = time.perf_counter()
                        r = client.get(target)
                        times.append((time.perf_counter() - t) * 1000)
                        status = r.status_code
                    shown = page if target == page else f"{page} -> {target.split('?')[0][:24]}"
                    result[f"{who} {shown}"] = {"status": status, "ms": statistics.median(times)}
            return result
    finally:
        server.terminate()
        server.wait(20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--before", type=Path, help="another checkout to measure first, side by side")
    ap.add_argument(
        "--demo-report",
        type=Path,
        help="the JSON report of a `kvreg demo --json` run already made with this tree: serve its registry",
    )
    args = ap.parse_args()
    if args.demo_report is not None and args.before is not None:
        ap.error("--demo-report measures this tree only: it cannot be used with --before")
    demo = None if args.demo_report is None else json.loads(args.demo_report.read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="web-pages-"))
    try:
        runs: dict[str, dict[str, Any]] = {}
        if args.before is not None:
            runs["before"] = measure(args.before.resolve(), args.samples, work / "before")
        runs["this tree"] = measure(REPO, args.samples, work / "after", demo)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = list(runs)
    keys = list(dict.fromkeys(k for r in runs.values() for k in r))
    print(f"{'page':58}" + "".join(f"{n:>18}" for n in names))
    bad = False
    for key in keys:
        cells = []
        for n in names:
            cell = runs[n].get(key)
            if cell is None:
                cells.append(f"{'-':>18}")
                continue
            bad |= cell["status"] >= 500
            cells.append(f"{cell['ms']:>10.1f} ms {cell['status']:>3}")
        print(f"{key[:58]:58}" + "".join(cells))
    print(json.dumps({"bench": "web_pages", "samples": args.samples, "runs": runs}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
