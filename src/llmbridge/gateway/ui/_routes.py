"""The console's HTTP shell: the page, its static assets and the JSON API under ``/ui``.

Access (docs/ui.md): with no ``api_keys`` and no ``ui_key`` the console is open, like the
gateway; with ``ui_key`` every console route but the static assets and the login needs it
(``Authorization: Bearer KEY``, or the session cookie the login form sets); with ``api_keys``
but no ``ui_key`` the console is off.  Nothing here ever sends an upstream's key or headers.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.resources
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from ... import __version__, dialects
from ...dialects.base import json_decode
from . import _playground, _translate
from ._traffic import TrafficLog

if TYPE_CHECKING:
    from ..app import Gateway  # app imports this package

log = logging.getLogger("llmbridge.gateway")

COOKIE = "llmbridge_console"
HEADER = "x-llmbridge-console"  # sent by the page on every API call (cookie sessions need it: CSRF)
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}
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
            suffix = item.name[item.name.rfind("."):]
            out[item.name] = (item.read_bytes(), _TYPES.get(suffix, "application/octet-stream"))
    return out


def _json(obj: Any, status: int = 200) -> Response:
    headers = dict(SECURITY_HEADERS, **{"cache-control": "no-store"})
    return Response(msgspec.json.encode(obj), status, headers=headers, media_type="application/json")


def _problem(message: str, status: int) -> Response:
    return _json({"error": {"message": message, "status": status}}, status)


class Console:
    """The console of one :class:`~llmbridge.gateway.app.Gateway`; :meth:`routes` mounts it."""

    def __init__(self, gateway: Gateway, traffic: TrafficLog) -> None:
        cfg = gateway.config.gateway
        self.gateway = gateway
        self.traffic = traffic
        self.key = cfg.ui_key.encode() if cfg.ui_key else None
        # Off when turned off, and by default on a gateway with API keys but no console key.
        self.enabled = cfg.ui and (self.key is not None or not cfg.api_keys)
        self._session = hmac.new(self.key, b"llmbridge console session", hashlib.sha256).hexdigest() if self.key else ""
        self._assets = _assets()
        self._translating = asyncio.Semaphore(1)  # one analysis at a time: memory stays bounded

    # -- access

    def _auth(self, request: Request, api: bool) -> Response | None:
        """``None`` when ``request`` may use the console, else the answer to give."""
        if not self.enabled:
            message = "The console is off: this gateway has api_keys; set [gateway] ui_key to turn it on."
            if not self.gateway.config.gateway.ui:
                message = "The console is off ([gateway] ui = false)."
            return _problem(message, 404) if api else self._page("off.html", 404)
        if self.key is None:
            return None
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and hmac.compare_digest(auth[7:].strip().encode(), self.key):
            return None
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self._session.encode()):
            if api and request.method == "POST" and request.headers.get(HEADER) != "1":
                return _problem(f"console API calls with the session cookie need the {HEADER}: 1 header", 403)
            return None
        if api:
            return _problem("the console needs the admin key (gateway.ui_key): Authorization: Bearer KEY", 401)
        return self._page("login.html", 401)

    def _page(self, name: str, status: int = 200) -> Response:
        data, media = self._assets[name]
        headers = dict(SECURITY_HEADERS, **{"cache-control": "no-store"})
        return Response(data, status, headers=headers, media_type=media)

    # -- pages

    async def index(self, request: Request) -> Response:
        return self._auth(request, api=False) or self._page("index.html")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._assets or name.endswith(".html"):
            return Response("not found", 404, media_type="text/plain")
        data, media = self._assets[name]
        return Response(data, headers=dict(SECURITY_HEADERS, **{"cache-control": "no-cache"}), media_type=media)

    async def login(self, request: Request) -> Response:
        if not self.enabled or self.key is None:
            return RedirectResponse("/ui", 303)
        body = await request.body()
        if len(body) > 4096:
            return self._page("login.html", 401)
        key = (parse_qs(body.decode("utf-8", "replace")).get("key") or [""])[0]
        if not hmac.compare_digest(key.encode(), self.key):
            log.info("console login refused")  # never the key itself
            return self._page("login.html", 401)
        response = RedirectResponse("/ui", 303)
        response.set_cookie(COOKIE, self._session, httponly=True, samesite="strict", path="/ui")
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/ui", 303)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    # -- API

    async def info(self, request: Request) -> Response:
        if denied := self._auth(request, api=True):
            return denied
        g = self.gateway
        upstreams = [
            {"name": name, "format": getattr(up, "format", "local")} for name, up in g.upstreams.items()
        ]  # names and formats only: never base URLs (they can hold tokens), keys or headers
        return _json({
            "version": __version__,
            "models": list(g.config.models),
            "dialects": list(dialects.NAMES),
            "sources": list(_translate.SOURCES),
            "upstreams": upstreams,
            "traffic": {"size": self.traffic.size, "prompts": self.traffic.keep_prompts},
            "max_paste_bytes": _translate.MAX_BYTES,
            "auth": self.key is not None,
        })

    async def playground(self, request: Request) -> Response:
        if denied := self._auth(request, api=True):
            return denied
        body = await request.body()
        if len(body) > 1024 * 1024:
            return _problem("the playground request is larger than 1 MB", 413)
        try:
            hreq = _playground.parse_request(json_decode(body), self.gateway.config.models)
        except msgspec.DecodeError:
            return _problem("the body is not valid JSON", 400)
        except _playground.BadRequest as exc:
            return _problem(str(exc), 400)
        headers = dict(SECURITY_HEADERS, **{"cache-control": "no-store", "x-accel-buffering": "no"})
        lines = _playground.run(self.gateway, hreq, self.traffic)
        return StreamingResponse(lines, headers=headers, media_type="application/x-ndjson")

    async def translate(self, request: Request) -> Response:
        if denied := self._auth(request, api=True):
            return denied
        q = request.query_params
        source = q.get("from") or None
        source = None if source == "auto" else source
        target = q.get("to") or "llm-stream"
        if source is not None and source not in _translate.SOURCES:
            return _problem(f"from: unknown dialect {source!r}; auto or one of {', '.join(_translate.SOURCES)}", 400)
        if target not in _translate.TARGETS:
            return _problem(f"to: unknown dialect {target!r}; one of {', '.join(_translate.TARGETS)}", 400)
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
        if denied := self._auth(request, api=True):
            return denied
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            return _problem("after: an entry id (integer)", 400)
        return _json({
            "size": self.traffic.size,
            "prompts": self.traffic.keep_prompts,
            "entries": [e.summary() for e in self.traffic.recent(after)],
            "totals": self.traffic.totals(),
            "deployments": self.gateway.router.snapshot(),  # state, in flight, latency EWMA (gateway/routing.py)
        })

    async def traffic_entry(self, request: Request) -> Response:
        if denied := self._auth(request, api=True):
            return denied
        entry = self.traffic.get(request.path_params["id"])
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
            Route("/ui/api/traffic/{id:int}", self.traffic_entry, methods=["GET"]),
        ]
