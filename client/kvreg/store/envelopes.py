"""Signed DSSE envelopes, stored by the digest of the manifest they sign.

Layout: ``envelopes/ab/<64 hex>.json`` where ``ab`` are the first two hex digits of
the manifest digest (the full hex is kept in the file name so that a file alone
says which manifest it signs). Files are written atomically (temp file in
``tmp/``, fsync, rename) and read-only.

There is one envelope per manifest. Putting an envelope with other bytes for the
same manifest (for example re-signed, or with more signatures) replaces the old
one atomically; putting the same bytes again only refreshes the file's mtime,
which ``gc`` reads as "in use".

This module stores bytes only: it does not parse envelopes, check signatures or
compare the payload with the manifest digest. Callers do, with
``kvreg.core.envelope``, before they put and after they get.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from kvreg.core.digest import Digest
from kvreg.core.errors import ObjectNotFoundError, StoreError
from kvreg.fileio.atomicfile import atomic_write_bytes

log = logging.getLogger(__name__)

SUFFIX = ".json"
_SHARD = re.compile(r"[0-9a-f]{2}")
_NAME = re.compile(r"([0-9a-f]{64})\.json")


class EnvelopeStore:
    """Envelopes under ``<root>/envelopes``; ``root`` is the store root (``$KVREG_HOME``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.envelopes_dir = self.root / "envelopes"
        self.tmp_dir = self.root / "tmp"

    def __repr__(self) -> str:
        return f"EnvelopeStore({str(self.root)!r})"

    def _path_for(self, manifest_digest: Digest) -> Path:
        h = Digest(manifest_digest).hex
        return self.envelopes_dir / h[:2] / f"{h}{SUFFIX}"

    def path(self, manifest_digest: Digest) -> Path:
        p = self._path_for(manifest_digest)
        if not p.is_file():
            raise self._not_found(manifest_digest)
        return p

    def has(self, manifest_digest: Digest) -> bool:
        return self._path_for(manifest_digest).is_file()

    def put(self, manifest_digest: Digest, envelope_bytes: bytes) -> None:
        """Store (or replace) the envelope that signs the manifest ``manifest_digest``."""
        p = self._path_for(manifest_digest)
        try:
            current = p.read_bytes()
        except FileNotFoundError:
            current = None
        if current == envelope_bytes:
            try:
                os.utime(p)
            except OSError as exc:
                log.debug("cannot refresh mtime of %s: %s", p, exc)
            return
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(p, envelope_bytes, tmp_dir=self.tmp_dir)
        if current is None:
            log.debug("stored envelope for manifest %s", manifest_digest)
        else:
            log.info("replaced the envelope for manifest %s", manifest_digest)

    def get(self, manifest_digest: Digest) -> bytes:
        """The envelope bytes; ``ObjectNotFoundError`` if no envelope signs this manifest."""
        try:
            return self._path_for(manifest_digest).read_bytes()
        except FileNotFoundError:
            raise self._not_found(manifest_digest) from None
        except OSError as exc:
            raise StoreError(f"cannot read the envelope of {manifest_digest}: {exc}") from exc

    def stat(self, manifest_digest: Digest) -> os.stat_result:
        try:
            return self._path_for(manifest_digest).stat()
        except FileNotFoundError:
            raise self._not_found(manifest_digest) from None

    def remove(self, manifest_digest: Digest) -> int:
        """Delete an envelope; return the bytes freed. Only ``gc`` should call this."""
        p = self._path_for(manifest_digest)
        try:
            size = p.stat().st_size
            p.unlink()
        except FileNotFoundError:
            raise self._not_found(manifest_digest) from None
        return size

    def iter_manifest_digests(self) -> Iterator[Digest]:
        """The digest of every manifest that has an envelope here, sorted; other names skipped."""
        try:
            shards = sorted(e.name for e in os.scandir(self.envelopes_dir) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return
        for shard in shards:
            if _SHARD.fullmatch(shard) is None:
                continue
            try:
                names = sorted(
                    e.name for e in os.scandir(self.envelopes_dir / shard) if e.is_file(follow_symlinks=False)
                )
            except FileNotFoundError:
                continue
            for name in names:
                m = _NAME.fullmatch(name)
                if m is None or not m.group(1).startswith(shard):
                    log.debug("skipping non-envelope file envelopes/%s/%s", shard, name)
                    continue
                yield Digest.from_hex(m.group(1))

    @staticmethod
    def _not_found(manifest_digest: Digest) -> ObjectNotFoundError:
        return ObjectNotFoundError(
            f"no envelope for manifest {manifest_digest} in the local store",
            hint="pull the ref again to fetch its signed envelope",
            manifest=str(manifest_digest),
        )
