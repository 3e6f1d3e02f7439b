"""Finding artifacts on a registry: a namespace's registered keys, search, and prompt routing.

What the registry answers is checked for shape only: the keys listed are not
trusted, and a route candidate is pulled and verified by the caller before any graft.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvreg.core.digest import Digest
from kvreg.core.errors import KvregError, RemoteError, UsageError
from kvreg.core.keys import PublicKey
from kvreg.core.names import validate_name, validate_namespace
from kvreg.remote.api.core import ApiCore, parse_size

log = logging.getLogger(__name__)

__all__ = ["MAX_ROUTE_KEYS", "MAX_ROUTE_LIMIT", "RouteCandidate", "SearchApi"]

#: ``POST /route``: block keys per request and candidates per answer (the registry's limits).
MAX_ROUTE_KEYS = 4096
MAX_ROUTE_LIMIT = 100


@dataclass(frozen=True, slots=True)
class RouteCandidate:
    """One artifact ``POST /route`` proposes for a prompt: what the registry says, not verified.

    ``refs`` are ref *names* within ``namespace`` that point at the artifact (``NAME``,
    not ``NS/NAME``). ``matched_blocks``: how many leading block keys of the prompt the
    artifact's manifest holds at the same index (0 when the request sent no keys).
    ``created_at`` is when the registry stored it (RFC 3339, UTC). The caller pulls
    the artifact, checks its signature against its trust policy and compares tokens
    before any graft.
    """

    namespace: str
    manifest_digest: Digest
    refs: list[str]
    matched_blocks: int
    token_count: int
    prompt_tokens: int | None
    block_size: int
    verdict: str | None
    verifier: str | None
    created_at: str | None


class SearchApi(ApiCore):
    """The key, search and route endpoints of :class:`kvreg.remote.http.RegistryClient`."""

    # --- keys and search -----------------------------------------------------------------

    def list_keys(self, namespace: str) -> list[PublicKey]:
        """The public keys the registry has registered for ``namespace`` (revoked ones too).

        These are *not* trusted: pull uses them only to name the signer of a
        manifest that the local trust policy does not accept. Malformed entries
        are skipped with a warning.
        """
        doc = self._json(self._call("GET", self._ns_url(namespace, "keys")), f"GET keys of {namespace}")
        items = doc.get("keys")
        if not isinstance(items, list):
            raise RemoteError(f"the registry's key list of {namespace} is malformed")
        out: list[PublicKey] = []
        for item in items:
            text = item.get("public_key") if isinstance(item, dict) else None
            try:
                out.append(PublicKey.from_text(text))  # type: ignore[arg-type]
            except KvregError:
                log.warning("the registry listed a malformed key for %s; ignoring it", namespace)
        return out

    def search(
        self,
        *,
        namespace: str | None = None,
        model: str | None = None,
        verifier: str | None = None,
        verdict: str | None = None,
        q: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        """``GET /api/v1/artifacts``: ``{"artifacts": [...], "total": N}`` (see docs/protocol.md)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        for key, value in (
            ("namespace", namespace),
            ("model", model),
            ("verifier", verifier),
            ("verdict", verdict),
            ("q", q),
        ):
            if value is not None:
                params[key] = value
        doc = self._json(self._call("GET", self._url("artifacts"), params=params), "search")
        if not isinstance(doc.get("artifacts"), list):
            raise RemoteError("the registry's search answer is malformed")
        return doc

    # --- routing -------------------------------------------------------------------------

    def route(
        self,
        *,
        model_fingerprint: Digest,
        tokenizer_fingerprint: Digest,
        config_fingerprint: Digest,
        block_size: int,
        block_keys: Sequence[Digest],
        namespaces: Sequence[str] | None = None,
        limit: int = 20,
    ) -> list[RouteCandidate]:
        """``POST /api/v1/route``: the artifacts the caller can read that hold the longest prefix
        of ``block_keys`` (the prompt's keys, block 0 first: ``kvreg.core.blockkey.block_keys``),
        most matched blocks first, then verdict ``pass``, then newest. With no keys (a prompt
        shorter than one block): the artifacts made with these fingerprints and block size.

        Refused here, before any request (``UsageError``): more than ``MAX_ROUTE_KEYS`` keys
        (send the first ones), ``limit`` outside 1..``MAX_ROUTE_LIMIT``, a block size that is
        not a positive integer, or an invalid digest or namespace name. The answer is checked
        strictly (``RemoteError``): every field's type, digests, names, at most ``limit``
        candidates, each with this block size, ``matched_blocks`` within the keys sent and
        ordered as promised, namespaces among those asked for.
        """
        keys = [str(Digest(k)) for k in block_keys]
        if len(keys) > MAX_ROUTE_KEYS:
            raise UsageError(
                f"{len(keys)} block keys to route, more than the registry's limit of {MAX_ROUTE_KEYS}",
                hint=f"send the keys of the prompt's first {MAX_ROUTE_KEYS} blocks",
            )
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
            raise UsageError(f"block size must be a positive integer, got {block_size!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_ROUTE_LIMIT:
            raise UsageError(f"limit must be an integer from 1 to {MAX_ROUTE_LIMIT}, got {limit!r}")
        names = None if namespaces is None else [validate_namespace(n) for n in namespaces]
        body: dict[str, Any] = {
            "model_fingerprint": str(Digest(model_fingerprint)),
            "tokenizer_fingerprint": str(Digest(tokenizer_fingerprint)),
            "config_fingerprint": str(Digest(config_fingerprint)),
            "block_size": block_size,
            "block_keys": keys,
            "limit": limit,
        }
        if names is not None:
            body["namespaces"] = names
        doc = self._json(self._call("POST", self._url("route"), json_body=body), "route")
        items = doc.get("candidates")
        if not isinstance(items, list) or len(items) > limit:
            raise RemoteError("the registry's route answer is malformed (candidates)")
        out = [self._route_candidate(item, block_size, len(keys), names) for item in items]
        ranks = [-c.matched_blocks for c in out]
        if ranks != sorted(ranks):
            raise RemoteError("the registry's route candidates are not ordered by matched blocks")
        return out

    def _route_candidate(
        self, item: Any, block_size: int, key_count: int, names: list[str] | None
    ) -> RouteCandidate:
        if not isinstance(item, dict):
            raise RemoteError("the registry's route answer is malformed (a candidate is not an object)")
        try:
            namespace = validate_namespace(item.get("namespace"))  # type: ignore[arg-type]
        except KvregError as e:
            raise RemoteError(f"the registry routed to an invalid namespace {item.get('namespace')!r}") from e
        if names is not None and namespace not in names:
            raise RemoteError(f"the registry routed to namespace {namespace!r}, which was not asked for")
        digest = self._digest(item.get("manifest_digest"), "a route candidate")
        what = f"route candidate {namespace}@{digest.short()}"
        refs = item.get("refs")
        if not isinstance(refs, list):
            raise RemoteError(f"the registry's {what} has no ref list")
        try:
            ref_names = [validate_name(r) for r in refs]
        except KvregError as e:
            raise RemoteError(f"the registry's {what} lists an invalid ref name") from e
        matched = parse_size(item.get("matched_blocks"), f"matched block count of {what}")
        if matched > key_count:
            raise RemoteError(f"the registry's {what} matches {matched} blocks of the {key_count} sent")
        token_count = parse_size(item.get("token_count"), f"token count of {what}")
        prompt_tokens = item.get("prompt_tokens")
        if prompt_tokens is not None:
            prompt_tokens = parse_size(prompt_tokens, f"prompt token count of {what}")
        if item.get("block_size") != block_size or isinstance(item.get("block_size"), bool):
            raise RemoteError(
                f"the registry's {what} has block size {item.get('block_size')!r}, not {block_size}"
            )
        optional: dict[str, str | None] = {}
        for key in ("verdict", "verifier", "created_at"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                raise RemoteError(f"the registry's {what} has an invalid {key}: {value!r:.80}")
            optional[key] = value
        return RouteCandidate(
            namespace=namespace,
            manifest_digest=digest,
            refs=ref_names,
            matched_blocks=matched,
            token_count=token_count,
            prompt_tokens=prompt_tokens,
            block_size=block_size,
            verdict=optional["verdict"],
            verifier=optional["verifier"],
            created_at=optional["created_at"],
        )
