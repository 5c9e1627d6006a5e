"""The asyncio client: :class:`AsyncClient`, :class:`AsyncStream`, :class:`AsyncConversation`.

This module is the source of both clients: ``_sync.py`` is generated from it by
``scripts/unasync.py`` (a table of substitutions; ``make lint`` fails when the two drift).
Edit this file, then run ``python scripts/unasync.py``.  Everything the two share beyond
moving bytes lives in ``_core``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from .. import dialects, hub
from ..dialects.base import json_decode, json_encode
from ..errors import ConversationBusyError, ToolLoopError, TransportError, UpstreamError
from ..media import ImageEvent, ImageStreamDecoder
from ..unievent import ToolCall, UniEvent
from . import _media
from . import tools as _tools
from ._core import (
    RETRY_STATUSES,
    RETRYABLE,
    Completion,
    StreamCore,
    aresolve,
    backoff,
    base_url_for,
    binding_headers,
    media_kind,
    parse_json_body,
    prepare,
    upstream_error,
)
from ._request import build_request, to_messages
from ._websocket_async import AsyncWebSocketTransport


class AsyncStream:
    """A streamed call: ``async for`` over it yields :class:`~llmbridge.unievent.UniEvent`; or use ``async with``.

    Nothing is sent until the first ``__anext__`` or ``__aenter__``.  :meth:`aclose` (alias
    :meth:`abort`) closes the HTTP connection at once and then runs the end callback (which
    frees a conversation), whether or not the close succeeded.  :attr:`completion` is the
    assembled message once the stop event went out; exceptions carry the partial one in
    ``.partial``.  A stream dropped without being closed frees its conversation when it is
    garbage-collected.
    """

    def __init__(
        self,
        client: AsyncClient,
        request: hub.Request,
        on_stop: Callable[[Completion], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self.request = request
        self._core = StreamCore(client.codec)
        self._on_stop = on_stop
        self._on_end = on_end
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | AsyncIterator[str] | None = None
        self._started = False
        self._buffer: deque[UniEvent] = deque()
        self._body_done = False
        self.completion: Completion | None = None
        self.closed = False

    # -- the protocol

    async def __aenter__(self) -> AsyncStream:
        await self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncStream:
        return self

    async def __anext__(self) -> UniEvent:
        try:
            return await self._next()
        except BaseException:  # any way out (a cancelled task too): the connection must not outlive it
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop now: the connection closes (the server sees the client go), nothing more is yielded.

        The end callback runs after the close, and runs even when closing raised, so a
        conversation is never left busy.
        """
        if self.closed:
            return
        self.closed = True
        try:
            if self._response is not None:
                await self._response.aclose()
            close_turn = getattr(self._chunks, "aclose", None)
            if close_turn is not None and self._client._ws is not None:
                await close_turn()  # a WebSocket turn: sends cancel, reads the turn to its end
        finally:
            if self._on_end is not None:
                self._on_end()

    abort = aclose
    close = aclose  # the blocking twin's name  # unasync: async-only

    def __del__(self) -> None:
        # Abandoned without a close: free the conversation (and, in the blocking twin, the
        # connection; an async response can only be closed on a running loop).
        if not self.closed:
            with contextlib.suppress(Exception):
                self.closed = True  # unasync: async-only
                if self._on_end is not None:  # unasync: async-only
                    self._on_end()  # unasync: async-only
                # unasync: sync-only: self.close()

    @property
    def partial(self) -> Completion:
        """What has been assembled so far (the ``.done`` items)."""
        return self._core.partial

    @property
    def response(self) -> httpx.Response | None:
        return self._response

    async def until_done(self) -> Completion:
        """Consume the rest of the stream; the assembled message."""
        async for _ in self:
            pass
        if self.completion is None:  # closed early
            raise RuntimeError("the stream was closed before its stop event")
        return self.completion

    # -- internals

    async def _start(self) -> None:
        if self._started or self.closed:
            return
        self._started = True
        ws = self._client._ws
        if ws is not None:  # the WebSocket binding: the request envelope as a text message
            self._chunks = ws.turn(json_encode(self._client.codec.encode_request(self.request)).decode())
            return
        try:
            response = await self._client._send(self.request)
        except BaseException:
            await self.aclose()
            raise
        self._response = response
        self._core.use_binding(response.headers.get("content-type"))
        if media_kind(response.headers.get("content-type")) == "json":  # answered whole: same events
            body = await response.aread()
            self._buffer.extend(self._core.whole(parse_json_body(body, self._core)))
            self._body_done = True
        else:
            self._chunks = response.aiter_bytes()

    async def _next(self) -> UniEvent:
        if self.closed:  # closed or aborted: nothing more, even what was already decoded
            raise StopAsyncIteration
        while not self._buffer:
            if not self._started:
                await self._start()
                continue
            if self._body_done:
                self._buffer.extend(self._core.close())
                if not self._buffer:
                    await self.aclose()
                    raise StopAsyncIteration
                continue
            try:
                chunk = await self._chunks.__anext__()  # type: ignore[union-attr]
            except StopAsyncIteration:
                self._body_done = True
                continue
            except httpx.RemoteProtocolError:  # the peer cut the body short: a truncated stream
                self._body_done = True
                continue
            except httpx.TimeoutException as exc:
                raise UpstreamError(f"read timed out: {exc}", type="timeout", partial=self.partial) from exc
            except httpx.TransportError as exc:
                raise TransportError(f"connection failed mid-stream: {exc}", partial=self.partial) from exc
            if type(chunk) is str:
                self._buffer.extend(self._core.feed_message(chunk))
            else:
                self._buffer.extend(self._core.feed(chunk))  # type: ignore[arg-type]
        event = self._buffer.popleft()
        if event.event_type == "stop":
            self.completion = Completion.of(self._core.view.message)
            if self._on_stop is not None:
                self._on_stop(self.completion)  # recorded before the caller sees the stop
            self._buffer.clear()
            await self.aclose()  # the turn is complete: release the connection and the conversation
        return event


class AsyncClient:
    """Talks one dialect to the gateway or a vendor endpoint; every call yields MMSP UniEvents."""

    def __init__(
        self,
        base_url: str,
        dialect: str = "llm-stream",
        api_key: str | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 10.0,
        max_retries: int = 2,
        headers: dict[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        binding: str = "sse",
    ) -> None:
        self.codec = dialects.get(dialect)
        self.dialect = dialect
        self.binding = binding
        self.base_url = base_url_for(self.codec, base_url)
        self.api_key = api_key
        self.max_retries = max_retries
        self.headers = {**binding_headers(self.codec, binding), **(headers or {})}
        self._ws = (
            AsyncWebSocketTransport(self.base_url, api_key, self.headers, timeout) if binding == "websocket" else None
        )
        self._own_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=connect_timeout))
        self.tools = _tools.ToolRegistry()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client, when this client made it (and the WebSocket, when one is open)."""
        if self._ws is not None:
            await self._ws.aclose()
        if self._own_http:
            await self._http.aclose()

    # -- calls

    def stream(
        self,
        model: str,
        messages: Any = None,
        *,
        system: str | None = None,
        tools: Any = None,
        tool_choice: Any = None,
        **params: Any,
    ) -> AsyncStream:
        """A streamed call; see :class:`AsyncStream`.  ``params``: max_tokens, temperature, stop ..."""
        request = build_request(model, messages, system=system, tools=tools, tool_choice=tool_choice, **params)
        return AsyncStream(self, request)

    def images(self, model: str, prompt: str, *, stream: bool = True, **options: Any) -> AsyncIterator[ImageEvent]:
        """See :meth:`Client.images`; iterate with ``async for``."""
        url, body = _media.images_request(self.dialect, self.base_url, model, prompt, stream, options)
        headers = _media.auth_headers(self.dialect, self.api_key, self.headers)
        return self._images(url, headers, body, stream)

    async def _images(self, url: str, headers: dict[str, str], body: dict, stream: bool) -> AsyncIterator[ImageEvent]:
        try:
            async with self._http.stream("POST", url, headers=headers, content=json_encode(body)) as response:
                if response.status_code >= 400:
                    raise upstream_error(dialects.get("openai-chat"), response.status_code, await response.aread())
                if not stream:
                    for item in _media.images_from_body(json_decode(await response.aread())):
                        yield item
                    return
                decoder = ImageStreamDecoder("the server")
                async for chunk in response.aiter_bytes():
                    for event in decoder.feed(chunk):
                        if isinstance(event, hub.Error):
                            _media.raise_error(event)
                        yield event  # type: ignore[misc]
                    if decoder.finished:
                        return
                for event in decoder.close():
                    if isinstance(event, hub.Error):
                        _media.raise_error(event)
                    yield event  # type: ignore[misc]
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"timed out waiting for the images: {exc}", type="timeout") from exc
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc

    async def embed(self, model: str, input: str | list[str], *, dimensions: int | None = None) -> _media.Embeddings:
        """See :meth:`Client.embed`."""
        url, body, count = _media.embed_request(self.dialect, self.base_url, model, input, dimensions)
        headers = _media.auth_headers(self.dialect, self.api_key, self.headers)
        codec = dialects.get("gemini" if self.dialect == "gemini" else "openai-chat")
        try:
            response = await self._http.post(url, headers=headers, content=json_encode(body))
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"timed out waiting for the embeddings: {exc}", type="timeout") from exc
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc
        if response.status_code >= 400:
            raise upstream_error(codec, response.status_code, response.content)
        return _media.read_embeddings(self.dialect, json_decode(response.content), count)

    async def complete(self, model: str, messages: Any = None, **kwargs: Any) -> Completion:
        """The assembled message of one call (streamed underneath)."""
        async with self.stream(model, messages, **kwargs) as s:
            return await s.until_done()

    def conversation(
        self, model: str, *, system: str | None = None, tools: Any = None, **params: Any
    ) -> AsyncConversation:
        """A stateful chat on this client; see :class:`AsyncConversation`."""
        return AsyncConversation(self, model, system=system, tools=tools, params=params)

    async def run_tools(
        self,
        model: str,
        messages: Any = None,
        *,
        tools: Any = None,
        confirm: Callable[[ToolCall], Any] | None = None,
        max_rounds: int = 8,
        **params: Any,
    ) -> _tools.ToolRun:
        """Call the model, run the tools it asks for, send the results back, until it answers.

        Only tools declared in this request run; a tool with side effects runs only when
        ``confirm(call)`` returns True.  Refusals and exceptions go back to the model as error
        results.  More than ``max_rounds`` model calls raise :class:`ToolLoopError`.  A
        ``tool_choice`` that forces a tool applies to the first call only (then ``"auto"``).
        Tools and ``confirm`` may be plain functions or coroutine functions.
        """
        specs = [_tools.as_tool(t) for t in (tools if tools is not None else self.tools)]
        declared = {t.name: t for t in specs}
        transcript = to_messages(messages)
        completion = None
        choice = params.pop("tool_choice", None)
        for round_ in range(1, max_rounds + 1):
            completion = await self.complete(model, list(transcript), tools=specs, tool_choice=choice, **params)
            choice = _tools.next_choice(choice)
            transcript.append(completion.to_hub_message())
            if not completion.tool_calls:
                return _tools.ToolRun(completion, transcript, round_)
            for call in completion.tool_calls:
                transcript.append((await self._run_one(call, declared, confirm)).message())
        raise ToolLoopError(
            f"the model still asked for tools after {max_rounds} rounds",
            partial=_tools.ToolRun(completion, transcript, max_rounds),
        )

    @staticmethod
    async def _run_one(call: ToolCall, declared: dict[str, _tools.Tool], confirm: Any) -> _tools.Outcome:
        spec, outcome = _tools.check_call(call, declared)
        if outcome is not None:
            return outcome
        assert spec is not None
        try:
            if spec.side_effects:
                ok = await aresolve(confirm(call) if confirm is not None else False)
                if ok is not True:
                    return _tools.refused(call, confirm)
            value = await aresolve(spec(**spec.bind(call.arguments)))
        except Exception as exc:
            return _tools.failed(call, exc)
        return _tools.Outcome(call.tool_call_id, call.name, _tools.result_text(value), False)

    # -- transport

    async def _send(self, request: hub.Request) -> httpx.Response:
        """Send with retries before the first byte: connect failures, 408/429/5xx answers."""
        url, headers, body = prepare(self.codec, request, self.base_url, self.api_key, self.headers)
        attempt = 0
        while True:
            try:
                response = await self._http.send(
                    self._http.build_request("POST", url, headers=headers, content=body), stream=True
                )
            except RETRYABLE as exc:
                if attempt >= self.max_retries:
                    raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc
                await asyncio.sleep(backoff(attempt))
                attempt += 1
                continue
            except httpx.TimeoutException as exc:
                raise UpstreamError(f"timed out waiting for the response: {exc}", type="timeout") from exc
            except httpx.TransportError as exc:
                raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc
            if response.status_code < 400:
                return response
            try:
                data = await response.aread()
            except httpx.HTTPError:
                data = b""
            finally:
                await response.aclose()
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                await asyncio.sleep(backoff(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            raise upstream_error(self.codec, response.status_code, data)


class AsyncConversation:
    """A stateful chat: :meth:`send` streams like :meth:`AsyncClient.stream` and keeps the history.

    The user message and the assistant's reply join :attr:`history` together, before the
    stop event is yielded.  A call that fails or is closed early records nothing, so its user
    message is rolled back too.  One call at a time: a second :meth:`send` while a stream is
    open raises :class:`ConversationBusyError`.
    """

    def __init__(self, client: AsyncClient, model: str, *, system: str | None, tools: Any, params: dict) -> None:
        self.client = client
        self.model = model
        self.system = system
        self.tools = tools
        self.params = params
        self._history: list[hub.Message] = []
        # Held while a call streams.  A lock, not a flag, so the blocking twin is safe when
        # threads race for it; only ever taken without waiting, so it never blocks a loop.
        self._busy = threading.Lock()

    @property
    def history(self) -> list[hub.Message]:
        return list(self._history)

    def clear(self) -> None:
        """Forget the history; not while a call is streaming."""
        if self._busy.locked():
            raise ConversationBusyError("cannot clear while a call is streaming")
        self._history.clear()

    def send(self, message: Any, **params: Any) -> AsyncStream:
        """Stream the reply to ``message``; it and the reply are recorded at the stop event."""
        if not self._busy.acquire(blocking=False):
            raise ConversationBusyError("this conversation already has a call in progress")
        try:
            new = to_messages(message)
            request = build_request(
                self.model, [*self._history, *new], system=self.system, tools=self.tools, **{**self.params, **params}
            )
        except BaseException:
            self._busy.release()
            raise

        def on_stop(completion: Completion) -> None:
            self._history.extend(new)
            self._history.append(completion.to_hub_message())

        return AsyncStream(self.client, request, on_stop, self._busy.release)

    async def complete(self, message: Any, **params: Any) -> Completion:
        """Send ``message`` and wait for the whole reply."""
        async with self.send(message, **params) as s:
            return await s.until_done()


__all__ = ["AsyncClient", "AsyncConversation", "AsyncStream"]
