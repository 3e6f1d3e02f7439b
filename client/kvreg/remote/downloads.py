"""Downloads of object bodies: streamed into a file, hashed, resumed with ``Range``, redirects followed.

:class:`Downloads` is the download half of ``kvreg.remote.session.HttpSession``:

- :meth:`Downloads.download`: one object (``GET``) into a file after its first bytes,
  with retries; a broken connection resumes with ``Range`` from what arrived, a
  server that ignores the range (``200``) or refuses it (``416``) starts the file over,
  and every byte of the file is hashed, so the digest covers the whole object;
- :meth:`Downloads.download_many`: a fetch pack (one ``POST`` whose answer holds
  several objects in order) cut into files, one attempt;
- redirects (``kvreg.remote.redirects``): a registry on object storage answers with
  a redirect to a presigned URL; the registry's headers (its ``Authorization``) go to
  the registry's origin only, ``Range`` goes everywhere, and an error from the storage
  host is that host's, never the registry's challenge.

The bytes go through ``kvreg.remote.sink`` (aligned buffers, ``O_DIRECT``) on the bulk
transport (``kvreg.remote.bulk``). This module does not know what the objects are.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, RemoteError
from kvreg.remote.bulk import TRANSPORT_ERRORS, BulkHttp, BulkResponse
from kvreg.remote.errors import RETRY_STATUSES
from kvreg.remote.redirects import MAX_REDIRECTS, REDIRECT_STATUSES, hop_headers, redirect_target
from kvreg.remote.retrying import Retry, RetryPolicy, retry_after, transport_reason
from kvreg.remote.sink import Download, ProgressCallback, Sink, sink_file
from kvreg.remote.tls import untrusted

log = logging.getLogger(__name__)

__all__ = ["MAX_ERROR_BYTES", "Downloads"]

#: The most bytes of an error answer read (the rest is dropped with the connection).
MAX_ERROR_BYTES = 256 * 1024
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")


class Downloads:
    """The downloads of an HTTP session; :class:`~kvreg.remote.session.HttpSession` provides
    the transport (:attr:`bulk`), the retries (:attr:`policy`), the headers of a bulk request
    and the mapping of error answers."""

    base_url: str
    bulk: BulkHttp
    policy: RetryPolicy

    def error(self, status: int, headers: httpx.Headers, body: bytes, url: str) -> KvregError:
        raise NotImplementedError

    def bulk_headers(self, url: str, extra: Mapping[str, str]) -> dict[str, str]:
        raise NotImplementedError

    def download(
        self,
        url: str,
        digest: Digest,
        dest: Path,
        *,
        start: int = 0,
        max_size: int | None = None,
        progress_cb: ProgressCallback | None = None,
        headers: Mapping[str, str] | None = None,
        fsync: bool = True,
    ) -> Download:
        """Stream ``url`` into ``dest`` after its first ``start`` bytes (``RegistryClient.get_object_to``).

        ``headers`` are sent to the registry's own origin only, never to the storage a
        registry redirects to (an OCI registry's per-request ``Authorization``). With
        ``fsync=False`` the file is written but not fsynced: the caller fsyncs it before it
        relies on it (a pull fsyncs all its objects at once, after the last download)."""
        with sink_file(dest, start, progress_cb, fsync=fsync) as sink:
            resumed_from = sink.offset
            if sink.offset != start:
                log.debug("partial file %s holds %d bytes, not %d", dest, sink.offset, start)
            attempt = 0
            while True:
                before = sink.offset
                try:
                    if self._download_attempt(url, digest, sink, max_size, headers or {}):
                        break
                except Retry as r:
                    sink.writer.flush()  # what arrived stays in the file while we wait
                    if sink.offset > before:
                        attempt = 0  # progress was made: the retry budget starts again
                    if attempt >= self.policy.retries:
                        raise self.policy.unavailable("GET", url, r.reason, attempt + 1) from r
                    self.policy.sleep(attempt, r.reason, r.retry_after)
                    attempt += 1
        return Download(sink.digest(), sink.offset, resumed_from)

    def download_many(
        self,
        url: str,
        body: bytes,
        dests: Sequence[tuple[Digest, Path]],
        sizes_of: Callable[[httpx.Headers], list[int]],
        *,
        progress_cb: ProgressCallback | None = None,
    ) -> list[Download]:
        """POST the JSON ``body`` to ``url`` and cut the answer's body into the files ``dests``, in
        order, each hashed while it is written and not fsynced (the caller fsyncs it before it
        relies on it). ``sizes_of`` reads the files' sizes from the answer's headers and refuses
        (raises) a layout it does not accept.

        One attempt, no retry: a broken connection or an answer to retry (429, 503) ends it,
        and what it returns are the downloads finished before, in order; the file under way
        keeps the bytes that arrived (:meth:`download` resumes it with a range). Other error
        answers raise their typed error."""
        headers = self.bulk_headers(
            url, {"Accept": "application/octet-stream", "Content-Type": "application/json"}
        )
        done: list[Download] = []
        try:
            with self.bulk.request("POST", url, headers, body) as response:
                if response.status in RETRY_STATUSES:
                    log.debug("POST %s answered %d: the objects are fetched one by one", url, response.status)
                    return done
                if response.status != 200:
                    raise self.error(
                        response.status, response.headers, response.read_capped(MAX_ERROR_BYTES), url
                    )
                sizes = sizes_of(response.headers)
                stated = response.remaining  # None: a chunked answer (a proxy re-framed it)
                if len(sizes) != len(dests) or (stated is not None and stated != sum(sizes)):
                    raise RemoteError(
                        f"the registry's answer to POST {url} holds {stated} bytes, "
                        f"not the {sum(sizes)} of the objects it lists"
                    )
                for (digest, dest), size in zip(dests, sizes, strict=True):
                    done.append(self._receive_file(response, digest, dest, size, progress_cb))
                if stated is None and response.readinto(memoryview(bytearray(1))):
                    raise RemoteError(f"the registry's answer to POST {url} goes on after its objects")
        except ssl.SSLCertVerificationError as e:
            raise untrusted(url, e) from e
        except ValueError as e:  # an error answer over its cap
            raise RemoteError(f"the registry's answer to POST {url} is unusable: {e}") from e
        except TRANSPORT_ERRORS as e:
            log.debug(
                "POST %s broke off after %d of %d objects: %s",
                url,
                len(done),
                len(dests),
                transport_reason(e),
            )
        return done

    @staticmethod
    def _receive_file(
        response: BulkResponse, digest: Digest, dest: Path, size: int, progress_cb: ProgressCallback | None
    ) -> Download:
        """The next ``size`` bytes of ``response`` into a new file ``dest``, hashed."""
        with sink_file(dest, 0, progress_cb, fsync=False) as sink:
            sink.receive_exactly(response, size)
        log.debug("object %s: %d bytes of a fetch pack", digest, size)
        return Download(sink.digest(), sink.offset, 0)

    def _download_attempt(
        self, url: str, digest: Digest, sink: Sink, max_size: int | None, extra: Mapping[str, str]
    ) -> bool:
        """One GET (following redirects); True when finished, False to ask again."""
        headers = {**extra, "Accept": "application/octet-stream"}
        if sink.offset > 0:
            headers["Range"] = f"bytes={sink.offset}-"
        target = url
        try:
            for _ in range(1 + MAX_REDIRECTS):  # the registry, then the storage it sends us to
                with self.bulk.request("GET", target, self.bulk_headers(target, headers)) as response:
                    if response.status not in REDIRECT_STATUSES:
                        return self._receive(target, digest, sink, max_size, response)
                    location = redirect_target(target, response.status, response.headers)
                    response.read_capped(MAX_ERROR_BYTES)  # so that the connection can be kept
                log.debug("object %s: redirected to %s", digest, httpx.URL(location).host)
                headers = hop_headers(headers, target, location)
                target = location
            raise RemoteError(f"GET {url} was redirected more than {MAX_REDIRECTS} times")
        except ssl.SSLCertVerificationError as e:
            raise untrusted(url, e) from e
        except ValueError as e:  # an answer over its cap
            raise RemoteError(f"the registry's answer to GET {url} is unusable: {e}") from e
        except TRANSPORT_ERRORS as e:
            raise Retry(transport_reason(e, f" after {sink.offset} bytes")) from e

    def _receive(
        self, url: str, digest: Digest, sink: Sink, max_size: int | None, response: BulkResponse
    ) -> bool:
        status = response.status
        if status in RETRY_STATUSES:
            raise Retry(f"HTTP {status}", retry_after(response.headers))
        if status == 416 and sink.offset > 0:
            # The partial file may be complete already (interrupted before its rename).
            m = _UNSATISFIED_RANGE.fullmatch(response.headers.get("Content-Range", ""))
            if m is not None and int(m.group(1)) == sink.offset:
                return True
            log.debug("range from %d refused for %s: downloading it again", sink.offset, digest)
            sink.restart()
            return False
        if status == 200 and sink.offset > 0:
            log.debug("the server ignored the range for %s: downloading it again", digest)
            sink.restart()
        elif status == 206:
            m = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
            if m is None or int(m.group(1)) != sink.offset:
                raise RemoteError(
                    f"the registry answered a range request for {digest} with the wrong range "
                    f"({response.headers.get('Content-Range')!r}, asked from {sink.offset})"
                )
        elif status != 200:
            raise self.error(status, response.headers, response.read_capped(MAX_ERROR_BYTES), url)
        sink.receive(response, digest, max_size)
        return True
