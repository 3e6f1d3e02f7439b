"""The OCI distribution pull API under ``/v2/``: generic OCI clients pull kvreg artifacts.

Repository ``<ns>`` is kvreg namespace ``ns``; tag ``<name>`` is ref ``ns/name``. What is
served (``kvreg.core.oci``, docs/formats.md § OCI): the artifact manifest of each
envelope (config = the signed kvreg manifest, layers = its objects), the signature
manifest that attaches the DSSE envelope to it (a referrer), their blobs, and tag lists.

- ``GET|HEAD /v2/``: the API version check (401 with the challenge to an anonymous caller);
- ``GET|HEAD /v2/<ns>/manifests/<tag|digest>``: by ref name or by the digest of an
  artifact or signature manifest (``services.oci`` keeps both, byte for byte);
- ``GET|HEAD /v2/<ns>/blobs/<digest>``: an object the namespace holds (exactly as the
  object GET serves it: Range, zero-copy, presigned redirect on S3), the envelope,
  the empty config ``{}``, or one of the two manifests;
- ``GET /v2/<ns>/referrers/<digest>``: the OCI 1.1 referrers API (``artifactType`` filter);
- ``GET /v2/<ns>/tags/list``: with ``n``/``last`` pagination and ``Link``;
- ``GET /v2/token``: the Docker token flow: a short-lived token scoped to the repositories
  asked for (``api.oci_auth``, ``api.oci_tokens``).

Each ref is also a repository of its own, ``<ns>/<name>``, whose one tag is
:data:`ALIAS_TAG` (``latest``): ``oras pull HOST/ns/name:latest`` and ``oras pull
HOST/ns:name`` fetch the same manifest. Its blobs, digests and referrers are the
namespace's.

Access is the API's (``auth``, ``accounts.readable_namespace``): a public namespace is
read anonymously, a private one needs a token with the read role; with a scoped token,
only the repositories it covers (``api.oci_auth``). Reads are not
audit-logged, as the API's object and envelope GETs are not. Every push method is
``405 UNSUPPORTED``: pushes go through kvreg's own API, which checks signatures and
objects. Errors take the OCI format (``api.oci_errors``).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable
from typing import TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError as DbIntegrityError
from sqlalchemy.orm import Session

from kvreg.core import oci
from kvreg.core.digest import Digest
from kvreg.core.errors import InvalidNameError, ObjectNotFoundError, RefNotFoundError
from kvreg_registry.api.deps import NamespaceAccess, etag, state
from kvreg_registry.api.oci_auth import issue_token, principal, sent_credentials
from kvreg_registry.api.oci_errors import API_VERSION, API_VERSION_HEADER, PUSH_HINT, OciError
from kvreg_registry.api.routes_objects import object_response, parse_range
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Envelope, Namespace
from kvreg_registry.services import oci as oci_service
from kvreg_registry.services import refs

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v2", include_in_schema=False)

#: The most tags one page of ``tags/list`` holds (fewer when ``n`` asks for fewer).
MAX_TAGS_PAGE = 1000
BLOB_MEDIA_TYPE = "application/octet-stream"
#: The one tag of the per-ref repository ``<ns>/<name>``: the ref's current artifact.
ALIAS_TAG = "latest"

T = TypeVar("T")


def _access(request: Request, who: Principal, ns: str) -> NamespaceAccess:
    return NamespaceAccess(state(request), who, ns)


def _headers(**extra: str) -> dict[str, str]:
    return {API_VERSION_HEADER: API_VERSION, **extra}


def _lookup(access: NamespaceAccess, find: Callable[[Session, Namespace], T | None]) -> T | None:
    """``find`` in a read session. If it finds nothing and the namespace is flagged as holding
    envelopes stored before migration 0007 (``Namespace.oci_backfill_pending``), their OCI
    manifests are written, once, and it looks again; any other miss costs nothing more."""
    with access.read() as (s, namespace):
        found = find(s, namespace)
        if found is not None or not namespace.oci_backfill_pending:
            return found
    try:
        with access.write() as (s, namespace):
            if namespace.oci_backfill_pending:  # not done by another request meanwhile
                oci_service.backfill(s, namespace)
    except DbIntegrityError:  # another request or process wrote them first
        log.info("OCI manifests of %s written concurrently", access.name)
    with access.read() as (s, namespace):
        return find(s, namespace)


def _digest(value: str) -> Digest:
    return Digest(value)  # InvalidDigestError: 400 DIGEST_INVALID


# --- version check and token ---------------------------------------------------------------


@router.api_route("", methods=["GET", "HEAD"])
@router.api_route("/", methods=["GET", "HEAD"])
def version_check(request: Request, who: Principal = Depends(principal)) -> Response:
    """200 with valid credentials; 401 with the token flow's challenge without any (as Docker Hub
    and GHCR answer: that is how clients learn where to get a token), or with bad ones."""
    if not sent_credentials(request):
        raise OciError(401, "UNAUTHORIZED", "authentication required: get a token from the token endpoint")
    return JSONResponse({}, headers=_headers())


@router.get("/token")
def token(request: Request) -> JSONResponse:
    body = issue_token(state(request), request)
    return JSONResponse(body, headers=_headers(**{"Cache-Control": "no-store"}))


# --- manifests ----------------------------------------------------------------------------


def _manifest_bytes(access: NamespaceAccess, reference: str) -> bytes:
    if ":" in reference:
        d = _digest(reference)
        found = _lookup(access, lambda s, ns: oci_service.by_manifest_digest(s, ns, d))
        if found is None:
            raise OciError(404, "MANIFEST_UNKNOWN", f"repository {access.name!r} has no manifest {d}")
        return found.data
    try:
        oci.tag_for(reference)
    except InvalidNameError:
        raise OciError(404, "MANIFEST_UNKNOWN", f"no tag {reference!r} in {access.name!r}") from None

    def by_tag(s: Session, ns: Namespace) -> bytes | None:
        row = oci_service.for_envelope(s, ns, refs.get(s, ns, reference).manifest_digest)
        return bytes(row.artifact) if row is not None else None

    data = _lookup(access, by_tag)
    if data is None:  # its envelope does not parse any more (backfill logged it)
        raise OciError(404, "MANIFEST_UNKNOWN", f"{access.name}/{reference} cannot be served over OCI")
    return data


@router.api_route("/{ns}/manifests/{reference}", methods=["GET", "HEAD"])
def get_manifest(ns: str, reference: str, request: Request, who: Principal = Depends(principal)) -> Response:
    data = _manifest_bytes(_access(request, who, ns), reference)
    d = Digest.of_bytes(data)
    headers = _headers(**{"Docker-Content-Digest": d, "ETag": etag(d), "Content-Length": str(len(data))})
    body = b"" if request.method == "HEAD" else data
    return Response(body, media_type=oci.OCI_MANIFEST, headers=headers)


# --- blobs --------------------------------------------------------------------------------------


def _small_blob(access: NamespaceAccess, d: Digest) -> bytes:
    """The blobs that are not objects: the empty config, an envelope, a manifest."""
    if d == oci.EMPTY_CONFIG.digest:
        with access.read():
            return oci.EMPTY_CONFIG_DATA

    def find(s: Session, ns: Namespace) -> bytes | None:
        row = oci_service.by_envelope_digest(s, ns, d)
        if row is not None:
            envelope = s.get(Envelope, (ns.id, row.manifest_digest))
            if envelope is not None:
                return bytes(envelope.envelope)
        found = oci_service.by_manifest_digest(s, ns, d)
        return found.data if found is not None else None

    data = _lookup(access, find)
    if data is None:
        raise OciError(404, "BLOB_UNKNOWN", f"repository {access.name!r} has no blob {d}")
    return data


def _bytes_response(request: Request, data: bytes, *, head: bool) -> Response:
    size = len(data)
    span = parse_range(request.headers.get("range"), size)
    start, end, status = 0, size, 200
    headers = {"Accept-Ranges": "bytes"}
    if span is not None:
        start, end = span
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    headers["Content-Length"] = str(end - start)
    body = b"" if head else data[start:end]
    return Response(body, status_code=status, headers=headers, media_type=BLOB_MEDIA_TYPE)


@router.api_route("/{ns}/blobs/{digest}", methods=["GET", "HEAD"])
def get_blob(ns: str, digest: str, request: Request, who: Principal = Depends(principal)) -> Response:
    access = _access(request, who, ns)
    d = _digest(digest)
    head = request.method == "HEAD"
    try:
        response = object_response(request, access, d, head=head)
    except ObjectNotFoundError:
        response = _bytes_response(request, _small_blob(access, d), head=head)
        response.headers["ETag"] = etag(d)
    response.headers["Docker-Content-Digest"] = d
    response.headers[API_VERSION_HEADER] = API_VERSION
    return response


# --- referrers and tags -------------------------------------------------------------------------


@router.get("/{ns}/referrers/{digest}")
def get_referrers(
    ns: str,
    digest: str,
    request: Request,
    who: Principal = Depends(principal),
    artifact_type: str | None = Query(default=None, alias="artifactType", max_length=255),
) -> Response:
    access = _access(request, who, ns)
    d = _digest(digest)
    found = _lookup(access, lambda s, n: oci_service.by_manifest_digest(s, n, d))
    descriptors = [oci_service.referrer(found.row)] if found is not None and found.kind == "artifact" else []
    headers = _headers()
    if artifact_type is not None:
        descriptors = [x for x in descriptors if x.artifact_type == artifact_type]
        headers["OCI-Filters-Applied"] = "artifactType"
    return Response(oci.referrers_index(descriptors), media_type=oci.OCI_INDEX, headers=headers)


def _is_tag(name: str) -> bool:
    try:
        oci.tag_for(name)
    except InvalidNameError:
        return False
    return True


def _page_size(n: str | None) -> int:
    if n is None:
        return MAX_TAGS_PAGE
    if not n.isascii() or not n.isdigit() or len(n) > 9:
        raise OciError(400, "UNSUPPORTED", f"n must be a non-negative integer, not {n!r}")
    return min(int(n), MAX_TAGS_PAGE)


@router.get("/{ns}/tags/list")
def list_tags(
    ns: str,
    request: Request,
    who: Principal = Depends(principal),
    n: str | None = Query(default=None, max_length=20),
    last: str | None = Query(default=None, max_length=256),
) -> JSONResponse:
    access = _access(request, who, ns)
    limit = _page_size(n)
    with access.read() as (s, namespace):
        names = sorted(r.name for r in refs.list_refs(s, namespace) if _is_tag(r.name))
    if last is not None:
        names = [t for t in names if t > last]
    page = names[:limit]
    headers = _headers()
    if len(names) > len(page) and page:
        query = urllib.parse.urlencode({"n": limit, "last": page[-1]})
        headers["Link"] = f'</v2/{ns}/tags/list?{query}>; rel="next"'
    return JSONResponse({"name": ns, "tags": page}, headers=headers)


# --- the per-ref repository <ns>/<name> ----------------------------------------------------------


def _alias_reference(ns: str, name: str, reference: str) -> str:
    """The namespace-level reference of ``reference`` in repository ``<ns>/<name>``."""
    if ":" in reference:
        return reference
    if reference != ALIAS_TAG:
        raise OciError(404, "MANIFEST_UNKNOWN", f"repository {ns}/{name} has one tag, {ALIAS_TAG!r}")
    if not _is_tag(name):
        raise OciError(404, "NAME_UNKNOWN", f"no repository {ns}/{name}")
    return name


@router.api_route("/{ns}/{name}/manifests/{reference}", methods=["GET", "HEAD"])
def get_ref_manifest(
    ns: str, name: str, reference: str, request: Request, who: Principal = Depends(principal)
) -> Response:
    return get_manifest(ns, _alias_reference(ns, name, reference), request, who)


@router.api_route("/{ns}/{name}/blobs/{digest}", methods=["GET", "HEAD"])
def get_ref_blob(
    ns: str, name: str, digest: str, request: Request, who: Principal = Depends(principal)
) -> Response:
    return get_blob(ns, digest, request, who)


@router.get("/{ns}/{name}/referrers/{digest}")
def get_ref_referrers(
    ns: str,
    name: str,
    digest: str,
    request: Request,
    who: Principal = Depends(principal),
    artifact_type: str | None = Query(default=None, alias="artifactType", max_length=255),
) -> Response:
    return get_referrers(ns, digest, request, who, artifact_type)


@router.get("/{ns}/{name}/tags/list")
def list_ref_tags(ns: str, name: str, request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    access = _access(request, who, ns)
    if not _is_tag(name):
        raise OciError(404, "NAME_UNKNOWN", f"no repository {ns}/{name}")
    with access.read() as (s, namespace):
        try:
            refs.get(s, namespace, name)
        except RefNotFoundError:
            raise OciError(404, "NAME_UNKNOWN", f"no repository {ns}/{name}") from None
    return JSONResponse({"name": f"{ns}/{name}", "tags": [ALIAS_TAG]}, headers=_headers())


# --- everything else -----------------------------------------------------------------------------


@router.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
def elsewhere(path: str, request: Request) -> Response:
    """A path the routes above do not serve: 404 to a read, 405 UNSUPPORTED to a push."""
    if request.method in ("GET", "HEAD"):
        raise OciError(404, "NAME_UNKNOWN", f"no repository or endpoint /v2/{path}")
    raise OciError(405, "UNSUPPORTED", PUSH_HINT, headers={"Allow": "GET, HEAD"})
