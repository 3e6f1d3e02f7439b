"""The formats of the API's strings and its path parameters, as published in the OpenAPI document.

The routes check these formats themselves (with their stable error codes); the patterns
here only document them (:func:`documented`). Request and response bodies are in
``api.models``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Path

# The formats the routes check themselves (with their stable codes: DIGEST_INVALID,
# NAME_INVALID, KEY_INVALID), published as JSON Schema patterns. They document and do
# not validate: pydantic would answer REQUEST_INVALID instead.
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
NAME_PATTERN = r"^(?!.*[.][.])[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
USER_PATTERN = r"^(?!.*[.][.])[a-z0-9][a-z0-9._-]{0,63}$"
PUBLIC_KEY_PATTERN = r"^ed25519:[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$"
#: A signing key's label: any text without control characters (``services.accounts.KEY_LABEL_RE``).
KEY_LABEL_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
ETAG_PATTERN = r'^"?sha256:[0-9a-f]{64}"?$'
#: ``YYYY-MM-DD`` or an ISO 8601 datetime, or empty (no bound); the route checks the calendar.
TIME_PATTERN = (
    r"^([0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,6})?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?)?)?$"
)
#: One ``bytes=`` range (a range outside the object is 416).
RANGE_PATTERN = r"^bytes=([0-9]{1,20}-[0-9]{0,20}|-[0-9]{1,20})$"
UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def documented(pattern: str) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` that publishes ``pattern`` without pydantic enforcing it.

    An optional header or query parameter (``str | None``) is published as a string: it is
    absent or a string, never a JSON null.
    """

    def extra(schema: dict[str, Any]) -> None:
        schema.pop("anyOf", None)
        schema["type"] = "string"
        schema["pattern"] = pattern

    return extra


#: The largest row id (a 32-bit INTEGER column). Ids outside 1..MAX_ID are refused (422) before
#: any query: a huge one would be a database error on PostgreSQL.
MAX_ID = 2**31 - 1
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]

# Path parameters, with their documented formats.
NsPath = Annotated[str, Path(description="a namespace", json_schema_extra=documented(NAMESPACE_PATTERN))]
DigestPath = Annotated[str, Path(description="sha256:<64 hex>", json_schema_extra=documented(DIGEST_PATTERN))]
NamePath = Annotated[str, Path(description="a ref name", json_schema_extra=documented(NAME_PATTERN))]
UserPath = Annotated[str, Path(description="a user name", json_schema_extra=documented(USER_PATTERN))]
UploadPath = Annotated[
    str, Path(description="an upload session id", json_schema_extra=documented(UUID_PATTERN))
]
KeyIdPath = Annotated[
    str, Path(description="sha256:<64 hex> of the raw key", json_schema_extra=documented(DIGEST_PATTERN))
]
