"""The gateway's ASGI app: every dialect's endpoints, routed by model name to upstreams."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import dialects, errors, hub
from ..dialects.base import DialectModule, StreamEncoder, json_decode
from . import binding, extensions, limits, metering, negotiation, replies, teams
from . import turns as _turns
from .config import Config, default_config
from .config import Route as ModelRoute
from .embeddings import GEMINI_ACTIONS as GEMINI_EMBED_ACTIONS
from .embeddings import EmbeddingsService
from .images import ImagesService
from .jsonbody import read_object
from .media import check_images
from .record import Recorder
from .relay import relay_filter
from .responses_store import routes as responses_routes
from .streaming import EventSource, Exchange, HTTPSource, JSONArrayFraming, StreamResponse
from .teams.admin import routes as admin_routes
from .ui import Console, TrafficLog
from .upstream import HTTPUpstream, Upstream, UpstreamFailed, build, retryable, timeouts_of
from .websocket import WebSocketEndpoint

__all__ = [
    "ENDPOINTS",
    "GEMINI",
    "GEMINI_VERSIONS",
    "Gateway",
    "RequestIdMiddleware",
    "create_app",
    "dialect_of_path",
]

log = logging.getLogger("llmbridge.gateway")

# endpoint path -> the dialect it speaks
ENDPOINTS = {
    "/v1/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/v1/messages": "anthropic-messages",
    "/v1/stream": "llm-stream",
    "/mmsp/v1/stream": "mmsp",
}
GEMINI = "gemini"
GEMINI_VERSIONS = ("v1beta", "v1", "v1alpha")  # google-genai uses v1 or v1beta, per version and option
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")


class _BodyTooLarge(Exception):
    pass


class Gateway:
    """Config + upstream objects + the request handlers."""

    def __init__(self, config: Config, upstreams: dict[str, Upstream] | None = None):
        self.config = config
        self.upstreams: dict[str, Upstream] = (
            upstreams if upstreams is not None else {name: build(cfg) for name, cfg in config.upstreams.items()}
        )
        self.api_keys = [k.encode() for k in config.gateway.api_keys]
        self.record_dir = Path(config.gateway.record_dir) if config.gateway.record_dir else None
        self._recorded = 0
        # Recent exchanges for the console's Traffic page; prompt text only when recording anyway.
        self.traffic = TrafficLog(config.gateway.ui_traffic, keep_prompts=self.record_dir is not None)
        self.teams = teams.create(config, self.api_keys)  # virtual keys, limits, ledger, metrics; None: all off
        self.embeddings = EmbeddingsService(self)  # /v1/embeddings, :embedContent, MMSP vectors
        self.images = ImagesService(self)  # /v1/images
        self.turns = _turns.Turns(self)  # stored responses and response caches (issue 25)

    # -- plumbing

    async def principal(self, request: HTTPConnection) -> teams.Principal | teams.Refusal:
        """Who is calling (virtual keys too, when team features are on), or why not."""
        if self.teams is None or not self.teams.accounts:
            if self.authorized(request):
                return teams.Principal(teams.STATIC if self.api_keys else teams.OPEN)
            return teams.Refusal(hub.Error("invalid or missing API key", "authentication", status=401))
        return await self.teams.authenticate(teams.presented_key(request.headers, request.query_params))

    async def accepted_object(self, request: Request, dialect: str) -> dict[str, Any] | Response:
        """The JSON-object body of a request outside ``handle`` (images, embeddings) once its key
        is accepted; otherwise the error response to send, in ``dialect``'s shape. The caller
        is kept in the request's scope for the team features (``metering.admit``)."""
        who = await self.principal(request)
        if isinstance(who, teams.Refusal):
            return replies.error_response(dialect, who.error)
        metering.remember_principal(request, who)
        return await read_object(request, self.config.gateway.max_body_bytes, dialect)

    def authorized(self, request: HTTPConnection) -> bool:
        if not self.api_keys:
            return True
        h = request.headers
        auth = h.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        key = key or h.get("x-api-key") or h.get("x-goog-api-key") or request.query_params.get("key")
        if not key:
            return False
        presented = key.encode()
        return any(hmac.compare_digest(presented, k) for k in self.api_keys)

    async def read_body(self, request: Request) -> bytes:
        limit = self.config.gateway.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise _BodyTooLarge
        parts: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _BodyTooLarge
            parts.append(chunk)
        return b"".join(parts)

    # -- endpoints

    async def models(self, request: Request) -> Response:
        path = request.url.path
        if path.startswith(("/v1beta", "/v1alpha")) or "x-goog-api-key" in request.headers:
            dialect, shape = GEMINI, replies.gemini_models
        elif path.startswith("/mmsp"):
            dialect, shape = "mmsp", replies.mmsp_models
        elif "anthropic-version" in request.headers:
            dialect, shape = "anthropic-messages", replies.anthropic_models
        else:
            dialect, shape = "openai-chat", replies.openai_models
        if isinstance(who := await self.principal(request), teams.Refusal):
            return replies.error_response(dialect, who.error)
        return replies.json_response(shape(who.visible(list(self.config.models))))

    async def model(self, request: Request) -> Response:
        """``GET /v1/models/{id}`` (OpenAI, Anthropic) and ``GET /v1beta/models/{name}`` (Gemini)."""
        name = request.path_params["target"].removeprefix("models/")
        path = request.url.path
        shape: Callable[[str], dict[str, Any]]
        if path.startswith(("/v1beta", "/v1alpha")) or "x-goog-api-key" in request.headers:
            dialect, shape = GEMINI, replies.gemini_model
        elif "anthropic-version" in request.headers:
            dialect, shape = "anthropic-messages", lambda n: replies.anthropic_models([n])["data"][0]
        else:
            dialect, shape = "openai-chat", lambda n: replies.openai_models([n])["data"][0]
        if isinstance(who := await self.principal(request), teams.Refusal):
            return replies.error_response(dialect, who.error)
        if name not in self.config.models or not who.visible([name]):
            return replies.error(dialect, f"model {name!r} not found", "not_found")
        return replies.json_response(shape(name))

    async def healthz(self, request: Request) -> Response:
        # "worker": the serving process, so an operator can see each of `serve --workers N` answer
        return replies.json_response({"status": "ok", "models": len(self.config.models), "worker": os.getpid()})

    async def generate(self, request: Request) -> Response | StreamResponse:
        return await self.handle(request, ENDPOINTS[request.url.path])

    async def gemini(self, request: Request) -> Response | StreamResponse:
        target = request.path_params["target"]
        model, _, action = target.rpartition(":")
        if action in GEMINI_EMBED_ACTIONS and model:
            return await self.embeddings.gemini(request, model, action)
        if action not in ("generateContent", "streamGenerateContent") or not model:
            return replies.error(GEMINI, f"unknown method {target!r}", "not_found")
        stream = action == "streamGenerateContent"
        json_array = stream and request.query_params.get("alt") != "sse"
        return await self.handle(
            request, GEMINI, url_model=model.removeprefix("models/"), stream=stream, json_array=json_array
        )

    async def handle(
        self,
        request: Request,
        endpoint: str,
        *,
        url_model: str | None = None,
        stream: bool | None = None,
        json_array: bool = False,
    ) -> Response | StreamResponse:
        content_type = request.headers.get("content-type")
        accept = request.headers.get("accept")
        dialect = negotiation.error_dialect(endpoint, content_type, accept)
        try:
            return await self._handle(request, endpoint, dialect, url_model, stream, json_array)
        except Exception:  # a bug must still answer in the client's dialect, without a traceback
            log.exception("internal error on %s", request.url.path)
            return replies.error(dialect, "internal gateway error", "api_error", 500)

    async def _handle(
        self,
        request: Request,
        endpoint: str,
        dialect: str,
        url_model: str | None,
        stream: bool | None,
        json_array: bool,
    ) -> Response | StreamResponse:
        if isinstance(who := await self.principal(request), teams.Refusal):
            return replies.error_response(dialect, who.error)
        content_type = request.headers.get("content-type")
        try:
            request_dialect = negotiation.request_dialect(content_type, endpoint)
        except negotiation.UnsupportedMediaType as exc:
            return replies.error(dialect, str(exc), "unsupported_media_type")
        out_dialect = negotiation.response_dialect(endpoint, request_dialect, request.headers.get("accept"))
        if out_dialect != endpoint:
            json_array = False  # the standard stream is SSE
        accept = request.headers.get("accept")
        if endpoint == negotiation.STANDARD and not binding.acceptable(accept):  # llm-stream-bindings §2.1
            message = f"cannot answer with any of {accept!r}"
            return replies.error(out_dialect, message, "invalid_request", 406, "not_acceptable")
        binary = out_dialect == negotiation.STANDARD and binding.wants_binary(accept)
        try:
            raw = await self.read_body(request)
        except ClientDisconnect:  # gone (or cut off by the server's body timeout) mid-body
            return Response(status_code=499)
        except _BodyTooLarge:
            limit = self.config.gateway.max_body_bytes
            return replies.error(out_dialect, f"request body exceeds {limit} bytes", "request_too_large")
        try:
            body = json_decode(raw)
            limits.check_nesting(body, self.config.gateway.max_json_depth)
        except errors.RequestError as exc:
            return replies.error(out_dialect, str(exc), exc.type, exc.status)
        except RecursionError:  # msgspec's own guard, near 1,000 levels
            limit = self.config.gateway.max_json_depth
            return replies.error(
                out_dialect, f"request body nests arrays and objects more than {limit} levels deep", "invalid_request"
            )
        except msgspec.DecodeError as exc:
            return replies.error(out_dialect, f"request body is not valid JSON: {exc}", "invalid_request")
        if not isinstance(body, dict):
            return replies.error(out_dialect, "request body must be a JSON object", "invalid_request")
        try:
            hreq = dialects.get(request_dialect).decode_request(body, model=url_model)
            limits.validate_request(hreq, request_dialect)
        except errors.RequestError as exc:
            return replies.error(out_dialect, str(exc), exc.type, exc.status)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            return replies.error(out_dialect, f"malformed request: {type(exc).__name__}: {exc}", "invalid_request")
        if url_model and not hreq.model:
            hreq.model = url_model
        bad_image = check_images(hreq, self.config.gateway.max_image_bytes)
        if bad_image is not None:
            return replies.error(out_dialect, bad_image, "invalid_request")
        if stream is not None:
            hreq.stream = stream
        if out_dialect == negotiation.STANDARD and negotiation.wants_standard_stream(request.headers.get("accept")):
            hreq.stream = True
        model = self.config.models.get(hreq.model or "")
        if model is None:
            return replies.error(out_dialect, f"model {hreq.model!r} not found", "not_found")
        # Only a request id the client put in its request is echoed in the body (llm-stream's
        # stream.start/stream.end); the x-request-id header carries ours either way.
        request_id = (hreq.metadata or {}).get("request_id")
        rid = str(request_id) if request_id else None
        ours = extensions.wanted(out_dialect, request.headers, self.config.gateway.extensions)
        ticket: teams.Ticket | None = None
        if self.teams is not None:  # limits before anything goes upstream; settled when the answer ends
            rid_header = request.scope.get("state", {}).get("request_id", "")
            admitted = await self.teams.admit(who, hreq, len(raw), request_dialect, out_dialect, rid or rid_header)
            if isinstance(admitted, teams.Refusal):
                return replies.error_response(out_dialect, admitted.error, admitted.headers)
            ticket = admitted
        if model.kind == "embedding":  # vectors over MMSP's stream, metered like chat
            meter = metering.Meter(self.teams, ticket)
            embedded = await self.embeddings.stream_endpoint(hreq, model, out_dialect, rid, meter)
            meter.responded(embedded)
            return embedded
        # -- issue 25 (gateway/turns.py): previous_response_id rebuilt, the response cache asked
        turn = await self.turns.begin(request, who, body, hreq, model, request_dialect, ticket)
        if turn is not None and not isinstance(turn, _turns.Turn):  # refused (an unknown previous_response_id)
            if ticket is not None and self.teams is not None:
                self.teams.responded(ticket, turn)
            return turn
        # -- end issue 25
        work = self.route(hreq, model.routes, out_dialect, rid, json_array, ticket, with_extensions=ours, turn=turn)
        response = await _unless_disconnected(request, work)
        self.turns.mark(turn, response)  # x-llmbridge-cache: hit | miss (issue 25)
        if ticket is not None and self.teams is not None:  # (a ticket implies teams)
            self.teams.responded(ticket, response)
        return binding.as_binary(response) if binary else response

    async def route(
        self,
        hreq: hub.Request,
        routes: Sequence[ModelRoute],
        out_dialect: str,
        request_id: str | None,
        json_array: bool,
        ticket: teams.Ticket | None = None,
        *,
        with_extensions: bool = True,
        turn: _turns.Turn | None = None,
    ) -> Response | StreamResponse:
        """Try the model's upstreams in order; fall back only while the client has seen nothing.
        ``with_extensions``: whether the answer may carry our ``"llmbridge"`` data (gateway/extensions.py).
        ``turn``: the request's stored-response and cache business (a cache hit answers instead of the upstream)."""
        codec = dialects.get(out_dialect)
        last: hub.Error | None = None
        headers: dict[str, str] = {}
        hit = turn.hit if turn is not None else None  # issue 25: the cache's stored events, replayed
        for n, route in enumerate(routes[:1] if hit is not None else routes):
            upstream: Upstream = hit if hit is not None else self.upstreams[route.upstream]
            upstream_request = dataclasses.replace(hreq, model=route.upstream_model, stream=True)
            try:
                exchange = await self.open(
                    upstream, upstream_request, codec, out_dialect, request_id, hreq.stream, json_array, ticket,
                    with_extensions, turn,
                )
            except UpstreamFailed as exc:
                last, headers = exc.error, exc.headers
            else:
                headers = {}
                try:
                    last = await exchange.prime()
                    if last is None:
                        return await self.answer(
                            exchange, codec, out_dialect, hreq.stream, json_array, request_id, with_extensions
                        )
                except BaseException:  # cancelled or broken: never leave the upstream request open
                    await exchange.aclose()
                    raise
                await exchange.aclose()
            if not retryable(last) or n == len(routes) - 1:
                break
            log.info("upstream %s failed (%s), trying %s", route.upstream, last.message, routes[n + 1].upstream)
        assert last is not None
        if last.status is None:
            last.status = hub.ERROR_STATUS.get(last.type, 502)
        return replies.error_response(out_dialect, last, headers)

    async def open(
        self,
        upstream: Upstream,
        hreq: hub.Request,
        codec: DialectModule,
        out_dialect: str,
        request_id: str | None,
        stream: bool,
        json_array: bool,
        ticket: teams.Ticket | None = None,
        with_extensions: bool = True,
        turn: _turns.Turn | None = None,
    ) -> Exchange:
        """Send ``hreq`` to ``upstream``; the exchange that will carry its answer to the client."""
        started = asyncio.get_running_loop().time()
        tap = turn.tap(upstream) if turn is not None else None  # issue 25: sees the hub events, files the answer
        timeouts = timeouts_of(upstream)
        recorder = None
        relay = False
        entry = self.traffic.begin(
            upstream.name, hreq, out_dialect, upstream_format=getattr(upstream, "format", "local"), stream=stream
        )
        source: HTTPSource | EventSource
        if isinstance(upstream, HTTPUpstream):
            try:
                response = await upstream.open(hreq)
            except BaseException as exc:  # refused (or cancelled) before any answer: still a Traffic row
                entry.fail(exc)
                raise
            if self.record_dir is not None:
                self._recorded += 1
                recorder = Recorder.start(self.record_dir, self._recorded, upstream.config, hreq)
            record = recorder.write if recorder else None
            decoder = upstream.dialect.StreamDecoder()
            if tap is not None:
                decoder = tap.decoder(decoder)
            source = HTTPSource(response, decoder, upstream.name, timeouts, started, record)
            # Same dialect, same framing, and no request id to stamp in: relay the bytes untouched.
            relay = stream and not json_array and upstream.format == out_dialect and "request_id" not in hreq.metadata
            relay = relay and (tap is None or not tap.needs_events)  # keeping the answer needs every event
        else:
            events = upstream.stream(hreq)
            source = EventSource(tap.stream(events) if tap is not None else events, upstream.name, timeouts, started)
        keepalive = self.config.gateway.keepalive_seconds if stream else None
        # (dialects.stream_encoder takes the plain module: the optional stream_encoder(request))
        encoder: Callable[[], StreamEncoder] = partial(dialects.stream_encoder, dialects.get(out_dialect), hreq)
        if not with_extensions:  # no "llmbridge" data for vendor SDKs and tools unless asked
            encoder = partial(extensions.plain_encoder, encoder, out_dialect)
        return Exchange(
            source,
            encoder,
            dialect=out_dialect,
            relay=relay,
            relay_filter=relay_filter(out_dialect, hreq) if relay else None,
            keepalive=keepalive,
            framing=JSONArrayFraming() if json_array else None,
            request_id=request_id,
            max_event_bytes=self.config.gateway.max_event_bytes,
            observer=entry.hook,
            on_end=entry.then(
                partial(_finished, upstream.name, hreq.model, out_dialect, recorder, (self.teams, ticket))
            ),
        )

    async def answer(
        self,
        exchange: Exchange,
        codec: DialectModule,
        out_dialect: str,
        stream: bool,
        json_array: bool,
        request_id: str | None,
        with_extensions: bool = True,
    ) -> Response | StreamResponse:
        if stream:
            media = "application/json" if json_array else getattr(codec, "STREAM_CONTENT_TYPE", "text/event-stream")
            return StreamResponse(exchange.body(), media_type=media, on_close=exchange.aclose)
        response = await exchange.collect()
        if response.error is not None:
            error = response.error
            if error.status is None:
                error.status = hub.ERROR_STATUS.get(error.type, 502)
            return replies.error_response(out_dialect, error)
        response.request_id = request_id or response.request_id
        if with_extensions:
            return replies.json_response(codec.encode_response(response))
        plain = extensions.plain_response(response, out_dialect)
        return replies.json_response(extensions.plain_body(codec.encode_response(plain)))

    async def aclose(self) -> None:
        await self.turns.stop()  # (before teams: it may share the ledger's database)
        if self.teams is not None:
            await self.teams.stop()
        for service in (self.embeddings, self.images):
            with contextlib.suppress(Exception):
                await service.aclose()
        for upstream in self.upstreams.values():
            aclose = getattr(upstream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


async def _unless_disconnected(
    request: Request, work: Coroutine[Any, Any, Response | StreamResponse]
) -> Response | StreamResponse:
    """Run ``work`` (until a response is ready) but drop it, and so the upstream request, as
    soon as the client disconnects. (Once streaming, :class:`StreamResponse` watches.)"""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watch):
            if not t.done():
                t.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)
    if task.cancelled():
        return Response(status_code=499)  # nobody is listening any more
    return task.result()


def _finished(
    upstream: str,
    model: str | None,
    dialect: str,
    recorder: Recorder | None,
    account: tuple[teams.Teams | None, teams.Ticket | None],
    exchange: Exchange,
) -> None:
    """An exchange is over: record it, account for it, log what the upstream reported (usage, finish, error)."""
    if recorder is not None:
        recorder.finish(exchange)
    accounts, ticket = account
    if accounts is not None and ticket is not None:
        accounts.exchange_ended(ticket, upstream, model, exchange)
    if log.isEnabledFor(logging.INFO):
        u = exchange.usage
        log.info(
            "%s/%s -> %s%s: %d events, tokens in=%s out=%s, finish=%s%s",
            upstream,
            model,
            dialect,
            " (relayed)" if exchange.relay else "",
            exchange.events,
            u.input_tokens if u else None,
            u.output_tokens if u else None,
            exchange.finish.reason if exchange.finish else None,
            f", error={exchange.error.type}: {exchange.error.message}" if exchange.error else "",
        )


class RequestIdMiddleware:
    """Every response carries ``x-request-id``: the client's (if sane) or a fresh one."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = None
        for k, v in scope["headers"]:
            if k == b"x-request-id":
                rid = v.decode("latin-1")
                break
        if rid is None or not _REQUEST_ID.fullmatch(rid):
            rid = "req_" + uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, send_with_id)


def dialect_of_path(request: Request) -> str:
    """The dialect a request to an unknown path most likely speaks, for its error shape."""
    path = request.url.path
    if ("/models/" in path and ":" in path) or path.startswith(("/v1beta", "/v1alpha")):
        return GEMINI
    if path.startswith("/mmsp"):
        return "mmsp"
    if "anthropic-version" in request.headers:
        return "anthropic-messages"
    return ENDPOINTS.get(path, "openai-chat")


def create_app(config: Config | str | None = None, upstreams: dict[str, Upstream] | None = None) -> Starlette:
    """The gateway as a Starlette app; ``app.state.gateway`` is the :class:`Gateway`.

    ``config`` is a :class:`Config`, a TOML path, or ``None`` for the embedded local model;
    ``upstreams`` replaces the upstream objects built from the config (tests, embedding).
    """
    if config is None:
        config = default_config()
    elif isinstance(config, str | Path):
        from .config import load

        config = load(config)
    gateway = Gateway(config, upstreams)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if gateway.teams is not None:
            await gateway.teams.start()
        await gateway.turns.start()
        yield
        await gateway.aclose()

    routes: list[BaseRoute] = [Route(path, gateway.generate, methods=["POST"]) for path in ENDPOINTS]
    routes += [
        *(Route(f"/{v}/models/{{target:path}}", gateway.gemini, methods=["POST"]) for v in GEMINI_VERSIONS),
        # LiteLLM's gemini provider appends /models/...:method to its api_base as given, so a
        # base URL without the version lands here.
        Route("/models/{target:path}", gateway.gemini, methods=["POST"]),
        *(Route(f"/{v}/models/{{target:path}}", gateway.model, methods=["GET"]) for v in GEMINI_VERSIONS),
        Route("/v1/models", gateway.models, methods=["GET"]),
        Route("/v1beta/models", gateway.models, methods=["GET"]),
        Route("/mmsp/v1/models", gateway.models, methods=["GET"]),
        Route("/healthz", gateway.healthz, methods=["GET"]),
        *admin_routes(gateway.teams),
        *responses_routes(gateway),  # GET/DELETE /v1/responses/{id}, .../input_items (issue 25)
        Route("/v1/embeddings", gateway.embeddings.openai, methods=["POST"]),
        Route("/v1/images", gateway.images.generate, methods=["POST"]),
        Route("/v1/images/generations", gateway.images.generate, methods=["POST"]),
    ]
    routes += Console(gateway, gateway.traffic).routes()  # the web console at /ui (docs/ui.md)
    websocket = WebSocketEndpoint(gateway)  # llm-stream-bindings §3; app.state.websocket tunes it
    routes.append(WebSocketRoute("/v1/stream", websocket.handle))

    async def no_route(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        kind = "not_found" if status == 404 else "invalid_request"
        message = f"no route for {request.method} {request.url.path}"
        return replies.error(dialect_of_path(request), message, kind, status)

    handlers = {404: no_route, 405: no_route}
    app = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers=handlers, middleware=[Middleware(RequestIdMiddleware)]
    )
    app.state.gateway = gateway
    app.state.websocket = websocket
    return app
