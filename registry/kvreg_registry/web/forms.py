"""Reading HTML form posts: ``application/x-www-form-urlencoded`` only, bounded, one value per field.

The body limit is enforced before this runs (``BodyLimitMiddleware``: the JSON
limit applies to every non-object request); here forms are further capped at
64 KiB and 50 fields, and file uploads (multipart) are refused: no page needs one.
Parsing uses python-multipart through Starlette's ``Request.form``.
"""

from __future__ import annotations

from fastapi import Request

from kvreg.core.errors import BodyTooLargeError, RequestInvalidError

MAX_FORM_BYTES = 64 * 1024
MAX_FIELDS = 50


async def read_form(request: Request) -> dict[str, str]:
    """The fields of a form post (the last value of a repeated field); raises on anything else."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not ctype and request.headers.get("content-length", "0") == "0":
        return {}  # an empty post: no fields (the CSRF check then refuses it with 403)
    if ctype != "application/x-www-form-urlencoded":
        raise RequestInvalidError("forms must be posted as application/x-www-form-urlencoded")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise BodyTooLargeError(f"a form post is limited to {MAX_FORM_BYTES} bytes")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise BodyTooLargeError(f"a form post is limited to {MAX_FORM_BYTES} bytes")
    form = await request.form(max_files=0, max_fields=MAX_FIELDS)
    out: dict[str, str] = {}
    for key, value in form.multi_items():
        if not isinstance(value, str):
            raise RequestInvalidError("file uploads are not accepted here")
        out[key] = value
    return out
