"""An upstream that failed before the client saw a byte: the error, and whether to try another.

:class:`UpstreamFailed` carries the failure already translated to the hub (status, type,
message — never a credential), plus the upstream's headers a client should honour
(``retry-after``). :func:`as_hub_error` is the one translation of whatever went wrong while
talking to an upstream; :func:`retryable` the one rule for whether the next upstream may
serve the request instead.
"""

from __future__ import annotations

from .. import errors, hub
from . import _http

__all__ = ["UpstreamFailed", "as_hub_error", "retryable"]


class UpstreamFailed(errors.UpstreamError):
    """An upstream failure before any event, already translated to the hub."""

    def __init__(self, error: hub.Error, headers: dict[str, str] | None = None):
        self.error = error
        self.headers = headers or {}  # upstream response headers worth passing on (retry-after)
        super().__init__(error.message, status=error.status, body=error.body, type=error.type)


def as_hub_error(exc: BaseException, upstream: str) -> hub.Error:
    """Any failure while talking to an upstream, as a hub error with a status for the client."""
    if isinstance(exc, UpstreamFailed):
        return exc.error
    if isinstance(exc, errors.UpstreamError):
        status = exc.status or hub.ERROR_STATUS.get(exc.type, 502)
        return hub.Error(str(exc), exc.type, status=status, body=exc.body)
    if isinstance(exc, TimeoutError):
        return hub.Error(f"upstream {upstream!r} timed out", "timeout", status=504)
    if isinstance(exc, _http.ConnectError):
        return hub.Error(f"upstream {upstream!r}: {exc}", "api_error", "connect_error", 502)
    if isinstance(exc, _http.UpstreamHTTPError):
        return hub.Error(f"upstream {upstream!r}: {exc}", "api_error", status=502)
    return hub.Error(f"upstream {upstream!r} failed: {type(exc).__name__}", "api_error", status=502)


def retryable(error: hub.Error) -> bool:
    """Worth trying the next upstream (only ever before the client saw a byte): 429 and 5xx,
    which covers connect errors (502) and missed first-byte deadlines (504)."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status == 429 or status >= 500
