"""The sans-I/O part of the client: bytes in, UniEvents out; request preparation; retry policy.

The sync and async shells (``_sync``, ``_async``) only move bytes; everything they share
lives here so both behave the same.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any
from urllib.parse import urlsplit

import httpx

from .. import hub
from ..bindings import BINARY_MEDIA_TYPE, BinaryStreamDecoder, MessageStreamDecoder
from ..dialects.base import DialectModule, json_decode, json_encode
from ..errors import LLMBridgeError, ProtocolError, UpstreamError
from ..unievent import FINISH_FROM_MMSP, UniEvent, UniEventView
from ..unievent import Message as UniMessage

# Answers worth another try, before the first byte of a stream only (the request did not run,
# or the server says try later).
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 529})
MAX_BACKOFF = 4.0  # seconds; a longer Retry-After is not waited for


class Completion(UniMessage):
    """The assembled assistant message: ``.done`` items, usage and finish reason (MMSP's stream grammar).

    ``text``, ``thinking`` and ``tool_calls`` (``ToolCall`` items whose ``arguments`` are the
    parsed object) come from :class:`~llmbridge.unievent.Message`; :attr:`usage` and
    :attr:`finish` give the hub's richer view.
    """

    __slots__ = ()

    @classmethod
    def of(cls, m: UniMessage) -> Completion:
        return cls(list(m.content_items), m.usage_metadata, m.finish_reason, m.created_at, m.llmbridge)

    @property
    def usage(self) -> hub.Usage:
        """Token counts in the hub's terms (input includes cached, output includes reasoning)."""
        u = self.usage_metadata.to_hub() if self.usage_metadata is not None else hub.Usage()
        extra = (self.llmbridge or {}).get("usage") or {}
        u.cache_write_tokens = extra.get("cache_write_tokens")
        u.total_tokens = extra.get("total_tokens")
        return u

    @property
    def finish(self) -> str | None:
        """The hub finish reason (``end_turn``, ``tool_use``, ``max_tokens``, ``content_filter`` ...)."""
        extra = self.llmbridge or {}
        if "finish" in extra:
            return extra["finish"]["reason"] if isinstance(extra["finish"], dict) else None
        if self.finish_reason is None:
            return None
        return FINISH_FROM_MMSP.get(self.finish_reason, "other")

    @property
    def response_id(self) -> str | None:
        return ((self.llmbridge or {}).get("response") or {}).get("id")

    def to_hub_message(self) -> hub.Message:
        """This turn as a hub assistant message, fidelity (thinking signatures) included."""
        from ._request import to_messages

        messages = to_messages([self.to_dict()])
        return messages[0] if messages else hub.Message("assistant")


class StreamCore:
    """One response body through ``dialect.StreamDecoder`` and :class:`UniEventView`.

    Exceptions keep stream order: UniEvents produced before an error are returned first
    and the error is raised by the next call.  ``partial`` on every exception is the
    :class:`Completion` assembled so far.
    """

    def __init__(self, codec: DialectModule) -> None:
        self.codec = codec
        self.decoder = codec.StreamDecoder()
        self.view = UniEventView()
        self._pending: LLMBridgeError | None = None
        self._closed = False

    @property
    def partial(self) -> Completion:
        """The ``.done`` items so far, plus the text of blocks still open (cut short by an error)."""
        return Completion.of(self.view.partial())

    def feed(self, data: bytes) -> list[UniEvent]:
        self._raise_pending()
        return self._run(self.decoder.feed(data))

    def use_binding(self, content_type: str | None) -> None:
        """Switch to the binary frame decoder when the answer is ``application/llm-stream+binary``
        (before the first :meth:`feed`)."""
        if (content_type or "").split(";", 1)[0].strip().lower() == BINARY_MEDIA_TYPE:
            self.decoder = BinaryStreamDecoder()

    def feed_message(self, text: str) -> list[UniEvent]:
        """One WebSocket message (one event envelope) of a turn."""
        self._raise_pending()
        if not isinstance(self.decoder, MessageStreamDecoder):
            self.decoder = MessageStreamDecoder()
        return self._run(self.decoder.feed_message(text))

    def close(self) -> list[UniEvent]:
        """End of body; call again until it returns ``[]`` (it raises a deferred error)."""
        self._raise_pending()
        if self._closed:
            return []
        self._closed = True
        out = self._run(self.decoder.close())
        if self._pending is None:
            try:
                out.extend(self.view.close())
            except LLMBridgeError as exc:
                self._defer(exc, out)
        return out

    def whole(self, body: Any) -> list[UniEvent]:
        """A non-streamed JSON answer (a server that ignored ``stream``) as the same events."""
        self._closed = True
        out = self._run(self.codec.decode_response(body))
        if self._pending is None:
            try:
                out.extend(self.view.close())
            except LLMBridgeError as exc:
                self._defer(exc, out)
        return out

    def _run(self, events: list[hub.Event]) -> list[UniEvent]:
        out: list[UniEvent] = []
        view = self.view
        try:
            for e in events:
                if type(e) is hub.Error and e.type == "protocol_error":
                    raise ProtocolError(e.message, rule=e.code)
                out.extend(view.feed(e))
        except LLMBridgeError as exc:
            self._defer(exc, out)
        return out

    def _defer(self, exc: LLMBridgeError, out: list[UniEvent]) -> None:
        exc.partial = self.partial  # type: ignore[attr-defined]
        self.view.ended = True
        if not out:
            raise exc
        self._pending = exc

    def _raise_pending(self) -> None:
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc


# --------------------------------------------------------------------------- HTTP


def base_url_for(codec: DialectModule, base_url: str) -> str:
    """OpenAI dialects take an API root ending in ``/v1``; a bare host gets it added."""
    base = base_url.rstrip("/")
    if codec.NAME in ("openai-chat", "openai-responses") and urlsplit(base).path in ("", "/"):
        base += "/v1"
    return base


def prepare(
    codec: DialectModule, request: hub.Request, base_url: str, api_key: str | None, headers: dict[str, str] | None
) -> tuple[str, dict[str, str], bytes]:
    """URL, headers and body bytes of ``request`` in ``codec``'s dialect."""
    url, wire_headers = codec.endpoint(request, base_url=base_url, api_key=api_key)
    # An llmbridge gateway leaves its lossless extension data out of vendor dialects unless
    # asked; this client reads it back (signatures, error types). Vendor APIs ignore the header.
    wire_headers["x-llmbridge-extensions"] = "1"
    if headers:
        wire_headers = {**wire_headers, **headers}
    return url, wire_headers, json_encode(codec.encode_request(request))


def upstream_error(codec: DialectModule, status: int, body: bytes) -> UpstreamError:
    """An HTTP error answer as :class:`UpstreamError`, its body parsed in the dialect's error shape."""
    error = codec.decode_error(status, body)
    try:
        raw = json_decode(body) if body else None
    except Exception:
        raw = body.decode("utf-8", "replace")
    return UpstreamError(f"HTTP {status}: {error.message}", status=status, body=raw, type=error.type)


def backoff(attempt: int, retry_after: str | None = None) -> float:
    """Seconds before retry number ``attempt`` (0-based): 0.1, 0.2, 0.4 ... or the server's Retry-After."""
    if retry_after:
        try:
            return min(max(float(retry_after), 0.0), MAX_BACKOFF)
        except ValueError:
            pass
    return min(0.1 * 2**attempt, MAX_BACKOFF)


BINDINGS = ("sse", "binary", "websocket")


def binding_headers(codec: DialectModule, binding: str) -> dict[str, str]:
    """Extra request headers of an HTTP ``binding``; raises ``ValueError`` for a binding the dialect lacks."""
    if binding not in BINDINGS:
        raise ValueError(f"unknown binding {binding!r} (known: {', '.join(BINDINGS)})")
    if binding != "sse" and codec.NAME != "llm-stream":
        raise ValueError(f"the {binding} binding is LLM-Stream's; dialect {codec.NAME!r} has SSE only")
    if binding == "binary":
        return {"accept": f"{BINARY_MEDIA_TYPE}, text/event-stream;q=0.5"}
    return {}


def media_kind(content_type: str | None) -> str:
    """``"sse"``, ``"json"`` or ``"other"`` for a response's content type."""
    ct = (content_type or "").split(";", 1)[0].strip().lower()
    if ct == "text/event-stream":
        return "sse"
    if ct == "application/json" or ct.endswith("+json"):
        return "json"
    return "other"


def parse_json_body(body: bytes, core: StreamCore) -> Any:
    try:
        return json_decode(body)
    except Exception as exc:
        raise ProtocolError(f"response body is not JSON: {exc}", partial=core.partial) from None


# Failures where the server has not seen the request (or answered nothing): safe to send again.
RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)


async def aresolve(value: Any) -> Any:
    """``value``, awaited first when it is awaitable (a tool or ``confirm`` may be async)."""
    return await value if inspect.isawaitable(value) else value


def resolve(value: Any) -> Any:
    """The blocking twin of :func:`aresolve`: a coroutine is run to its result on a new loop."""
    return asyncio.run(value) if asyncio.iscoroutine(value) else value
