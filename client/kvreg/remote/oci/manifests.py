"""Manifests, referrers and tags of an OCI registry.

- :meth:`ManifestsApi.get_manifest`: ``GET /v2/<repo>/manifests/<tag|digest>`` with
  ``Accept`` for OCI manifests and indexes, at most ``MAX_OCI_MANIFEST_BYTES``; the
  bytes must hash to the digest asked for, or to ``Docker-Content-Digest`` when a tag
  was asked for (a registry that sends other bytes is ``DigestMismatchError``).
- :meth:`ManifestsApi.put_manifest`: ``PUT`` with its ``Content-Type``; says whether
  the registry processed the ``subject`` (the ``OCI-Subject`` header: it keeps the
  referrers itself).
- :meth:`ManifestsApi.referrers`: ``GET /v2/<repo>/referrers/<digest>``; a registry
  without the referrers API (``404``, ``400``, ``405``) is read through the
  referrers tag schema: the image index tagged ``sha256-<hex>``.
  :meth:`ManifestsApi.add_referrer` keeps that index (read, add, write).
- :meth:`ManifestsApi.list_tags` / :meth:`list_repositories`: paginated with ``n`` and
  the ``Link`` header.
"""

from __future__ import annotations

import json
import logging
import re
from urllib.parse import urljoin

from kvreg.core.digest import Digest, is_digest
from kvreg.core.errors import DigestMismatchError, NotFoundError, RemoteError
from kvreg.core.oci import (
    MAX_OCI_MANIFEST_BYTES,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    parse_index,
    referrers_index,
    referrers_tag,
)
from kvreg.remote.oci.blobs import BlobsApi
from kvreg.remote.oci.challenges import pull_scope, push_scope

log = logging.getLogger(__name__)

__all__ = ["ManifestsApi"]

_ACCEPT = f"{OCI_MANIFEST}, {OCI_INDEX}"
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_PAGE = 1000
_MAX_PAGES = 10_000


class ManifestsApi(BlobsApi):
    """The manifest, referrers and tag endpoints (see the module docstring)."""

    def get_manifest(self, repository: str, reference: str) -> bytes | None:
        """The manifest ``reference`` (a tag or a digest) of ``repository``, verified; None if absent."""
        reply = self.call(
            "GET",
            self.url(repository, "manifests", reference),
            [pull_scope(repository)],
            expect=(200, 404),
            headers={"Accept": _ACCEPT},
            limit=MAX_OCI_MANIFEST_BYTES,
        )
        if reply.status == 404:
            return None
        actual = Digest.of_bytes(reply.body)
        said = reply.headers.get("Docker-Content-Digest")
        expected = reference if is_digest(reference) else said
        if expected and str(actual) != expected:
            raise DigestMismatchError(
                f"manifest {repository}:{reference} from the registry hashes to {actual}, not {expected}",
                expected=expected,
                actual=str(actual),
            )
        return reply.body

    def put_manifest(self, repository: str, reference: str, data: bytes, media_type: str) -> bool:
        """Store manifest ``data`` as ``reference``; True if the registry processed its ``subject``."""
        reply = self.call(
            "PUT",
            self.url(repository, "manifests", reference),
            [push_scope(repository)],
            expect=(201,),
            headers={"Content-Type": media_type},
            content=data,
        )
        said = reply.headers.get("Docker-Content-Digest")
        if said and said != str(Digest.of_bytes(data)):
            raise DigestMismatchError(
                f"the registry stored manifest {Digest.of_bytes(data)} under digest {said}",
                expected=str(Digest.of_bytes(data)),
                actual=said,
            )
        return bool(reply.headers.get("OCI-Subject"))

    def delete_manifest(self, repository: str, digest: Digest) -> None:
        self.call(
            "DELETE", self.url(repository, "manifests", str(digest)), [push_scope(repository)], expect=(202,)
        )

    def referrers(
        self, repository: str, digest: Digest, artifact_type: str | None = None
    ) -> list[Descriptor]:
        """The manifests that name manifest ``digest`` as their subject (of ``artifact_type``),
        every page of them (a registry may split the index and link the next page with ``Link``)."""
        url = self.url(repository, "referrers", str(digest))
        params = None if artifact_type is None else {"artifactType": artifact_type}
        scopes = [pull_scope(repository)]
        found: list[Descriptor] = []
        for page in range(_MAX_PAGES):
            reply = self.call(
                "GET",
                url,
                scopes,
                expect=(200, 400, 404, 405),
                headers={"Accept": OCI_INDEX},
                params=params,
                limit=MAX_OCI_MANIFEST_BYTES,
            )
            if reply.status != 200 or not reply.headers.get("Content-Type", "").startswith(OCI_INDEX):
                if page:
                    raise RemoteError(
                        f"the registry's next page of referrers {url} answered HTTP {reply.status}"
                    )
                log.debug(
                    "no referrers API on %s (HTTP %d): reading the referrers tag", self.base_url, reply.status
                )
                found = self._fallback_referrers(repository, digest)
                break
            found += parse_index(reply.body)
            m = _LINK_NEXT.search(reply.headers.get("Link", ""))
            if m is None:
                break
            url, params = urljoin(self.base_url + "/", m.group(1)), None
        else:
            raise RemoteError(f"the registry's referrers of {digest} never end")
        return [d for d in found if artifact_type is None or d.artifact_type == artifact_type]

    def _fallback_referrers(self, repository: str, digest: Digest) -> list[Descriptor]:
        raw = self.get_manifest(repository, referrers_tag(digest))
        return [] if raw is None else parse_index(raw)

    def add_referrer(self, repository: str, subject: Digest, referrer: Descriptor) -> None:
        """Add ``referrer`` to the referrers tag schema's index of ``subject`` (read, add, write)."""
        current = self._fallback_referrers(repository, subject)
        if any(d.digest == referrer.digest for d in current):
            return
        index = referrers_index([*current, referrer])
        self.put_manifest(repository, referrers_tag(subject), index, OCI_INDEX)

    def _paginate(self, url: str, scopes: list[str], key: str) -> list[str]:
        out: list[str] = []
        params: dict[str, str] | None = {"n": str(_PAGE)}
        for _ in range(_MAX_PAGES):
            reply = self.call("GET", url, scopes, params=params, expect=(200, 404))
            if reply.status == 404:
                raise NotFoundError(f"{url} is not on the registry")
            try:
                doc = json.loads(reply.body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise RemoteError(f"the registry's answer to GET {url} is not JSON") from e
            items = doc.get(key) if isinstance(doc, dict) else None
            out += [t for t in items or [] if isinstance(t, str)]
            m = _LINK_NEXT.search(reply.headers.get("Link", ""))
            if m is None:
                return out
            url, params = urljoin(self.base_url + "/", m.group(1)), None
        raise RemoteError(f"the registry's listing {url} never ends")

    def list_tags(self, repository: str) -> list[str]:
        """Every tag of ``repository`` (``[]`` if the repository does not exist)."""
        try:
            return self._paginate(self.url(repository, "tags", "list"), [pull_scope(repository)], "tags")
        except NotFoundError:
            return []

    def list_repositories(self) -> list[str]:
        """Every repository the registry's catalog lists (``GET /v2/_catalog``; not every registry has it)."""
        return self._paginate(f"{self.base_url}/v2/_catalog", ["registry:catalog:*"], "repositories")
