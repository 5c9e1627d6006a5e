"""Reading a JSON request body for the non-chat endpoints, with the gateway's size limit."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..dialects.base import json_decode
from . import replies

__all__ = ["read_object"]


async def read_object(request: Request, limit: int, dialect: str) -> dict[str, Any] | Response:
    """The body as a JSON object, or the error response to send in ``dialect``'s shape:
    413 over ``limit`` bytes, 400 when it is not JSON or not an object."""
    length = request.headers.get("content-length")
    too_large = replies.error(dialect, f"request body exceeds {limit} bytes", "request_too_large")
    if length and length.isdigit() and int(length) > limit:
        return too_large
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return too_large
        parts.append(chunk)
    try:
        body = json_decode(b"".join(parts))
    except Exception as exc:  # msgspec.DecodeError, or bytes that are not UTF-8
        return replies.error(dialect, f"request body is not valid JSON: {exc}", "invalid_request")
    if not isinstance(body, dict):
        return replies.error(dialect, "request body must be a JSON object", "invalid_request")
    return body
