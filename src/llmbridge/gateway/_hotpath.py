"""The generation endpoints' ASGI entry: dispatched before Starlette's router and middleware.

A ``POST`` to one of the chat endpoints (``ENDPOINTS`` in ``app.py``) is most of what a
gateway serves, and its fixed cost is what the first token waits for (issue 23). Starlette's
generic stack — the error middleware, the request-id middleware, the exception middleware,
the router's regex match over every route, the endpoint wrapper — cost about a tenth of a
request's CPU and does nothing those requests need: :meth:`.chat.Chat.handle` (the
pipeline) answers every refusal, request error and bug in the client's dialect itself.

:class:`GatewayApp` is the Starlette app, with one test in front: those requests go straight
to :meth:`Chat.handle` (:meth:`GatewayApp.serve_hot`), with what the middleware did for them
done there from one table of the request's headers (the ``x-request-id`` header, the request
id in ``scope["state"]``, what ``extensions.AskedMiddleware`` records); everything else
(Gemini's paths, models, admin, console, WebSocket, a wrong method) takes Starlette's path as
before. Every request
also gets ``scope["llmbridge.started"]``, the moment it reached the app, which the
``Server-Timing`` header counts from.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request, empty_send
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from . import _extensions as extensions
from ._pipeline import REQUEST_ID
from ._response import STARTED, StreamResponse

__all__ = [
    "GatewayApp",
    "HotRequest",
    "LookupHeaders",
    "header_table",
    "new_request_id",
    "request_id_header",
]

log = logging.getLogger("llmbridge.gateway")

_bits = random.getrandbits  # (the random module's shared instance)


def new_request_id() -> str:
    """A fresh request id: ``req_`` and 32 hex digits (as ``uuid4().hex``, without the UUID object).

    From the process's PRNG, not ``os.urandom``: an id names a request in logs, the ledger and
    a response header, and is no secret, so a system call per request (on the way to the
    upstream request, issue 23) buys nothing. ``random``'s own instance is reseeded in a
    forked child (``os.register_at_fork``), so worker processes do not repeat each other's."""
    return f"req_{_bits(128):032x}"


def request_id_header(scope: Scope, first: Mapping[bytes, bytes] | None = None) -> bytes:
    """The request's id (the client's ``x-request-id`` if sane, else a fresh one), stored in
    ``scope["state"]["request_id"]``; returned encoded for the response header. ``first``:
    the request's header table (:func:`header_table`), when the caller has one."""
    if first is not None:
        raw = first.get(b"x-request-id")
    else:
        raw = next((v for k, v in scope["headers"] if k == b"x-request-id"), None)
    rid = None if raw is None else raw.decode("latin-1")
    if rid is None or not REQUEST_ID.fullmatch(rid):
        rid = new_request_id()
    scope.setdefault("state", {})["request_id"] = rid
    return rid.encode()


def header_table(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by name, the first value of a repeated name (as ``Headers.get``
    reads them): made once per chat request, read for the request id, the extensions header
    and every header lookup of the pipeline (:class:`LookupHeaders`)."""
    first: dict[bytes, bytes] = {}
    setdefault = first.setdefault
    for name, value in scope["headers"]:
        setdefault(name, value)  # (ASGI header names are lower-case)
    return first


class LookupHeaders(Headers):
    """Starlette's ``Headers``, its lookups by a dict made once per request.

    ``Headers.get`` scans the header list for each name and raises (and catches) a
    ``KeyError`` for an absent one; a chat request asks for about eight names, most of them
    absent (``x-api-key``, the extensions header, vendor beta headers), which cost about
    7 µs a request. The first value of a repeated name wins, as in ``Headers``; iteration,
    ``getlist`` and the raw list are ``Headers``' own."""

    def __init__(self, scope: Scope, first: dict[bytes, bytes] | None = None) -> None:
        # What ``Headers(scope=scope)`` does, without its keyword and its tests of the other
        # two ways to make one (tests/test_gateway_presend_cost.py holds the two alike)
        self._list = scope["headers"] = list(scope["headers"])
        self._first = header_table(scope) if first is None else first

    def get(self, key: str, default: Any = None) -> Any:
        value = self._first.get(_KEYS.get(key) or _key(key))
        return default if value is None else value.decode("latin-1")

    def __getitem__(self, key: str) -> str:
        value = self._first.get(_KEYS.get(key) or _key(key))
        if value is None:
            raise KeyError(key)
        return value.decode("latin-1")

    def __contains__(self, key: Any) -> bool:
        return isinstance(key, str) and (_KEYS.get(key) or _key(key)) in self._first


# Header names as asked (str) -> as ASGI has them (lower-case bytes): the pipeline asks for the
# same dozen names on every request. Bounded, since a name can come from elsewhere.
_KEYS: dict[str, bytes] = {}


def _key(name: str) -> bytes:
    key = name.lower().encode("latin-1")
    if len(_KEYS) < 256:
        _KEYS[name] = key
    return key


class HotRequest(Request):
    """A chat endpoint's request: Starlette's, with :class:`LookupHeaders` over ``first``."""

    def __init__(self, scope: Scope, receive: Receive, first: dict[bytes, bytes] | None = None) -> None:
        # What ``Request(scope, receive)`` sets, set here: not through its ``super()`` chain and
        # its asserts (a chat request's scope is HTTP's), per request; tests/test_gateway_presend_cost.py
        # holds the attributes to Starlette's own.
        self.scope = scope
        self._receive = receive
        self._send = empty_send
        self._stream_consumed = False
        self._is_disconnected = False
        self._form = None
        self._lookup = LookupHeaders(scope, first)

    @property
    def headers(self) -> Headers:
        return self._lookup


Handler = Callable[[Request, str], Awaitable[Response | StreamResponse]]  # Chat.handle(request, endpoint)


class GatewayApp(Starlette):
    """Starlette, with the chat endpoints' ``POST`` requests served before its middleware
    stack (:meth:`serve_hot`)."""

    hot: Mapping[str, str] = {}  # path -> the endpoint's dialect
    hot_handler: Handler | None = None
    hot_extensions = False  # the config's ``extensions`` (extensions.ask)

    def serve_hot(self, endpoints: Mapping[str, str], handler: Handler, configured: bool = False) -> None:
        """``POST`` requests to the paths of ``endpoints`` go to ``handler`` (:meth:`Chat.handle`,
        with the path's dialect) directly, with what the middleware does for other paths done
        here from one header table: the ``x-request-id`` header (``RequestIdMiddleware``) and
        the extensions header recorded for answers built far from the request
        (``extensions.AskedMiddleware``, with ``configured``: the config's ``extensions``)."""
        self.hot = dict(endpoints)
        self.hot_handler = handler
        self.hot_extensions = configured

    def add_middleware(self, *args: Any, **kwargs: Any) -> None:
        """A middleware added by a program embedding the app sees every request: no hot path then."""
        self.hot_handler = None
        super().add_middleware(*args, **kwargs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[STARTED] = time.perf_counter()
            handler = self.hot_handler
            if scope["method"] == "POST" and handler is not None and (endpoint := self.hot.get(scope["path"])):
                # (written out here, not in a coroutine of its own: each coroutine a request
                # passes through costs it more than the few lines it holds)
                scope["app"] = self
                first = header_table(scope)
                header = (b"x-request-id", request_id_header(scope, first))
                token = extensions.ask(first, self.hot_extensions)
                try:
                    response = await handler(HotRequest(scope, receive, first), endpoint)
                    if isinstance(response, StreamResponse):
                        response.headers.append(header)
                    else:
                        response.raw_headers.append(header)
                    await response(scope, receive, send)
                finally:
                    extensions.asked_done(token)
                return
        await super().__call__(scope, receive, send)
