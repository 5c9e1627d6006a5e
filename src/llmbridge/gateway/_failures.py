"""An upstream that failed before the client saw a byte: the error, and whether to try another.

:class:`UpstreamFailed` carries the failure already translated to the hub (status, type,
message — never a credential), plus the upstream's headers a client should honour
(``retry-after``). :func:`as_hub_error` is the one translation of whatever went wrong while
talking to an upstream. Whether another deployment may serve the request instead is the
router's one table (``routing.RETRY_STATUS``).
"""

from __future__ import annotations

from typing import Any

from .. import errors, hub
from . import _http

__all__ = ["UpstreamFailed", "as_hub_error"]


class UpstreamFailed(errors.UpstreamError):
    """An upstream failure before any event, already translated to the hub."""

    def __init__(self, error: hub.Error, headers: dict[str, str] | None = None):
        self.error = error
        self.headers = headers or {}  # upstream response headers worth passing on (retry-after)
        # the deployment (routing.Attempt) that failed last, when routing gave up: named in the answer
        self.deployment: Any = None
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
