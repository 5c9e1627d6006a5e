"""Our ``"llmbridge"`` extension data in vendor-dialect answers: off unless the client asks.

The codecs are lossless: what a target dialect has no field for (another vendor's signature,
a usage detail, a finish reason without a word) rides under a ``"llmbridge"`` key, which our
decoders read back. Users' tools do not expect it (the ``llm`` CLI prints the usage object it
is in), so the gateway sends it only when the client sends ``x-llmbridge-extensions: 1`` or
the config says ``[gateway] extensions = true``. llm-stream's ``llmbridge:``-prefixed fields
are that standard's own extension rule and always go out.

Without extensions, :class:`PlainEncoder` wraps the dialect's stream encoder: it drops the
hub data that belongs to other dialects before encoding (so the encoder has nothing to
carry in most streams), and strips any ``"llmbridge"`` key still left from the SSE bytes.
:func:`plain_response` and :func:`plain_body` do the same for a non-streaming answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import hub
from ..dialects.base import EXTENSION_KEY, EncoderDispatch, StreamEncoder, json_decode, json_encode

__all__ = [
    "HEADER",
    "AskedMiddleware",
    "PlainEncoder",
    "VENDOR_DIALECTS",
    "ask",
    "asked_done",
    "plain_body",
    "plain_encoder",
    "plain_event",
    "plain_response",
    "strip",
    "strip_sse",
    "wanted",
    "wanted_here",
]

HEADER = "x-llmbridge-extensions"
_HEADER_KEY = HEADER.encode()
# The dialects whose answers go to vendor SDKs and tools; llm-stream's extensions are its own.
VENDOR_DIALECTS = frozenset({"openai-chat", "openai-responses", "anthropic-messages", "gemini", "mmsp"})
_MARK = b'"' + EXTENSION_KEY.encode() + b'"'
# Dialects with no wire form for a data block (inline bytes such as a generated image) in an
# answer: their encoders carry it under our key only (Gemini and MMSP have their own, and
# Responses writes an image as its image_generation_call item).
_NO_DATA_BLOCKS = frozenset({"openai-chat", "anthropic-messages"})
_TRUE = frozenset({"1", "true", "yes", "on"})


def wanted(dialect: str, headers: Mapping[str, str], configured: bool) -> bool:
    """Whether an answer in ``dialect`` carries our extension data: always for non-vendor
    dialects; for vendor dialects when ``configured`` or the request header says so
    (``1``/``true``/``yes``/``on`` turn it on, ``0``/``false``/... off, overriding the config)."""
    if dialect not in VENDOR_DIALECTS:
        return True
    value = headers.get(HEADER)
    if value is None:
        return configured
    return value.strip().lower() in _TRUE


# What the request being served said about extensions (its header, the config), for answers
# built far from the request: error bodies (gateway/_replies.py). Unset (a unit test, a call
# outside a request): no extension data.
_ASKED: ContextVar[tuple[Mapping[str, str], bool] | None] = ContextVar("llmbridge_extensions_asked", default=None)


def wanted_here(dialect: str) -> bool:
    """:func:`wanted` for the request being served (see :class:`AskedMiddleware`)."""
    asked = _ASKED.get()
    if asked is None:
        return dialect not in VENDOR_DIALECTS
    return wanted(dialect, asked[0], asked[1])


def ask(first: Mapping[bytes, bytes], configured: bool) -> Token[tuple[Mapping[str, str], bool] | None]:
    """Record what the request being served says about extensions (``first``: its headers by
    name, as ``hotpath.header_table`` makes them) for :func:`wanted_here`; the token for
    :func:`asked_done` when the request is over."""
    value = first.get(_HEADER_KEY)
    return _ASKED.set(({HEADER: value.decode("latin-1")} if value is not None else {}, configured))


def asked_done(token: Token[tuple[Mapping[str, str], bool] | None]) -> None:
    """The request :func:`ask` recorded is over."""
    _ASKED.reset(token)


class AskedMiddleware:
    """ASGI middleware: records each HTTP request's :data:`HEADER` (and the config's
    ``extensions``) for :func:`wanted_here`. (The chat endpoints' hot path records it itself,
    with :func:`ask`.)"""

    def __init__(self, app: ASGIApp, configured: bool = False) -> None:
        self.app = app
        self.configured = configured

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = next((v for k, v in scope["headers"] if k == _HEADER_KEY), None)  # (the first, as Headers.get)
        token = _ASKED.set(({HEADER: value.decode("latin-1")} if value is not None else {}, self.configured))
        try:
            await self.app(scope, receive, send)
        finally:
            _ASKED.reset(token)


def _own(data: dict[str, Any] | None, dialect: str) -> dict[str, Any] | None:
    """``data`` (keyed by dialect name) with only ``dialect``'s entry."""
    if not data:
        return data
    if data.keys() == {dialect}:
        return data
    return {dialect: data[dialect]} if dialect in data else None


def plain_event(event: hub.Event, dialect: str) -> hub.Event | None:
    """``event`` without the fidelity and extension data of dialects other than ``dialect``;
    ``None`` for an :class:`hub.Extension` of another namespace (nothing to encode)."""
    if isinstance(event, hub.Extension):
        return event if event.namespace == dialect else None
    if isinstance(event, hub.BlockStart | hub.BlockStop):
        fidelity, extensions = _own(event.fidelity, dialect), _own(event.extensions, dialect)
        if fidelity is event.fidelity and extensions is event.extensions:
            return event
        return msgspec.structs.replace(event, fidelity=fidelity, extensions=extensions)
    if isinstance(event, hub.ResponseStart | hub.Usage):
        extensions = _own(event.extensions, dialect)
        if extensions is event.extensions:
            return event
        return msgspec.structs.replace(event, extensions=extensions)
    return event  # Delta, Finish, Error, ResponseEnd: nothing of another dialect's


def strip(obj: Any) -> Any:
    """``obj`` (decoded JSON) without ``"llmbridge"`` keys, error objects included.

    An error object's ``llmbridge`` entry says the hub error type and status (``timeout``,
    ``incomplete_stream``) that the vendor's error shapes have no field for; our client asks
    for extensions (it sends :data:`HEADER`), so it still gets them, and nobody else does.
    """
    if type(obj) is dict:
        return {k: strip(v) for k, v in obj.items() if k != EXTENSION_KEY}
    if type(obj) is list:
        return [strip(v) for v in obj]
    return obj


def strip_sse(data: bytes) -> bytes:
    """SSE bytes with the ``"llmbridge"`` keys removed (:func:`strip`) from the JSON of their
    ``data:`` lines.

    Our encoders write each event's JSON on one ``data:`` line; a line that is not JSON is
    left as it is.
    """
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(b"data:") and _MARK in line:
            try:
                obj = json_decode(line[5:])
            except msgspec.DecodeError:
                continue
            lines[i] = b"data: " + json_encode(strip(obj))
    return b"\n".join(lines)


def _left_out(kind: str, extensions: dict[str, Any] | None, dialect: str) -> bool:
    """Whether a block of ``kind`` has no form in ``dialect`` but our ``"llmbridge"`` one:
    another vendor's native block (its own native blocks carry ``extensions[dialect]``), or
    a data block where the dialect has none."""
    if kind == "native":
        return not isinstance((extensions or {}).get(dialect), dict)
    return kind == "data" and dialect in _NO_DATA_BLOCKS


def plain_response(response: hub.Response, dialect: str) -> hub.Response:
    """An assembled ``response`` as :class:`PlainEncoder` would stream it: other vendors'
    native blocks left out, other dialects' fidelity and extension data dropped. A copy."""
    blocks = []
    for block in response.blocks:
        if _left_out(block.kind, block.extensions, dialect):
            continue
        extensions = _own(block.extensions, dialect)
        annotations = [a for a in block.annotations if a.namespace == dialect]
        fidelity = _own(block.fidelity, dialect)
        blocks.append(dataclasses.replace(block, fidelity=fidelity, extensions=extensions, annotations=annotations))
    usage = response.usage
    if usage is not None and usage.extensions:
        usage = msgspec.structs.replace(usage, extensions=_own(usage.extensions, dialect))
    return dataclasses.replace(
        response,
        blocks=blocks,
        usage=usage,
        extensions=_own(response.extensions, dialect),
        annotations=[a for a in response.annotations if a.namespace == dialect],
    )


def plain_body(body: Any) -> Any:
    """A non-streaming answer body without ``"llmbridge"`` keys."""
    return strip(body)


class PlainEncoder:
    """A vendor dialect's stream encoder that sends no extension data (see the module doc).

    ``encode(event) -> bytes`` as the wrapped encoder's; the common event (a text delta with
    no ``"llmbridge"`` in its bytes) costs one type check and one substring search more.
    """

    __slots__ = ("_dialect", "_dropped", "_encode", "_inner")

    def __init__(self, inner: StreamEncoder, dialect: str) -> None:
        if isinstance(inner, EncoderDispatch):
            inner.extensions = False  # it may leave out what encode() would strip (the same bytes)
        self._inner = inner
        self._encode = inner.encode
        self._dialect = dialect
        self._dropped: set[int] = set()  # blocks left out: another vendor's native blocks

    def encode(self, event: hub.Event) -> bytes:
        # By the event's type, most frequent first: what carries no other dialect's data goes
        # to the encoder as it is, without plain_event's tests and copies.  ``type(x) is``, as
        # EncoderDispatch's chain, not isinstance: hub events are never subclassed, and the
        # isinstance tests of type unions cost ~20 calls a stream.  Finish, ResponseEnd and
        # Error carry nothing of another dialect's; what is not a hub event at all goes to the
        # encoder too, which refuses it.
        kind = type(event)
        plain: hub.Event | None = event
        if kind is hub.Delta:  # deltas carry no fidelity
            if self._dropped and event.index in self._dropped:  # type: ignore[union-attr,operator]  # a Delta
                return b""
        elif kind is hub.BlockStart or kind is hub.BlockStop:
            block: hub.BlockStart | hub.BlockStop = event  # type: ignore[assignment]  # narrowed by kind
            if self._skip(block):
                return b""
            if block.fidelity or block.extensions:
                plain = plain_event(block, self._dialect)
        elif kind is hub.ResponseStart or kind is hub.Usage:
            if event.extensions:  # type: ignore[union-attr]  # a ResponseStart or a Usage
                plain = plain_event(event, self._dialect)
        elif kind is hub.Extension:
            plain = plain_event(event, self._dialect)  # kept only in its own dialect
        if plain is None:
            return b""
        out: bytes = self._encode(plain)
        if _MARK in out:
            return strip_sse(out)
        return out

    def _skip(self, event: hub.BlockStart | hub.BlockStop) -> bool:
        """Whether this block event is of a block left out (:func:`_left_out`): a native
        block of another vendor (a server tool call, a search result) or a data block the
        dialect has no form for would go out as our ``"llmbridge"`` block, which users'
        tools show as an unknown type."""
        if type(event) is hub.BlockStop:
            return bool(self._dropped) and event.index in self._dropped
        kind = event.kind  # type: ignore[union-attr]  # a BlockStart (only a native or a data block may be left out)
        if (kind == "native" or kind == "data") and _left_out(kind, event.extensions, self._dialect):
            self._dropped.add(event.index)
            return True
        return False


def plain_encoder(factory: Callable[[], StreamEncoder], dialect: str) -> PlainEncoder:
    """``factory()`` wrapped in a :class:`PlainEncoder` (for :class:`functools.partial` use)."""
    return PlainEncoder(factory(), dialect)
