"""Answers in the client's dialect: error bodies (model lists are each dialect's ``GATEWAY.models``)."""

from __future__ import annotations

import logging

from starlette.responses import Response

from .. import dialects, hub
from ..dialects.base import EXTENSION_KEY, json_encode
from ._extensions import strip, wanted_here

__all__ = ["error", "error_body", "error_response", "json_response"]

log = logging.getLogger("llmbridge.gateway")


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_encode(body), status, headers, media_type="application/json")


def error_body(dialect: str, error: hub.Error) -> tuple[int, object]:
    """Status and body of ``error`` in ``dialect``'s shape (a generic shape if its codec fails)."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    try:
        encoded_status, body = dialects.get(dialect).encode_error(error)
    except Exception:  # a missing or broken codec must not turn an error into a 500
        log.exception("encode_error failed for %s", dialect)
        body = {"error": {"message": error.message, "type": error.type, "code": error.code}}
    else:
        status = error.status or encoded_status
    if not wanted_here(dialect) and EXTENSION_KEY.encode() in json_encode(body):
        body = strip(body)  # our data (the hub error type, status) only for clients that ask
    return status, body


def error_response(dialect: str, error: hub.Error, headers: dict[str, str] | None = None) -> Response:
    status, body = error_body(dialect, error)
    return json_response(body, status, headers)


def error(dialect: str, message: str, type: str, status: int | None = None, code: str | None = None) -> Response:
    return error_response(dialect, hub.Error(message, type, code, status or hub.ERROR_STATUS[type]))
