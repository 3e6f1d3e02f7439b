"""The OCI registries the OCI tests run against, and how a test reaches into their storage.

Two open (no authentication) CNCF distribution registries of ``make services``:

- ``filesystem``: blobs in a folder, served by the registry itself;
- ``s3``: blobs in SeaweedFS through distribution's S3 driver, every blob ``GET`` and
  ``HEAD`` answered with a ``307`` to a presigned URL of the store (another origin),
  as GHCR, Docker Hub, ECR, GAR, Quay and Harbor on object storage answer.

:class:`OciTarget` reads and writes a blob's stored bytes behind the registry's back,
for the tests that tamper with storage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services import oci_blob_key, oci_blob_path, oci_open_registry, oci_s3_registry, s3_client, s3_settings

from .proxy import STORAGE_PREFIX

KINDS = ("filesystem", "s3")


@dataclass(frozen=True)
class OciTarget:
    kind: str
    url: str
    root: str = ""
    bucket: str = ""
    storage: str | None = None  # the origin blob downloads are redirected to

    @property
    def blob_download(self) -> re.Pattern[str]:
        """The request path of a blob's bytes as a :class:`~.proxy.StallingProxy` sees it: the
        registry's blob GET, or (redirected through the proxy) the storage's."""
        if self.storage is not None:
            return re.compile(rf"{STORAGE_PREFIX}/.*/blobs/sha256/[0-9a-f]{{2}}/[0-9a-f]{{64}}/data(\?|$)")
        return re.compile(r"/v2/.+/blobs/sha256:[0-9a-f]{64}$")

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def read_blob(self, digest: str) -> bytes:
        if self.kind == "s3":
            answer = s3_client().get_object(Bucket=self.bucket, Key=oci_blob_key(digest))
            data: bytes = answer["Body"].read()
            return data
        return oci_blob_path(self.root, digest).read_bytes()

    def write_blob(self, digest: str, data: bytes) -> None:
        """Overwrite the stored bytes of blob ``digest`` (the registry is not told)."""
        if self.kind == "s3":
            s3_client().put_object(Bucket=self.bucket, Key=oci_blob_key(digest), Body=data)
        else:
            oci_blob_path(self.root, digest).write_bytes(data)


def oci_target(kind: str) -> OciTarget:
    if kind == "s3":
        s3 = oci_s3_registry()
        return OciTarget("s3", s3["url"], bucket=s3["bucket"], storage=s3_settings()["endpoint_url"])
    reg = oci_open_registry()
    return OciTarget("filesystem", reg["url"], root=reg["root"])
