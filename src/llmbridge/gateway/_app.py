"""The gateway's ASGI app: the routes of every entry point, wired to one pipeline."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import dialects
from . import _extensions as extensions
from . import _replies as replies
from . import _teams as teams
from ._chat import Chat
from ._count_tokens import TokenCounter
from ._embeddings import GEMINI_ACTIONS as GEMINI_EMBED_ACTIONS
from ._embeddings import Embeddings
from ._hotpath import GatewayApp, request_id_header
from ._images import Images
from ._memory import Memory
from ._pipeline import Pipeline, Refused
from ._response import StreamResponse
from ._teams.admin import routes as admin_routes
from ._traffic import TrafficLog
from ._ui import Console
from ._upstream import EventUpstream, Upstream, adopt, build
from ._websocket import WebSocketEndpoint
from .config import Config, default_config

__all__ = [
    "ENDPOINTS",
    "GEMINI",
    "GEMINI_VERSIONS",
    "Gateway",
    "RequestIdMiddleware",
    "create_app",
    "dialect_of_path",
]


# endpoint path -> the dialect it speaks: each served dialect's own paths (its GATEWAY traits);
# Gemini's name the model and version in the URL and have a route of their own.
ENDPOINTS = {path: name for name in dialects.NAMES for path in dialects.served(name).paths if "{" not in path}
GEMINI = "gemini"
GEMINI_VERSIONS = ("v1beta", "v1", "v1alpha")  # google-genai uses v1 or v1beta, per version and option


class Gateway:
    """One gateway: its pipeline (config, upstreams, team features, traffic) and entry points.

    The entry points — :class:`~._chat.Chat`, :class:`~._images.Images`,
    :class:`~._embeddings.Embeddings`, the WebSocket binding and the console — each receive the
    :class:`~._pipeline.Pipeline` (never this object), so they all run its steps.
    """

    def __init__(self, config: Config, upstreams: dict[str, Upstream | EventUpstream] | None = None):
        self.config = config
        self.upstreams: dict[str, Upstream] = (
            {name: adopt(up, config.upstreams.get(name)) for name, up in upstreams.items()}
            if upstreams is not None
            else {name: build(cfg) for name, cfg in config.upstreams.items()}
        )
        record = config.gateway.record_dir is not None
        # Recent exchanges for the console's Traffic page; prompt text only when recording anyway.
        self.traffic = TrafficLog(config.gateway.ui_traffic, keep_prompts=record)
        self.teams = teams.create(config, [k.encode() for k in config.gateway.api_keys])  # None: all off
        self.pipeline = Pipeline(config, self.upstreams, self.teams, self.traffic)
        self.embeddings = Embeddings(self.pipeline)  # /v1/embeddings, :embedContent, MMSP vectors
        self.images = Images(self.pipeline)  # /v1/images
        self.memory = Memory(self.pipeline, self.embeddings)  # stored responses, response caches
        self.chat = Chat(self.pipeline, self.embeddings, self.memory)  # every dialect's generation endpoint
        self.counter = TokenCounter(self.pipeline)  # count_tokens, input_tokens, :countTokens

    # -- endpoints

    async def _caller(self, request: Request, dialect: str) -> teams.Principal | Response:
        try:
            return await self.pipeline.authenticate(request)
        except Refused as exc:
            return replies.error_response(dialect, exc.error, exc.headers)

    async def models(self, request: Request) -> Response:
        dialect = _listing_dialect(request)
        if isinstance(who := await self._caller(request, dialect), Response):
            return who
        shape = dialects.served(dialect).models
        return replies.json_response(shape(who.visible(list(self.config.models))))

    async def model(self, request: Request) -> Response:
        """``GET /v1/models/{id}`` (OpenAI, Anthropic) and ``GET /v1beta/models/{name}`` (Gemini)."""
        name = request.path_params["target"].removeprefix("models/")
        dialect = _listing_dialect(request)
        if isinstance(who := await self._caller(request, dialect), Response):
            return who
        if name not in self.config.models or not who.visible([name]):
            return replies.error(dialect, f"model {name[:200]!r} not found", "not_found")
        return replies.json_response(dialects.served(dialect).model(name))

    async def healthz(self, request: Request) -> Response:
        # "worker": the serving process, so an operator can see each of `serve --workers N` answer
        return replies.json_response({"status": "ok", "models": len(self.config.models), "worker": os.getpid()})

    async def generate(self, request: Request) -> Response | StreamResponse:
        return await self.chat.handle(request, ENDPOINTS[request.url.path])

    async def gemini(self, request: Request) -> Response | StreamResponse:
        target = request.path_params["target"]
        model, _, action = target.rpartition(":")
        if action in GEMINI_EMBED_ACTIONS and model:
            return await self.embeddings.gemini(request, model, action)
        if action == "countTokens" and model:
            return await self.counter.gemini(request, model)
        if action not in ("generateContent", "streamGenerateContent") or not model:
            return replies.error(GEMINI, f"unknown method {target[:200]!r}", "not_found")
        stream = action == "streamGenerateContent"
        json_array = stream and request.query_params.get("alt") != "sse"
        return await self.chat.handle(
            request, GEMINI, url_model=model.removeprefix("models/"), stream=stream, json_array=json_array
        )

    async def deployments(self, request: Request) -> Response:
        """``GET /admin/deployments``: every deployment's state, requests in flight, latency.
        With team keys on it needs the master key; otherwise a gateway key when ``api_keys``
        is set, else nothing (as ``/metrics``)."""
        if isinstance(who := await self._caller(request, "openai-chat"), Response):
            return who
        if self.teams is not None and self.teams.accounts and who.kind != teams.MASTER:
            return replies.error("openai-chat", "the admin API needs the master key", "permission", 403, "not_admin")
        return replies.json_response({"object": "list", "data": self.pipeline.router.snapshot()})

    async def aclose(self) -> None:
        await self.memory.stop()  # (before teams: it may share the ledger's database)
        with contextlib.suppress(Exception):
            await self.pipeline.router.aclose()
        if self.teams is not None:
            await self.teams.stop()
        for upstream in self.upstreams.values():
            with contextlib.suppress(Exception):
                await upstream.aclose()


def _listing_dialect(request: Request) -> str:
    """Whose shape a model list (or one model) is asked in: Google's under /v1beta and with
    its key header, MMSP's under /mmsp, Anthropic's with its version header, else OpenAI's."""
    path = request.url.path
    if path.startswith(("/v1beta", "/v1alpha")) or "x-goog-api-key" in request.headers:
        return GEMINI
    if path.startswith("/mmsp"):
        return "mmsp"
    if "anthropic-version" in request.headers:
        return "anthropic-messages"
    return "openai-chat"


class RequestIdMiddleware:
    """Every response carries ``x-request-id``: the client's (if sane) or a fresh one."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = (b"x-request-id", request_id_header(scope))

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


def create_app(
    config: Config | str | None = None, upstreams: dict[str, Upstream | EventUpstream] | None = None
) -> Starlette:
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
        await gateway.pipeline.router.start()
        await gateway.memory.start()
        for upstream in gateway.upstreams.values():  # their spare connections, in the background
            prepare = getattr(upstream, "prepare", None)  # (an object a program put in place may have none)
            if prepare is not None:
                prepare()
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
        Route("/admin/deployments", gateway.deployments, methods=["GET"]),
        *gateway.memory.routes(),  # GET/DELETE /v1/responses/{id}, .../input_items
        Route("/v1/embeddings", gateway.embeddings.openai, methods=["POST"]),
        Route("/v1/images", gateway.images.generate, methods=["POST"]),
        Route("/v1/images/generations", gateway.images.generate, methods=["POST"]),
        Route("/v1/messages/count_tokens", gateway.counter.anthropic, methods=["POST"]),
        Route("/v1/responses/input_tokens", gateway.counter.openai, methods=["POST"]),
    ]
    routes += Console(gateway.pipeline, gateway.chat).routes()  # the web console at /ui (docs/ui.md)
    websocket = WebSocketEndpoint(gateway.pipeline, gateway.chat)  # llm-stream-bindings §3; tuned via app.state
    routes.append(WebSocketRoute("/v1/stream", websocket.handle))

    async def no_route(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        kind = "not_found" if status == 404 else "invalid_request"
        message = f"no route for {request.method} {request.url.path}"
        return replies.error(dialect_of_path(request), message, kind, status)

    handlers = {404: no_route, 405: no_route}
    # (A middleware added here must also wrap the hot path below, which does not pass through these.)
    middleware = [Middleware(RequestIdMiddleware)]
    middleware.append(Middleware(extensions.AskedMiddleware, configured=config.gateway.extensions))  # issue 22
    app = GatewayApp(routes=routes, lifespan=lifespan, exception_handlers=handlers, middleware=middleware)
    # POSTs to the chat endpoints skip Starlette's stack and router (hotpath.py), not the pipeline
    # (sets x-request-id as RequestIdMiddleware does, records the extensions header as AskedMiddleware)
    app.serve_hot(ENDPOINTS, gateway.chat.handle, configured=config.gateway.extensions)
    app.state.gateway = gateway
    app.state.websocket = websocket
    return app
