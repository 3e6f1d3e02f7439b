"""The error a request gets: OpenAI's error object with its HTTP status.

:class:`ApiError` is raised anywhere a request is checked or answered; the server turns it
into ``{"error": {"message", "type", "param", "code"}}`` with its status.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as the OpenAI error object, with ``status``."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.type, self.param, self.code = message, status, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
