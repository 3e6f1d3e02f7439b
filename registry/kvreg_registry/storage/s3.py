"""Object storage in an S3-compatible store (SeaweedFS, MinIO, Ceph RGW, AWS S3).

Objects are the keys ``<prefix>objects/ab/<remaining 62 hex>``; uploads in
progress use ``<prefix>tmp/<uuid>``. Keys are built only from a validated
:class:`Digest`, a prefix validated when the storage is made, and fresh UUIDs.

How an upload becomes visible, without the bytes coming back through Python:

- up to ``multipart_threshold`` bytes are buffered in memory; a commit below it
  verifies the digest on the buffer and puts the object at its final key;
- past the threshold, a multipart upload to a temp key starts and parts of
  ``part_size`` are sent as they fill (hashed on the way). At commit the digest
  is checked first: a mismatch aborts the multipart upload. A match completes
  it, copies the temp key server-side to the final key, and deletes the temp key.

Both final writes are conditional (``If-None-Match: *``) where the store honours
it (AWS S3, SeaweedFS, recent MinIO): concurrent commits of one digest all
succeed, the object is written once and exactly one commit reports it as new.
A store that refuses the header with ``501 NotImplemented`` gets unconditional
writes instead (after a ``HEAD``): then two racing commits may both report the
object as new, but as the key is the digest of verified bytes, the stored bytes
are right either way. Objects over 5 GiB are copied with a multipart copy, which
S3 cannot make conditional; the same reasoning holds.

A crash leaves a pending multipart upload or a temp key; :meth:`S3Storage.sweep_incomplete`
removes those older than a limit. Every failure to reach the store is raised as
``UnavailableError`` (HTTP 503 at the API): the boto3 client retries first.
This module does not create buckets.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar, NoReturn

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kvreg.core.digest import Digest
from kvreg.core.errors import ConfigError, UnavailableError
from kvreg_registry.storage.base import (
    PROBE_AREA,
    READ_PIECE,
    ObjectStorage,
    PendingObject,
    StoredObject,
    check_range,
    digest_from_parts,
    not_found,
    probe_bytes,
    shard_parts,
)
from kvreg_registry.storage.s3_names import validate_bucket, validate_prefix

log = logging.getLogger(__name__)

MIB = 1 << 20
GIB = 1 << 30
DEFAULT_MULTIPART_THRESHOLD = 8 * MIB
DEFAULT_PART_SIZE = 8 * MIB
DEFAULT_MAX_CONCURRENCY = 10
#: S3's smallest part (all but the last), and the largest single CopyObject.
MIN_PART_SIZE = 5 * MIB
MAX_SINGLE_COPY = 5 * GIB
MAX_PARTS = 10_000
#: The part size doubles every this many parts, so an upload never runs out of parts.
_PARTS_PER_SIZE = 1_000

_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_PRECONDITION_CODES = frozenset({"412", "PreconditionFailed", "ConditionalRequestConflict"})
_NO_UPLOAD_CODES = frozenset({"404", "NoSuchUpload"})


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _is_not_found(exc: ClientError) -> bool:
    return _code(exc) in _NOT_FOUND_CODES or _status(exc) == 404


def _is_precondition_failed(exc: ClientError) -> bool:
    return _code(exc) in _PRECONDITION_CODES or _status(exc) == 412


def _conditional_unsupported(exc: ClientError) -> bool:
    return _code(exc) == "NotImplemented" or _status(exc) == 501


class S3Pending(PendingObject):
    """An upload: a memory buffer, then (past the threshold) a multipart upload to a temp key."""

    def __init__(self, storage: S3Storage) -> None:
        super().__init__()
        self._s = storage
        self._buffer = bytearray()
        self._tmp_key: str | None = None
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._completed = False

    # --- writing ----------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        src = memoryview(data).cast("B")
        while src:
            if self._upload_id is None:
                self._buffer += src
                src = src[:0]
                if len(self._buffer) < self._s.multipart_threshold:
                    return
                self._start_multipart()
            else:  # fill the buffer up to one part, so that a full buffer is the part itself
                take = max(0, self._part_size() - len(self._buffer))
                self._buffer += src[:take]
                src = src[take:]
            while len(self._buffer) >= self._part_size():
                self._send_part(self._part_size())

    def _part_size(self) -> int:
        return self._s.part_size << (len(self._parts) // _PARTS_PER_SIZE)

    def _start_multipart(self) -> None:
        self._tmp_key = self._s.tmp_key()
        resp = self._s.call(
            "create_multipart_upload",
            Bucket=self._s.bucket,
            Key=self._tmp_key,
            ContentType="application/octet-stream",
        )
        self._upload_id = resp["UploadId"]

    def _send_part(self, n: int) -> None:
        if len(self._parts) >= MAX_PARTS:
            raise UnavailableError(f"upload is over {MAX_PARTS} parts; raise the part size")
        number = len(self._parts) + 1
        if len(self._buffer) == n:  # the usual case: the buffer is the part, sent without a copy
            body, rest = self._buffer, bytearray()
        else:
            body, rest = self._buffer[:n], self._buffer[n:]
        resp = self._s.call(
            "upload_part",
            Bucket=self._s.bucket,
            Key=self._tmp_key,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=body,
        )
        self._buffer = rest
        self._parts.append({"PartNumber": number, "ETag": resp["ETag"]})

    # --- commit / abort ---------------------------------------------------------------

    def _publish(self, digest: Digest) -> bool:
        s = self._s
        final = s.object_key(digest)
        if self._upload_id is None:
            body = bytes(self._buffer)
            self._buffer = bytearray()
            if s.exists(digest):
                return False
            return s.conditional_write(
                "put_object", Key=final, Body=body, ContentType="application/octet-stream"
            )
        if self._buffer or not self._parts:
            self._send_part(len(self._buffer))
        s.call(
            "complete_multipart_upload",
            Bucket=s.bucket,
            Key=self._tmp_key,
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )
        self._completed = True
        tmp_key = self._tmp_key
        assert tmp_key is not None  # set by _start_multipart, with _upload_id
        try:
            if s.exists(digest):
                return False
            return s.copy_to(tmp_key, final, self.size)
        finally:
            s.delete_key_quietly(tmp_key)

    def _discard(self) -> None:
        self._buffer = bytearray()
        s = self._s
        if self._upload_id is not None and not self._completed:
            try:
                s.client.abort_multipart_upload(Bucket=s.bucket, Key=self._tmp_key, UploadId=self._upload_id)
            except ClientError as exc:
                if _code(exc) not in _NO_UPLOAD_CODES and _status(exc) != 404:
                    log.warning("cannot abort multipart upload %s: %s (sweep removes it)", self._tmp_key, exc)
            except BotoCoreError as exc:
                log.warning("cannot abort multipart upload %s: %s (sweep removes it)", self._tmp_key, exc)
        elif self._completed and self._tmp_key is not None:
            s.delete_key_quietly(self._tmp_key)


_SESSION_LOCK = threading.Lock()
_SESSION: boto3.session.Session | None = None


def _new_client(**kwargs: Any) -> Any:
    """An S3 client made from one boto3 session shared by the process: the session keeps the
    service model it loaded, so a second client costs milliseconds instead of the tenth of a
    second that loading it again takes. Credentials and region are the client's own, never the
    session's. boto3 clients are thread-safe, sessions are not: the lock guards the creation."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = boto3.session.Session()
        return _SESSION.client("s3", **kwargs)


class S3Storage(ObjectStorage):
    """Objects in ``s3://<bucket>/<prefix>``; see the module docstring."""

    kind: ClassVar[str] = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
        redirect: bool = False,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        part_size: int = DEFAULT_PART_SIZE,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        conditional_writes: bool = True,
    ) -> None:
        self.bucket = validate_bucket(bucket)
        self.prefix = validate_prefix(prefix)
        if part_size < MIN_PART_SIZE:
            raise ConfigError(f"S3 part_size must be at least {MIN_PART_SIZE} bytes (5 MiB), not {part_size}")
        if multipart_threshold < 1:
            raise ConfigError(f"S3 multipart_threshold must be positive, not {multipart_threshold}")
        if max_concurrency < 1:
            raise ConfigError(f"S3 max_concurrency must be positive, not {max_concurrency}")
        if (access_key is None) != (secret_key is None):
            raise ConfigError("give both an S3 access key and a secret key, or neither")
        self.endpoint_url = endpoint_url
        self.region = region or "us-east-1"
        self.redirect = bool(redirect)
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.max_concurrency = max_concurrency
        self.conditional_writes = conditional_writes
        self._client_options: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "aws_access_key_id": access_key,
            "aws_secret_access_key": secret_key,
            "region_name": self.region,
        }
        self.client = _new_client(
            config=self._config(
                attempts=5, connect_timeout=10, read_timeout=120, connections=max(16, 2 * max_concurrency)
            ),
            **self._client_options,
        )
        self._probe_client: Any = None
        self._transfer = TransferConfig(
            multipart_threshold=MAX_SINGLE_COPY,
            multipart_chunksize=max(part_size, 64 * MIB),
            max_concurrency=max_concurrency,
        )

    def _config(self, *, attempts: int, connect_timeout: float, read_timeout: float, connections: int) -> Any:
        return Config(
            region_name=self.region,
            signature_version="s3v4",
            retries={"max_attempts": attempts, "mode": "standard"},
            max_pool_connections=connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            # Path-style keys for a custom endpoint (SeaweedFS, MinIO on an IP address).
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
            # Checksums only where the API requires them: S3-compatible stores vary in
            # their support of the newer default (CRC32 trailers).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )

    def __repr__(self) -> str:
        return (
            f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint_url={self.endpoint_url!r})"
        )

    # --- keys ---------------------------------------------------------------------

    def object_key(self, digest: Digest) -> str:
        shard, rest = shard_parts(digest)
        return f"{self.prefix}objects/{shard}/{rest}"

    def tmp_key(self) -> str:
        return f"{self.prefix}tmp/{uuid.uuid4().hex}"

    @property
    def objects_prefix(self) -> str:
        return f"{self.prefix}objects/"

    @property
    def tmp_prefix(self) -> str:
        return f"{self.prefix}tmp/"

    # --- calls --------------------------------------------------------------------------

    def call(self, operation: str, **kwargs: Any) -> Any:
        """``client.<operation>(**kwargs)``; failures to reach the store become ``UnavailableError``."""
        try:
            return getattr(self.client, operation)(**kwargs)
        except ClientError as exc:
            self._unavailable(operation, exc)
        except BotoCoreError as exc:
            self._unavailable(operation, exc)

    def _unavailable(self, operation: str, exc: Exception) -> NoReturn:
        code = _code(exc) if isinstance(exc, ClientError) else type(exc).__name__
        raise UnavailableError(
            f"S3 {operation} on bucket {self.bucket!r} failed: {exc}",
            hint="check that the S3 endpoint is up and the bucket and credentials are right",
            operation=operation,
            s3_code=code,
        ) from exc

    def conditional_write(self, operation: str, **kwargs: Any) -> bool:
        """``put_object`` or ``copy_object`` that never replaces a key; ``False`` if it existed."""
        kwargs["Bucket"] = self.bucket
        if self.conditional_writes:
            try:
                getattr(self.client, operation)(IfNoneMatch="*", **kwargs)
                return True
            except ClientError as exc:
                if _is_precondition_failed(exc):
                    return False
                if not _conditional_unsupported(exc):
                    self._unavailable(operation, exc)
                log.warning("S3 store refuses If-None-Match (%s); using unconditional writes", _code(exc))
                self.conditional_writes = False
            except BotoCoreError as exc:
                self._unavailable(operation, exc)
        self.call(operation, **kwargs)
        return True

    def copy_to(self, source_key: str, final_key: str, size: int) -> bool:
        """Server-side copy of a completed temp key to its final key; ``False`` if that existed."""
        source = {"Bucket": self.bucket, "Key": source_key}
        if size <= MAX_SINGLE_COPY:
            return self.conditional_write(
                "copy_object",
                Key=final_key,
                CopySource=source,
                MetadataDirective="REPLACE",
                ContentType="application/octet-stream",
            )
        try:  # a multipart copy: S3 cannot make it conditional (see the module docstring)
            self.client.copy(
                source,
                self.bucket,
                final_key,
                ExtraArgs={"MetadataDirective": "REPLACE", "ContentType": "application/octet-stream"},
                Config=self._transfer,
            )
        except (ClientError, BotoCoreError) as exc:
            self._unavailable("copy", exc)
        return True

    def delete_key_quietly(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            log.warning("cannot delete temp key %s: %s (sweep removes it)", key, exc)

    def _head(self, digest: Digest) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self.client.head_object(Bucket=self.bucket, Key=self.object_key(digest))
            return head
        except ClientError as exc:
            if _is_not_found(exc):
                return None
            self._unavailable("head_object", exc)
        except BotoCoreError as exc:
            self._unavailable("head_object", exc)

    # --- the interface ----------------------------------------------------------------

    def begin_upload(self) -> PendingObject:
        return S3Pending(self)

    def exists(self, digest: Digest) -> bool:
        return self._head(Digest(digest)) is not None

    def size(self, digest: Digest) -> int:
        digest = Digest(digest)
        head = self._head(digest)
        if head is None:
            raise not_found(digest)
        return int(head["ContentLength"])

    def read_range(self, digest: Digest, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        digest = Digest(digest)
        check_range(start, end)
        if end is not None and end == start:
            if not self.exists(digest):
                raise not_found(digest)
            return iter(())
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self.object_key(digest)}
        if start > 0 or end is not None:
            kwargs["Range"] = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"
        try:
            resp = self.client.get_object(**kwargs)
        except ClientError as exc:
            if _is_not_found(exc):
                raise not_found(digest) from None
            if _code(exc) == "InvalidRange" or _status(exc) == 416:
                # ``start`` is at or past the end of an object that exists
                return iter(())
            self._unavailable("get_object", exc)
        except BotoCoreError as exc:
            self._unavailable("get_object", exc)
        return _stream(resp["Body"], self.bucket)

    def delete(self, digest: Digest) -> bool:
        digest = Digest(digest)
        if not self.exists(digest):
            return False
        self.call("delete_object", Bucket=self.bucket, Key=self.object_key(digest))
        return True

    def iter_objects(self) -> Iterator[StoredObject]:
        base = self.objects_prefix
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for item in page.get("Contents", []):
                    shard, _, rest = item["Key"][len(base) :].partition("/")
                    digest = digest_from_parts(shard, rest)
                    if digest is None:
                        log.debug("skipping key %s: not an object", item["Key"])
                        continue
                    yield StoredObject(
                        digest=digest, size=int(item["Size"]), mtime=item["LastModified"].timestamp()
                    )
        except (ClientError, BotoCoreError) as exc:
            self._unavailable("list_objects_v2", exc)

    def presigned_url(self, digest: Digest, *, expires_s: int = 300) -> str | None:
        if expires_s < 1:
            raise ValueError(f"expires_s must be positive, not {expires_s}")
        try:
            url: str = self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self.object_key(digest)},
                ExpiresIn=expires_s,
            )
            return url
        except (ClientError, BotoCoreError) as exc:
            self._unavailable("generate_presigned_url", exc)

    def sweep_incomplete(self, older_than_s: float) -> int:
        """Abort multipart uploads and delete temp keys under ``<prefix>tmp/`` older than the limit.

        Ages are measured against the store's timestamps and this machine's
        clock; keep ``older_than_s`` well above any skew and any upload's duration.
        """
        cutoff = time.time() - older_than_s
        removed = 0
        tmp = self.tmp_prefix
        try:
            for page in self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=tmp
            ):
                for upload in page.get("Uploads", []):
                    if not upload["Key"].startswith(tmp) or upload["Initiated"].timestamp() >= cutoff:
                        continue
                    try:
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                    except ClientError as exc:
                        if _code(exc) in _NO_UPLOAD_CODES:
                            continue
                        raise
                    removed += 1
                    log.info("aborted leftover multipart upload %s", upload["Key"])
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=tmp):
                for item in page.get("Contents", []):
                    if item["LastModified"].timestamp() >= cutoff:
                        continue
                    self.client.delete_object(Bucket=self.bucket, Key=item["Key"])
                    removed += 1
                    log.info("deleted leftover temp key %s", item["Key"])
        except (ClientError, BotoCoreError) as exc:
            self._unavailable("sweep", exc)
        return removed

    def check(self) -> None:
        """The bucket exists and a temp key can be written and deleted."""
        self.call("head_bucket", Bucket=self.bucket)
        key = self.tmp_key()
        self.call("put_object", Bucket=self.bucket, Key=key, Body=b"kvreg storage check")
        self.call("delete_object", Bucket=self.bucket, Key=key)

    def probe(self) -> None:
        """A key under ``<prefix>probe/`` put, read back and deleted, with a client of its own that
        tries once and waits seconds, not minutes (the readiness check must answer in time)."""
        if self._probe_client is None:
            self._probe_client = _new_client(
                config=self._config(attempts=1, connect_timeout=2, read_timeout=5, connections=2),
                **self._client_options,
            )
        client = self._probe_client
        name = uuid.uuid4().hex
        key = f"{self.prefix}{PROBE_AREA}/{name}"
        data = probe_bytes(name)
        operation = "put_object"
        try:
            client.put_object(Bucket=self.bucket, Key=key, Body=data)
            try:
                operation = "get_object"
                body = client.get_object(Bucket=self.bucket, Key=key)["Body"]
                try:
                    read = body.read()
                finally:
                    body.close()
                if read != data:
                    raise UnavailableError(f"S3 bucket {self.bucket!r} read back another probe than it got")
            finally:
                operation = "delete_object"
                client.delete_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            self._unavailable(operation, exc)


def _stream(body: Any, bucket: str) -> Iterator[bytes]:
    try:
        for piece in body.iter_chunks(READ_PIECE):
            if piece:
                yield piece
    except (ClientError, BotoCoreError) as exc:
        raise UnavailableError(f"reading from S3 bucket {bucket!r} failed: {exc}") from exc
    finally:
        body.close()
