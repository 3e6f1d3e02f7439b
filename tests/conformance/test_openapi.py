"""API conformance: schemathesis against the published OpenAPI of a live registry.

For every operation of ``/api/v1/openapi.json`` and on each backend (SQLite + a
folder, PostgreSQL + SeaweedFS), schemathesis generates requests from the schema —
schema-valid ones and garbage (wrong types, strings that break the documented
patterns, missing bodies, undeclared methods) — sends them to ``kvreg serve`` on
loopback, and checks every answer:

- ``not_a_server_error``: no 5xx, ever;
- ``status_code_conformance``: the status is one the operation documents;
- ``content_type_conformance``: the Content-Type is the documented one;
- ``response_schema_conformance``: the body validates against the documented schema
  (the error body ``{"error": {...}}`` of ``kvreg_registry.api.errors`` for 4xx);
- ``response_headers_conformance``, ``negative_data_rejection`` (garbage is never a
  2xx), ``positive_data_acceptance`` (a request that fits the schema is not refused
  as malformed), ``unsupported_method`` (undeclared methods are 405 with ``Allow``),
  ``missing_required_header``, ``ignored_auth``, ``use_after_free`` and
  ``ensure_resource_availability``: every other check the installed schemathesis
  has, all enabled; none is turned off.

The run is bounded and reproducible: a fixed seed, ``derandomize``, no example
database, ``MAX_EXAMPLES`` per operation in the fuzzing phase, and the coverage phase's
edge cases (boundaries, wrong types, undeclared methods), which are fixed by the schema.
Requests go out as one of three real callers (a server admin, a writer of the seeded
namespace, a user with no role, all with tokens made through the admin API) or
anonymously; about half of the fuzzing phase's requests are aimed at what the seeding
stored (the namespace, its object, its key, its hold), so the authenticated code paths
answer 2xx, 403, 409 and 416 and not only 401 and 404. ``Range`` is a published header
of the object GET and HEAD, so ranges good and bad are sent at the seeded object.

The schema is built at collection time from ``create_app`` (the code that serves
it); ``test_published_schema_is_the_one_tested`` checks that the live server
publishes exactly that document.

What this does not do: stateful sequences (push then pull: tests/integration
does that), load (the soak), or timing.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.config import SchemathesisConfig
from schemathesis.core import NotSet

from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

from .conftest import NAMESPACE, PUBLIC_NAMESPACE, REQUESTS, Target

SEED = 20261130
#: Examples per operation and generation phase (the coverage phase adds its edge cases).
MAX_EXAMPLES = 4

#: Operations where a request that fits the schema may still be refused, and why: what the
#: refusal depends on cannot be written in JSON Schema. ``positive_data_acceptance`` stays on
#: for them, with these statuses added to the accepted ones; everything else is unchanged.
CONTENT_CHECKED = {
    # the bytes must hash to the digest in the URL: 422 DIGEST_MISMATCH
    "PUT /api/v1/namespaces/{ns}/objects/{digest}": [422],
    # a DSSE envelope is verified (signature, payload digest, objects held): 422 *_INVALID
    "PUT /api/v1/namespaces/{ns}/envelopes/{digest}": [422],
    # a graft receipt is verified the same way: 422 RECEIPT_INVALID
    "POST /api/v1/namespaces/{ns}/receipts": [422],
    # a ref may only point at an envelope the namespace holds: 422 MANIFEST_UNKNOWN. And 400:
    # schemathesis 4.32's coverage phase sends If-Match / If-None-Match values outside their
    # published patterns (If-None-Match: 0) as schema-valid; the server rightly refuses them.
    # And 428: one of If-Match / If-None-Match is required, which OpenAPI cannot say of headers.
    "PUT /api/v1/namespaces/{ns}/refs/{name}": [422, 400, 428],
    "DELETE /api/v1/namespaces/{ns}/refs/{name}": [400, 428],
    # an object pack's body must be the objects its X-Kvreg-Objects header lists, each hashing to
    # its digest (422), with their sizes' sum as Content-Length (400), within the registry's
    # limits (413), each digest once (400); schemathesis's coverage phase also sends header
    # values outside the published pattern as schema-valid (400)
    "POST /api/v1/namespaces/{ns}/uploads/{upload_id}/objects": [400, 413, 422],
    # a Range past the end of the object: 416 (the size is the object's, not the schema's)
    "GET /api/v1/namespaces/{ns}/objects/{digest}": [416],
    "HEAD /api/v1/namespaces/{ns}/objects/{digest}": [416],
    # since/until: the pattern says YYYY-MM-DD, the calendar (2026-02-31) is checked by the route
    "GET /api/v1/artifacts": [400],
    # tree sizes are bounded by the log's current size: 400 for a size the log has not reached
    "GET /api/v1/log/proof/inclusion": [400],
    "GET /api/v1/log/proof/consistency": [400],
}
_ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]


def published_schema() -> dict[str, Any]:
    """The OpenAPI document ``kvreg serve`` publishes, as JSON would carry it."""
    return json.loads(json.dumps(create_app(Settings()).openapi()))


CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
        "checks": {"enabled": True},
        "operations": [
            {
                "include-name": name,
                "checks": {"positive_data_acceptance": {"expected-statuses": [*_ACCEPTED, *map(str, extra)]}},
            }
            for name, extra in CONTENT_CHECKED.items()
        ]
        + [
            {
                # The coverage phase builds its boundary cases at collection time, and for
                # block_keys (up to 4,096 different sha256 strings) that takes more than a
                # minute: POST /route gets more fuzzing examples instead. Its bounds (4,096
                # and 4,097 keys, a repeated key) are tested in tests/registry/test_router.py.
                "include-name": "POST /api/v1/route",
                "phases": {"coverage": {"enabled": False}},
                "generation": {"max-examples": 6 * MAX_EXAMPLES},
            },
            {
                # PUT/POST/... .../objects/missing is the object route with the digest 'missing'
                # (400 DIGEST_INVALID), not an undeclared method of the missing query.
                "include-name": "POST /api/v1/namespaces/{ns}/objects/missing",
                "checks": {"unsupported_method": {"enabled": False}},
            },
        ],
    }
)
SCHEMA = schemathesis.openapi.from_dict(published_schema(), config=CONFIG)

_AIM: list[Target] = []


@pytest.fixture(scope="module")
def aimed(target: Target) -> Target:
    """The target the generation hooks below aim at; set before Hypothesis draws anything."""
    _AIM[:] = [target]
    return target


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    """One keep-alive session for the whole run (a new connection per request is slower)."""
    with requests.Session() as session:
        yield session


def _callers() -> list[str | None]:
    return [*sorted(_AIM[0].tokens), None]


def _authorize(case: Case, caller: str | None) -> None:
    if caller is None:
        case.headers.pop("Authorization", None)
    else:
        case.headers["Authorization"] = f"Bearer {_AIM[0].tokens[caller]}"


def _aim(case: Case, caller: str | None, at_seed: bool) -> Case:
    target = _AIM[0]
    _authorize(case, caller)
    params = case.path_parameters
    if at_seed and params:
        seeded: dict[str, object] = {
            "ns": PUBLIC_NAMESPACE if caller is None else NAMESPACE,
            "digest": target.object_digest,
            "user": "fuzz-writer",
            "keyid": target.keyid,
            "hold_id": target.hold_id,
            "name": "held",
        }
        for key in params.keys() & seeded.keys():
            params[key] = seeded[key]
    if "token_id" in params:
        try:
            if int(params["token_id"]) in target.token_ids:
                # Revoking a token this run authenticates with would turn the rest of the run
                # into 401s: those ids are moved out of the way; every other id is sent.
                params["token_id"] = int(params["token_id"]) + 1_000_000
        except (TypeError, ValueError):
            pass  # garbage ids are sent as generated
    return case


@SCHEMA.hook
def flatmap_case(context: schemathesis.HookContext, case: Case) -> st.SearchStrategy[Case]:
    return st.tuples(st.sampled_from(_callers()), st.booleans()).map(lambda pick: _aim(case, *pick))


@SCHEMA.parametrize()
def test_api_conforms(case: Case, aimed: Target, http: requests.Session) -> None:
    phase = case.meta.phase.name if case.meta else "?"
    if phase == "coverage":
        # The coverage phase's cases are built from the schema alone, without the hooks above:
        # each is sent as one of the callers, chosen by its content (the same one every run).
        body = None if isinstance(case.body, NotSet) else case.body
        key = f"{case.method} {case.formatted_path} {case.query!r} {body!r}".encode()
        callers = _callers()
        _authorize(case, callers[zlib.crc32(key) % len(callers)])
    REQUESTS[aimed.registry.backend] += 1
    REQUESTS[f"{aimed.registry.backend}, {phase} phase"] += 1
    case.call_and_validate(base_url=aimed.registry.url, session=http)


def test_published_schema_is_the_one_tested(target: Target) -> None:
    live = httpx.get(f"{target.registry.url}/api/v1/openapi.json", timeout=30)
    assert live.status_code == 200
    assert live.json() == SCHEMA.raw_schema
