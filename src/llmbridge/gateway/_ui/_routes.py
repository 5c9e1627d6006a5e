"""The console's HTTP shell: the page, its static assets and the JSON API under ``/ui``.

Access (docs/ui.md): with no ``api_keys``, no ``master_key`` and no ``ui_key`` the console
is open, like the gateway; with ``ui_key`` every console route but the static assets and the
login needs it (``Authorization: Bearer KEY``, or the session cookie the login form sets);
with ``api_keys`` or ``master_key`` but no ``ui_key`` the console is off. Sessions are random
tokens kept server-side (``_sessions.py``) that expire and end at logout; wrong console keys
count as guesses per client address (``teams/_guesses.py``). Nothing here ever sends an
upstream's key or headers.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.resources
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ... import __version__, dialects
from .._chat import Chat, Turn
from .._failures import UpstreamFailed
from .._pipeline import Pipeline, Refused, unless_disconnected
from .._response import StreamResponse
from .._teams import MASTER, OPEN, Principal
from .._teams._guesses import client_of
from . import _playground, _translate
from ._sessions import Sessions

log = logging.getLogger("llmbridge.gateway")
_T = TypeVar("_T")

CONSOLE = "console"  # the console's turns in the Traffic page and the ledger (dialect in and out)
NDJSON = "application/x-ndjson"
COOKIE = "llmbridge_console"
HEADER = "x-llmbridge-console"  # sent by the page on every API call (cookie sessions need it: CSRF)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}
# No inline script or style anywhere, nothing from another origin: a <script> that slipped
# through into the DOM still would not run.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def _assets() -> dict[str, tuple[bytes, str]]:
    """The files under ``static/``, read once: name -> (bytes, content type)."""
    root = importlib.resources.files(__package__).joinpath("static")
    out = {}
    for item in root.iterdir():
        if item.is_file():
            suffix = item.name[item.name.rfind(".") :]
            out[item.name] = (item.read_bytes(), _TYPES.get(suffix, "application/octet-stream"))
    return out


def _json(obj: Any, status: int = 200) -> Response:
    headers = dict(SECURITY_HEADERS, **{"cache-control": "no-store"})
    return Response(msgspec.json.encode(obj), status, headers=headers, media_type="application/json")


def _page_only(request: Request, api: bool, how: str) -> Response | None:
    """A 403 for an API POST without ``HEADER``: a cross-site form or ``no-cors`` fetch cannot
    send it (CSRF), the console's page always does; scripts with the bearer key need not."""
    if api and request.method == "POST" and request.headers.get(HEADER) != "1":
        return _problem(f"console API calls {how} need the {HEADER}: 1 header", 403)
    return None


def _tls(request: Request) -> bool:
    """Served over TLS: the scope's scheme, which uvicorn takes from ``X-Forwarded-Proto`` only
    for proxies it trusts (``FORWARDED_ALLOW_IPS``, default loopback)."""
    return request.url.scheme in ("https", "wss")


def _problem(message: str, status: int, headers: dict[str, str] | None = None) -> Response:
    response = _json({"error": {"message": message, "status": status}}, status)
    response.headers.update(headers or {})
    return response


class Console:
    """The console, on the gateway's pipeline and chat entry point; :meth:`routes` mounts it."""

    def __init__(self, pipeline: Pipeline, chat: Chat) -> None:
        cfg = pipeline.config.gateway
        self.pipeline = pipeline
        self.chat = chat
        self.config = pipeline.config
        self.traffic = pipeline.traffic
        self.key = cfg.ui_key.encode() if cfg.ui_key else None
        # Off when turned off, and on a gateway with client keys (static or virtual) but no console key.
        self.keyed = bool(cfg.api_keys or cfg.teams.master_key)
        self.enabled = cfg.ui and (self.key is not None or not self.keyed)
        teams = pipeline.teams  # with master_key, sessions live in its database: every worker knows them
        self.sessions = Sessions(cfg.ui_session_hours * 3600, store=lambda: teams.store if teams is not None else None)
        self._assets = _assets()
        self._translating = asyncio.Semaphore(1)  # one analysis at a time: memory stays bounded

    # -- access

    async def _auth(self, request: Request, api: bool) -> Response | None:
        """``None`` when ``request`` may use the console, else the answer to give."""
        if not self.enabled:
            message = "The console is off: this gateway has client keys; set [gateway] ui_key to turn it on."
            if not self.config.gateway.ui:
                message = "The console is off ([gateway] ui = false)."
            return _problem(message, 404) if api else self._page("off.html", 404)
        if self.key is None:  # open: any page the browser shows could POST here, but none can add a header
            return _page_only(request, api, "on a gateway without keys")
        cookie = request.cookies.get(COOKIE, "")
        live: bool | None = await self._session(self.sessions.valid, cookie) if cookie else False
        if live:
            return _page_only(request, api, "with the session cookie")
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            client = client_of(request)
            if (throttled := self._throttled(client, api)) is not None:
                return throttled
            if hmac.compare_digest(auth[7:].strip().encode(), self.key):
                return None
            self.pipeline.guesses.failed(client)
        if api:
            return _problem("the console needs the admin key (gateway.ui_key): Authorization: Bearer KEY", 401)
        return self._page("login.html", 401)

    async def _session(self, op: Callable[..., Awaitable[_T]], *args: str) -> _T | None:
        """``op(*args)`` on the session table (opening the teams database first, as a request
        would); None when the database is down (a warning, never the token)."""
        try:
            if self.pipeline.teams is not None and self.pipeline.teams.store is not None:
                await self.pipeline.teams.start()  # idempotent: a no-op once the lifespan started it
            return await op(*args)
        except Exception as exc:
            log.warning("console sessions unavailable (%s)", type(exc).__name__)
            return None

    def _throttled(self, client: str, api: bool) -> Response | None:
        """The 429 for an address past its failed attempts (``teams/_guesses.py``), else None."""
        wait = self.pipeline.guesses.wait(client)
        if wait is None:
            return None
        retry = self.pipeline.guesses.refusal(wait).headers
        response = _problem("too many failed attempts from this address; try again later", 429)
        if not api:
            response = self._page("login.html", 429)
        response.headers.update(retry)
        return response

    def _page(self, name: str, status: int = 200) -> Response:
        data, media = self._assets[name]
        headers = dict(SECURITY_HEADERS, **{"cache-control": "no-store"})
        return Response(data, status, headers=headers, media_type=media)

    # -- pages

    async def index(self, request: Request) -> Response:
        return await self._auth(request, api=False) or self._page("index.html")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._assets or name.endswith(".html"):
            return Response("not found", 404, media_type="text/plain")
        data, media = self._assets[name]
        return Response(data, headers=dict(SECURITY_HEADERS, **{"cache-control": "no-cache"}), media_type=media)

    async def login(self, request: Request) -> Response:
        if not self.enabled or self.key is None:
            return RedirectResponse("/ui", 303)
        client = client_of(request)
        if (throttled := self._throttled(client, api=False)) is not None:
            return throttled
        body = await request.body()
        if len(body) > 4096:
            return self._page("login.html", 401)
        key = (parse_qs(body.decode("utf-8", "replace")).get("key") or [""])[0]
        if not hmac.compare_digest(key.encode(), self.key):
            self.pipeline.guesses.failed(client)
            log.info("console login refused")  # never the key itself
            return self._page("login.html", 401)
        token = await self._session(self.sessions.start)
        if not token:
            return _problem("the session store (the teams database) is unavailable; try again shortly", 503)
        response = RedirectResponse("/ui", 303)
        response.set_cookie(
            COOKIE, token, max_age=int(self.sessions.ttl), httponly=True, samesite="strict", path="/ui",
            secure=_tls(request),
        )  # fmt: skip
        return response

    async def logout(self, request: Request) -> Response:
        await self._session(self.sessions.end, request.cookies.get(COOKIE, ""))  # the old cookie opens nothing now
        response = RedirectResponse("/ui", 303)
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict", secure=_tls(request))
        return response

    # -- API

    async def info(self, request: Request) -> Response:
        if denied := await self._auth(request, api=True):
            return denied
        upstreams = [
            {"name": name, "format": up.format} for name, up in self.pipeline.upstreams.items()
        ]  # names and formats only: never base URLs (they can hold tokens), keys or headers
        return _json(
            {
                "version": __version__,
                "models": list(self.config.models),
                "dialects": list(dialects.NAMES),
                "sources": list(_translate.SOURCES),
                "upstreams": upstreams,
                "traffic": {"size": self.traffic.size, "prompts": self.traffic.keep_prompts},
                "max_paste_bytes": _translate.MAX_BYTES,
                "auth": self.key is not None,
            }
        )

    async def playground(self, request: Request) -> Response | StreamResponse:
        """One console turn: a chat request on the gateway's pipeline (body limits, the
        model, admission and metering as the operator's, fallback, deadlines, the Traffic
        and ledger rows), answered as the page's NDJSON lines (:class:`_playground.Lines`)."""
        if denied := await self._auth(request, api=True):
            return denied
        p = self.pipeline
        started = time.monotonic()
        try:
            body, size = await p.read_object(request)
            model = p.model(body.get("model"))
            hreq = _playground.parse_request(body, self.config.models)
            # The console's user is the operator (ui_key): admitted, limited by nothing a key
            # sets, and metered like any request (a ledger row with dialect "console").
            who = Principal(MASTER if self.key is not None else OPEN)
            ledger_id = str(request.scope.get("state", {}).get("request_id", ""))
            meter = await p.admit(who, hreq, size, CONSOLE, CONSOLE, ledger_id)
        except Refused as exc:
            return _problem(exc.error.message, exc.error.status or 400, exc.headers)
        except ClientDisconnect:
            return Response(status_code=499)
        except _playground.BadRequest as exc:
            return _problem(str(exc), 400)
        turn = Turn(hreq, CONSOLE, CONSOLE, size, media_type=NDJSON)

        def lines(upstream: str, upstream_model: str) -> _playground.Lines:
            fallbacks = [(u, e.message) for u, e in turn.failures]
            return _playground.Lines(hreq, upstream, upstream_model, fallbacks, started)

        turn.encoder = lines
        try:
            response = await unless_disconnected(request, self.chat.routes(turn, model, meter))
        except UpstreamFailed as exc:
            response = self.chat.error_response(turn, exc.error)
        except BaseException:
            meter.cancelled()
            raise
        meter.responded(response)
        extra = dict(SECURITY_HEADERS, **{"cache-control": "no-store", "x-accel-buffering": "no"})
        if isinstance(response, StreamResponse):
            response.headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
        else:
            response.headers.update(extra)
        return response

    async def translate(self, request: Request) -> Response:
        if denied := await self._auth(request, api=True):
            return denied
        q = request.query_params
        source = q.get("from") or None
        source = None if source == "auto" else source
        target = q.get("to") or "llm-stream"
        if source is not None and source not in _translate.SOURCES:
            known = ", ".join(_translate.SOURCES)
            return _problem(f"from: unknown dialect {source[:64]!r}; auto or one of {known}", 400)
        if target not in _translate.TARGETS:
            return _problem(f"to: unknown dialect {target[:64]!r}; one of {', '.join(_translate.TARGETS)}", 400)
        limit = _translate.MAX_BYTES
        parts, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _problem(f"the body is larger than {limit // (1024 * 1024)} MB; use `llmbridge translate`", 413)
            parts.append(chunk)
        data = b"".join(parts)
        async with self._translating:
            report = await asyncio.to_thread(_translate.analyze, data, source, target)
        return _json(report.to_dict())

    async def traffic_list(self, request: Request) -> Response:
        if denied := await self._auth(request, api=True):
            return denied
        after_text = request.query_params.get("after", "0")
        if not (after_text.isascii() and after_text.isdigit() and len(after_text) <= 18):
            return _problem("after: an entry id (a non-negative integer)", 400)
        after = int(after_text)
        return _json(
            {
                "size": self.traffic.size,
                "prompts": self.traffic.keep_prompts,
                "entries": [e.summary() for e in self.traffic.recent(after)],
                "totals": self.traffic.totals(),
                "deployments": self.pipeline.router.snapshot(),  # state, in flight, latency EWMA (gateway/_routing.py)
            }
        )

    async def traffic_entry(self, request: Request) -> Response:
        if denied := await self._auth(request, api=True):
            return denied
        raw = request.path_params["id"]
        entry = self.traffic.get(int(raw)) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else None
        if entry is None:
            return _problem("no such entry (the ring keeps only the most recent requests)", 404)
        return _json(entry.detail())

    def routes(self) -> list[Route]:
        """The console's routes, to append to the gateway's."""
        return [
            Route("/ui", self.index, methods=["GET"]),
            Route("/ui/", self.index, methods=["GET"]),
            Route("/ui/static/{name}", self.static, methods=["GET"]),
            Route("/ui/login", self.login, methods=["POST"]),
            Route("/ui/logout", self.logout, methods=["POST"]),
            Route("/ui/api/info", self.info, methods=["GET"]),
            Route("/ui/api/playground", self.playground, methods=["POST"]),
            Route("/ui/api/translate", self.translate, methods=["POST"]),
            Route("/ui/api/traffic", self.traffic_list, methods=["GET"]),
            # {id}, not {id:int}: Starlette's int convertor raises (a 500 and a traceback) past 4,300 digits
            Route("/ui/api/traffic/{id}", self.traffic_entry, methods=["GET"]),
        ]
