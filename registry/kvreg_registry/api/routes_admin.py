"""Server info, the caller, namespaces, users, tokens, roles and signing keys."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Request, Response

import kvreg
from kvreg.core.digest import Digest
from kvreg.core.timestamps import rfc3339
from kvreg_registry.api import models as m
from kvreg_registry.api.deps import NamespaceAccess, namespace_access, principal, state
from kvreg_registry.api.params import IdPath, KeyIdPath, NsPath, UserPath
from kvreg_registry.api.routes_fetch import fetch_packs_offered
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import Namespace, SigningKey
from kvreg_registry.services import accounts
from kvreg_registry.services import router as router_service

router = APIRouter()


def iso(t: dt.datetime | None) -> str | None:
    return None if t is None else rfc3339(t)


def _namespace_out(ns: Namespace) -> m.NamespaceOut:
    return m.NamespaceOut(
        name=ns.name,
        public=ns.public,
        description=ns.description,
        created_at=iso(ns.created_at) or "",
        description_updated_at=iso(ns.description_updated_at),
        description_updated_by=ns.description_updated_by,
    )


def _key_out(k: SigningKey) -> m.KeyOut:
    return m.KeyOut(
        keyid=k.keyid,
        public_key=k.public_key,
        created_at=iso(k.created_at) or "",
        revoked_at=iso(k.revoked_at),
        label=k.label,
        owner=k.owner,
        log_index=k.log_seq,
    )


@router.get(
    "/",
    responses=m.errors(base=m.ANY_REQUEST),
    response_model=m.ServerInfo,
    summary="Server version, API version, storage kind and limits",
)
def info(request: Request) -> m.ServerInfo:
    st = state(request)
    return m.ServerInfo(
        kvreg=kvreg.__version__,
        api=1,
        storage=st.storage.kind,
        limits=m.Limits(
            max_object_bytes=st.settings.max_object_bytes,
            max_json_bytes=st.settings.max_json_bytes,
            max_missing_digests=st.settings.max_missing_digests,
            max_pack_objects=st.settings.max_pack_objects,
            max_pack_bytes=st.settings.max_pack_bytes,
            max_route_keys=router_service.MAX_KEYS,
            max_fetch_objects=st.settings.max_pack_objects if fetch_packs_offered(st) else None,
        ),
    )


@router.get("/whoami", responses=m.errors(), response_model=m.WhoAmI, summary="The caller's user and roles")
def whoami(request: Request, who: Principal = Depends(principal)) -> m.WhoAmI:
    with state(request).db.read() as s:
        return m.WhoAmI(user=who.name, admin=who.is_admin, roles=accounts.roles_of(s, who))


@router.get(
    "/namespaces",
    responses=m.errors(),
    response_model=m.NamespaceList,
    summary="The namespaces the caller can read",
)
def list_namespaces(request: Request, who: Principal = Depends(principal)) -> m.NamespaceList:
    with state(request).db.read() as s:
        return m.NamespaceList(namespaces=[_namespace_out(ns) for ns in accounts.list_namespaces(s, who)])


@router.post(
    "/namespaces",
    responses=m.errors(400, 403, 409),
    status_code=201,
    response_model=m.NamespaceOut,
    summary="Create a namespace (server admin)",
)
def create_namespace(
    body: m.NamespaceIn, request: Request, who: Principal = Depends(principal)
) -> m.NamespaceOut:
    with state(request).db.write() as s:
        ns = accounts.create_namespace(s, who, body.name, public=body.public, description=body.description)
        return _namespace_out(ns)


@router.get(
    "/namespaces/{ns}", responses=m.errors(400, 404), response_model=m.NamespaceOut, summary="One namespace"
)
def get_namespace(ns: NsPath, access: NamespaceAccess = Depends(namespace_access)) -> m.NamespaceOut:
    with access.read() as (_s, namespace):
        return _namespace_out(namespace)


@router.patch(
    "/namespaces/{ns}",
    responses=m.errors(400, 403, 404),
    response_model=m.NamespaceOut,
    summary="Change a namespace's description (its admins)",
)
def update_namespace(
    ns: NsPath, body: m.NamespacePatch, access: NamespaceAccess = Depends(namespace_access)
) -> m.NamespaceOut:
    with access.write("admin") as (s, _namespace):
        return _namespace_out(accounts.set_namespace_description(s, access.who, ns, body.description))


@router.post(
    "/users",
    responses=m.errors(400, 403, 409),
    status_code=201,
    response_model=m.UserOut,
    summary="Create a user (server admin)",
)
def create_user(body: m.UserIn, request: Request, who: Principal = Depends(principal)) -> m.UserOut:
    with state(request).db.write() as s:
        user = accounts.create_user(s, who, body.name, admin=body.admin)
        return m.UserOut(name=user.name, admin=user.is_admin, created_at=iso(user.created_at) or "")


@router.post(
    "/users/{user}/tokens",
    responses=m.errors(400, 403, 404),
    status_code=201,
    response_model=m.TokenOut,
    summary="Create an API token (server admin, or the user for themself); shown once",
)
def create_token(
    user: UserPath, body: m.TokenIn, request: Request, who: Principal = Depends(principal)
) -> m.TokenOut:
    with state(request).db.write() as s:
        t = accounts.create_token(s, who, user, label=body.label, expires_in_days=body.expires_in_days)
    return m.TokenOut(id=t.id, token=t.token, user=t.user, label=t.label, expires_at=iso(t.expires_at))


@router.delete(
    "/tokens/{token_id}", responses=m.errors(400, 403, 404), status_code=204, summary="Revoke a token"
)
def revoke_token(token_id: IdPath, request: Request, who: Principal = Depends(principal)) -> Response:
    with state(request).db.write() as s:
        accounts.revoke_token(s, who, token_id)
    return Response(status_code=204)


@router.put(
    "/namespaces/{ns}/roles/{user}",
    responses=m.errors(400, 403, 404),
    status_code=204,
    summary="Give a user a role in a namespace",
)
def set_role(
    ns: NsPath, user: UserPath, body: m.RoleIn, access: NamespaceAccess = Depends(namespace_access)
) -> Response:
    with access.write("admin") as (s, _namespace):
        accounts.set_role(s, access.who, ns, user, body.role)
    return Response(status_code=204)


@router.delete(
    "/namespaces/{ns}/roles/{user}",
    responses=m.errors(400, 403, 404),
    status_code=204,
    summary="Take a user's role away",
)
def remove_role(ns: NsPath, user: UserPath, access: NamespaceAccess = Depends(namespace_access)) -> Response:
    with access.write("admin") as (s, _namespace):
        accounts.remove_role(s, access.who, ns, user)
    return Response(status_code=204)


@router.get(
    "/namespaces/{ns}/keys",
    responses=m.errors(400, 404),
    response_model=m.KeyList,
    summary="Signing keys registered for a namespace",
)
def list_keys(ns: NsPath, access: NamespaceAccess = Depends(namespace_access)) -> m.KeyList:
    with access.read() as (s, namespace):
        return m.KeyList(keys=[_key_out(k) for k in accounts.list_keys(s, namespace)])


@router.post(
    "/namespaces/{ns}/keys",
    responses=m.errors(400, 403, 404, 409),
    status_code=201,
    response_model=m.KeyOut,
    summary="Register a signing key",
)
def register_key(ns: NsPath, body: m.KeyIn, access: NamespaceAccess = Depends(namespace_access)) -> m.KeyOut:
    with access.write("admin") as (s, _namespace):
        return _key_out(
            accounts.register_key(s, access.who, ns, body.public_key, label=body.label, owner=body.owner)
        )


@router.delete(
    "/namespaces/{ns}/keys/{keyid}",
    responses=m.errors(400, 403, 404),
    response_model=m.KeyOut,
    summary="Revoke a signing key",
)
def revoke_key(ns: NsPath, keyid: KeyIdPath, access: NamespaceAccess = Depends(namespace_access)) -> m.KeyOut:
    keyid = Digest(keyid)  # a key id is sha256:<hex> of the raw key; anything else is 400
    with access.write("admin") as (s, _namespace):
        return _key_out(accounts.revoke_key(s, access.who, ns, keyid))
