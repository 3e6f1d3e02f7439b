"""The OCI rows of bench/push_pull.py (``--remote oci``): the same deposit pushed to, and pulled
from, the open OCI registries of the test services (``scripts/services.sh``).

Two registries, both Debian's ``docker-registry`` (CNCF distribution 2.8) on loopback:

- ``filesystem``: blobs in a folder; the registry serves every byte itself;
- ``s3``: blobs in SeaweedFS through distribution's S3 driver; every blob ``GET`` and
  ``HEAD`` is answered with a ``307`` to a presigned URL of the store, which the client
  then reads directly (as from GHCR, Docker Hub, ECR and the other registries on object
  storage). Its "server" CPU and memory are the registry's process and SeaweedFS's
  together, since the bytes go through both.

Each round pushes to a fresh repository (every blob and the kvreg manifest sent, then
the artifact and signature manifests, the referrers tag and the tag) and pulls into a
fresh store (signature, layers against the manifest, every blob hashed while it streams),
timed as the kvreg rows are (``push_pull.timed_call``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Report keys of the OCI rows and the registry each measures.
OCI_ROWS = {"oci": "filesystem", "oci_s3": "s3"}
#: How the text report names them.
OCI_LABELS = {"oci": "OCI (folder)", "oci_s3": "OCI on S3 (307s)"}
PUSH_PULL = (("push", "->"), ("pull", "<-"))


def _pid(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return -1


class OciServer:
    """One open OCI registry of the test services: its URL, and the processes whose CPU and
    memory the rows report (the ``Registry`` methods ``timed_call`` reads)."""

    def __init__(self, kind: str) -> None:
        if str(ROOT / "tests") not in sys.path:
            sys.path.insert(0, str(ROOT / "tests"))
        from services import ENV_FILE, oci_open_registry, oci_s3_registry

        services = ENV_FILE.parent
        if kind == "s3":
            self.url = oci_s3_registry()["url"]
            self.pids = [_pid(services / "oci" / "s3" / "registry.pid"), _pid(services / "weed" / "weed.pid")]
        else:
            self.url = oci_open_registry()["url"]
            self.pids = [_pid(services / "oci" / "open" / "registry.pid")]
        self.host = self.url.removeprefix("http://")

    def cpu_seconds(self) -> float:
        from push_pull import process_cpu_seconds

        return sum(process_cpu_seconds(pid) for pid in self.pids)

    def reset_peak_rss(self) -> None:
        from push_pull import reset_peak_rss

        for pid in self.pids:
            reset_peak_rss(pid)

    def peak_rss_mib(self) -> float:
        from push_pull import peak_rss_mib

        return sum(peak_rss_mib(pid) for pid in self.pids)


def oci_round(
    jobs: int, work: Path, depositor: Any, manifest: Any, i: int, kind: str, timed_call: Any
) -> dict[str, tuple[dict[str, Any], dict[str, float], bool]]:
    """Push the deposit to a fresh repository of the ``kind`` registry, then pull it into a
    fresh store: for ``push`` and ``pull``, the report, the sample, and whether it moved (and
    verified) everything."""
    import shutil

    from kvreg.core.names import RefName
    from kvreg.remote.oci.client import OciClient
    from kvreg.remote.oci.pulling import pull as oci_pull
    from kvreg.remote.oci.pushing import push as oci_push
    from kvreg.remote.remotes import parse_oci_url
    from push_pull import check_store, trusting_home

    server = OciServer(kind)
    repository = f"oci://{server.host}/bench{os.getpid()}x{int(time.time())}x{kind}{i}"
    location = parse_oci_url(repository, insecure=True)
    ref = RefName.parse("bench/big")
    objects = manifest.object_digests()
    total = sum(depositor.home.objects.size(d) for d in objects)
    with OciClient(location) as client:
        pushed, push_sample = timed_call(server, lambda: oci_push(depositor.home, client, ref, jobs=jobs))
    push_ok = pushed.objects_sent == len(objects) + 1 and pushed.bytes_sent == total + len(manifest.raw_bytes)
    home = trusting_home(work / f"oci-pull-{kind}-{i}", "bench", depositor.key.public_key)
    with OciClient(location) as client:
        pulled, pull_sample = timed_call(server, lambda: oci_pull(home, client, ref, jobs=jobs))
    pull_ok = (
        pulled.digest == str(manifest.digest)
        and pulled.objects_downloaded == len(objects)
        and pulled.bytes_downloaded == total
        and check_store(home, manifest)
    )
    shutil.rmtree(home.root)
    return {
        "push": (pushed.to_dict(), push_sample, push_ok),
        "pull": (pulled.to_dict(), pull_sample, pull_ok),
    }
