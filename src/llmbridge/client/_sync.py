"""The blocking client: :class:`Client`, :class:`Stream`, :class:`Conversation`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
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
    Completion,
    StreamCore,
    backoff,
    base_url_for,
    binding_headers,
    media_kind,
    parse_json_body,
    prepare,
    upstream_error,
)
from ._request import build_request, to_messages
from ._websocket import WebSocketTransport

# Failures where the server has not seen the request (or answered nothing): safe to send again.
RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)


class Stream:
    """A streamed call: iterate for :class:`~llmbridge.unievent.UniEvent`, or use ``with``.

    Nothing is sent until the first ``next()`` or ``__enter__``.  :meth:`close` (alias
    :meth:`abort`) closes the HTTP connection at once.  :attr:`completion` is the assembled
    message once the stop event went out; exceptions carry the partial one in ``.partial``.
    """

    def __init__(
        self,
        client: Client,
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
        self._chunks: Iterator[bytes] | Iterator[str] | None = None
        self._started = False
        self._buffer: deque[UniEvent] = deque()
        self._body_done = False
        self.completion: Completion | None = None
        self.closed = False

    # -- the protocol

    def __enter__(self) -> Stream:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> UniEvent:
        try:
            return self._next()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop now: the connection closes (the server sees the client go), nothing more is yielded."""
        if self.closed:
            return
        self.closed = True
        if self._response is not None:
            self._response.close()
        close_turn = getattr(self._chunks, "close", None)
        if close_turn is not None and self._client._ws is not None:
            close_turn()  # a WebSocket turn: sends cancel, reads the turn to its end
        if self._on_end is not None:
            self._on_end()

    abort = close

    def __del__(self) -> None:  # an abandoned stream frees its connection and its conversation
        with contextlib.suppress(Exception):
            self.close()

    @property
    def partial(self) -> Completion:
        """What has been assembled so far (the ``.done`` items)."""
        return self._core.partial

    @property
    def response(self) -> httpx.Response | None:
        return self._response

    def until_done(self) -> Completion:
        """Consume the rest of the stream; the assembled message."""
        for _ in self:
            pass
        if self.completion is None:  # closed early
            raise RuntimeError("the stream was closed before its stop event")
        return self.completion

    # -- internals

    def _start(self) -> None:
        if self._started or self.closed:
            return
        self._started = True
        ws = self._client._ws
        if ws is not None:  # the WebSocket binding: the request envelope as a text message
            self._chunks = ws.turn(json_encode(self._client.codec.encode_request(self.request)).decode())
            return
        try:
            response = self._client._send(self.request)
        except BaseException:
            self.close()
            raise
        self._response = response
        self._core.use_binding(response.headers.get("content-type"))
        kind = media_kind(response.headers.get("content-type"))
        if kind == "json":  # a server that answered whole: same events, same grammar
            body = response.read()
            self._buffer.extend(self._core.whole(parse_json_body(body, self._core)))
            self._body_done = True
        else:
            self._chunks = response.iter_bytes()

    def _next(self) -> UniEvent:
        if self.closed:  # closed or aborted: nothing more, even what was already decoded
            raise StopIteration
        while not self._buffer:
            if not self._started:
                self._start()
                continue
            if self._body_done:
                self._buffer.extend(self._core.close())
                if not self._buffer:
                    self.close()
                    raise StopIteration
                continue
            try:
                chunk = next(self._chunks)  # type: ignore[arg-type]
            except StopIteration:
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
            self.close()  # the turn is complete: release the connection and the conversation
        return event


class Client:
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
        http_client: httpx.Client | None = None,
        binding: str = "sse",
    ) -> None:
        self.codec = dialects.get(dialect)
        self.dialect = dialect
        self.binding = binding
        self.base_url = base_url_for(self.codec, base_url)
        self.api_key = api_key
        self.max_retries = max_retries
        self.headers = {**binding_headers(self.codec, binding), **(headers or {})}
        self._ws = WebSocketTransport(self.base_url, api_key, self.headers, timeout) if binding == "websocket" else None
        self._own_http = http_client is None
        self._http = http_client or httpx.Client(timeout=httpx.Timeout(timeout, connect=connect_timeout))
        self.tools = _tools.ToolRegistry()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._own_http:
            self._http.close()

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
    ) -> Stream:
        """A streamed call; see :class:`Stream`.  ``params``: max_tokens, temperature, stop ..."""
        request = build_request(model, messages, system=system, tools=tools, tool_choice=tool_choice, **params)
        return Stream(self, request)

    def images(self, model: str, prompt: str, *, stream: bool = True, **options: Any) -> Iterator[ImageEvent]:
        """Generate images (OpenAI's Images API, which the gateway serves for every upstream).

        Iterate for :class:`~llmbridge.media.ImageEvent`: streaming, the partial images as they
        form (``type == "image_generation.partial_image"``, up to ``partial_images=N``) and then
        each final one (``"image_generation.completed"``, with ``usage``); not streaming, the
        final images only. ``options`` are the API's fields (``n``, ``size``, ``quality``,
        ``output_format``, ``background``, ``partial_images`` …). Nothing is sent before the
        first ``next()``. Raises :class:`UpstreamError` for an error answer or error event,
        :class:`TransportError` when the server cannot be reached.
        """
        url, body = _media.images_request(self.dialect, self.base_url, model, prompt, stream, options)
        headers = _media.auth_headers(self.dialect, self.api_key, self.headers)
        return self._images(url, headers, body, stream)

    def _images(self, url: str, headers: dict[str, str], body: dict, stream: bool) -> Iterator[ImageEvent]:
        try:
            with self._http.stream("POST", url, headers=headers, content=json_encode(body)) as response:
                if response.status_code >= 400:
                    raise upstream_error(dialects.get("openai-chat"), response.status_code, response.read())
                if not stream:
                    yield from _media.images_from_body(json_decode(response.read()))
                    return
                decoder = ImageStreamDecoder("the server")
                for chunk in response.iter_bytes():
                    for item in decoder.feed(chunk):
                        if isinstance(item, hub.Error):
                            _media.raise_error(item)
                        yield item  # type: ignore[misc]
                    if decoder.finished:
                        return
                for item in decoder.close():
                    if isinstance(item, hub.Error):
                        _media.raise_error(item)
                    yield item  # type: ignore[misc]
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"timed out waiting for the images: {exc}", type="timeout") from exc
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc

    def embed(self, model: str, input: str | list[str], *, dimensions: int | None = None) -> _media.Embeddings:
        """Embedding vectors for ``input`` (one string or a list), in order, with usage.

        Speaks OpenAI's ``/embeddings`` (Gemini's ``:batchEmbedContents`` when this client's
        dialect is ``gemini``). Raises :class:`UpstreamError` for an error answer,
        :class:`~llmbridge.errors.ProtocolError` for a malformed one.
        """
        url, body, count = _media.embed_request(self.dialect, self.base_url, model, input, dimensions)
        headers = _media.auth_headers(self.dialect, self.api_key, self.headers)
        codec = dialects.get("gemini" if self.dialect == "gemini" else "openai-chat")
        try:
            response = self._http.post(url, headers=headers, content=json_encode(body))
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"timed out waiting for the embeddings: {exc}", type="timeout") from exc
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc
        if response.status_code >= 400:
            raise upstream_error(codec, response.status_code, response.content)
        return _media.read_embeddings(self.dialect, json_decode(response.content), count)

    def complete(self, model: str, messages: Any = None, **kwargs: Any) -> Completion:
        """The assembled message of one call (streamed underneath)."""
        with self.stream(model, messages, **kwargs) as s:
            return s.until_done()

    def conversation(self, model: str, *, system: str | None = None, tools: Any = None, **params: Any) -> Conversation:
        return Conversation(self, model, system=system, tools=tools, params=params)

    def run_tools(
        self,
        model: str,
        messages: Any = None,
        *,
        tools: Any = None,
        confirm: Callable[[ToolCall], bool] | None = None,
        max_rounds: int = 8,
        **params: Any,
    ) -> _tools.ToolRun:
        """Call the model, run the tools it asks for, send the results back, until it answers.

        Only tools declared in this request run; a tool with side effects runs only when
        ``confirm(call)`` returns True.  Refusals and exceptions go back to the model as error
        results.  More than ``max_rounds`` model calls raise :class:`ToolLoopError`.  A
        ``tool_choice`` that forces a tool applies to the first call only (then ``"auto"``).
        """
        specs = [_tools.as_tool(t) for t in (tools if tools is not None else self.tools)]
        declared = {t.name: t for t in specs}
        transcript = to_messages(messages)
        completion = None
        choice = params.pop("tool_choice", None)
        for round_ in range(1, max_rounds + 1):
            completion = self.complete(model, list(transcript), tools=specs, tool_choice=choice, **params)
            choice = _tools.next_choice(choice)
            transcript.append(completion.to_hub_message())
            if not completion.tool_calls:
                return _tools.ToolRun(completion, transcript, round_)
            for call in completion.tool_calls:
                transcript.append(self._run_one(call, declared, confirm).message())
        raise ToolLoopError(
            f"the model still asked for tools after {max_rounds} rounds",
            partial=_tools.ToolRun(completion, transcript, max_rounds),
        )

    @staticmethod
    def _run_one(call: ToolCall, declared: dict[str, _tools.Tool], confirm: Any) -> _tools.Outcome:
        spec, outcome = _tools.check_call(call, declared)
        if outcome is not None:
            return outcome
        assert spec is not None
        try:
            if spec.side_effects:
                ok = confirm(call) if confirm is not None else False
                if asyncio.iscoroutine(ok):
                    ok = asyncio.run(ok)
                if ok is not True:
                    return _tools.refused(call, confirm)
            value = spec(**spec.bind(call.arguments))
            if asyncio.iscoroutine(value):
                value = asyncio.run(value)
        except Exception as exc:
            return _tools.failed(call, exc)
        return _tools.Outcome(call.tool_call_id, call.name, _tools.result_text(value), False)

    # -- transport

    def _send(self, request: hub.Request) -> httpx.Response:
        """Send with retries before the first byte: connect failures, 408/429/5xx answers."""
        url, headers, body = prepare(self.codec, request, self.base_url, self.api_key, self.headers)
        attempt = 0
        while True:
            try:
                response = self._http.send(
                    self._http.build_request("POST", url, headers=headers, content=body), stream=True
                )
            except RETRYABLE as exc:
                if attempt >= self.max_retries:
                    raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc
                time.sleep(backoff(attempt))
                attempt += 1
                continue
            except httpx.TimeoutException as exc:
                raise UpstreamError(f"timed out waiting for the response: {exc}", type="timeout") from exc
            except httpx.TransportError as exc:
                raise TransportError(f"{type(exc).__name__}: {exc} ({url})") from exc
            if response.status_code < 400:
                return response
            try:
                data = response.read()
            except httpx.HTTPError:
                data = b""
            finally:
                response.close()
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                time.sleep(backoff(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            raise upstream_error(self.codec, response.status_code, data)


class Conversation:
    """A stateful chat: :meth:`send` streams like :meth:`Client.stream` and keeps the history.

    The user message and the assistant's reply join :attr:`history` together, before the
    stop event is yielded.  A call that fails or is closed early records nothing, so its user
    message is rolled back too.  One call at a time: a second :meth:`send` while a stream is
    open raises :class:`ConversationBusyError`.
    """

    def __init__(self, client: Client, model: str, *, system: str | None, tools: Any, params: dict) -> None:
        self.client = client
        self.model = model
        self.system = system
        self.tools = tools
        self.params = params
        self._history: list[hub.Message] = []
        self._busy = threading.Lock()  # held while a call streams; threads race for it safely

    @property
    def history(self) -> list[hub.Message]:
        return list(self._history)

    def clear(self) -> None:
        if self._busy.locked():
            raise ConversationBusyError("cannot clear while a call is streaming")
        self._history.clear()

    def send(self, message: Any, **params: Any) -> Stream:
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

        return Stream(self.client, request, on_stop, self._busy.release)

    def complete(self, message: Any, **params: Any) -> Completion:
        with self.send(message, **params) as s:
            return s.until_done()


__all__ = ["Client", "Conversation", "Stream"]
