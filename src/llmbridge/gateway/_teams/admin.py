"""``/admin`` (keys and usage, master key only) and ``/metrics``: thin HTTP shells over :class:`Teams`.

Errors use OpenAI's error shape (``{"error": {"message", "type", "code"}}``), which every
admin client reads: 400 malformed input, 401 no or unknown key, 403 a virtual or static key,
404 unknown key id (or team features off), 409 changing a revoked key, 503 database down.

``GET /v1/key`` and ``GET /v1/key/usage`` are the self-service side: a virtual key reads its
own record, spend and usage rows (never another key's: the key id comes from the key).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...dialects.base import json_decode
from .. import _replies as replies
from . import keys as _keys
from ._guesses import client_of
from .core import Principal, Teams, presented_key
from .metrics import CONTENT_TYPE
from .store import BY, Store

__all__ = ["Handler", "MAX_ADMIN_BODY", "routes"]

log = logging.getLogger("llmbridge.gateway.teams")
MAX_ADMIN_BODY = 64 * 1024
MAX_KEY_ID = 64
Handler = Callable[[Teams, Request], Awaitable[Response]]


def _error(message: str, type: str, status: int, code: str | None = None) -> Response:
    return replies.error("openai-chat", message, type, status, code)


def routes(teams: Teams | None) -> list[Route]:
    """The admin and metrics routes for a gateway (answering 404 where the feature is off)."""

    def admin(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if teams is None or not teams.accounts:
                return _error("team features are off: set gateway.master_key", "not_found", 404)
            refused = await _check_master(teams, request)
            if refused is not None:
                return refused
            try:
                return await handler(teams, request)
            except _keys.KeyInputError as exc:
                return _error(str(exc), "invalid_request", 400)
            except Exception as exc:  # the database is down (or a bug): a clear 503, no traceback in the answer
                log.exception("admin %s %s failed", request.method, request.url.path)
                return _error(f"the key store is unavailable ({type(exc).__name__})", "overloaded", 503)

        return endpoint

    def own(
        handler: Callable[[Teams, Request, _keys.KeyRecord], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """Self-service for a virtual key: its own record and usage, nobody else's."""

        async def endpoint(request: Request) -> Response:
            if teams is None or not teams.accounts:
                return _error("team features are off: set gateway.master_key", "not_found", 404)
            secret = presented_key(request.headers, {})  # a secret in a URL ends up in logs and histories
            who = await teams.guesses.check(client_of(request), partial(teams.authenticate, secret))
            if not isinstance(who, Principal):
                return replies.error_response("openai-chat", who.error)
            if who.key is None:
                return _error("only a virtual key has usage of its own; the master key reads /admin/usage",
                              "invalid_request", 400)  # fmt: skip
            try:
                return await handler(teams, request, who.key)
            except _keys.KeyInputError as exc:
                return _error(str(exc), "invalid_request", 400)
            except Exception as exc:
                log.exception("%s failed", request.url.path)
                return _error(f"the key store is unavailable ({type(exc).__name__})", "overloaded", 503)

        return endpoint

    async def metrics(request: Request) -> Response:
        if teams is None or teams.metrics is None:
            return _error("metrics are off (gateway.metrics = false)", "not_found", 404)
        if teams.ledger is not None:
            teams.metrics.ledger_pending.set(teams.ledger.pending)
        return Response(teams.metrics.render(), media_type=CONTENT_TYPE)

    return [
        Route("/admin/keys", admin(_create), methods=["POST"]),
        Route("/admin/keys", admin(_list), methods=["GET"]),
        Route("/admin/keys/{id}", admin(_get), methods=["GET"]),
        Route("/admin/keys/{id}", admin(_update), methods=["PATCH"]),
        Route("/admin/keys/{id}", admin(_revoke), methods=["DELETE"]),
        Route("/admin/keys/{id}/rotate", admin(_rotate), methods=["POST"]),
        Route("/admin/usage", admin(_usage), methods=["GET"]),
        Route("/v1/key", own(_own_key), methods=["GET"]),
        Route("/v1/key/usage", own(_own_usage), methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]


async def _check_master(teams: Teams, request: Request) -> Response | None:
    """``None`` for the master key in a header (never ``?key=``: a URL ends up in logs); else the refusal.

    Wrong keys count as guesses (``teams/_guesses.py``): past the limit, 429 before any check."""
    client = client_of(request)
    wait = teams.guesses.wait(client)
    if wait is not None:
        refusal = teams.guesses.refusal(wait)
        return replies.error_response("openai-chat", refusal.error, refusal.headers)
    secret = presented_key(request.headers, {})
    if teams.is_master(secret):
        return None
    if secret is None:
        teams.guesses.failed(client)
        message = "the admin API needs the master key in a header (Authorization: Bearer …); never ?key="
        return _error(message, "authentication", 401)
    who = await teams.authenticate(secret)
    if isinstance(who, Principal):  # a working client key, but not the master key
        return _error("the admin API needs the master key, not a client key", "permission", 403, "not_admin")
    teams.guesses.failed(client)
    return _error("invalid API key", "authentication", 401, "invalid_api_key")


async def _body(request: Request) -> Any:
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_ADMIN_BODY:
        raise _keys.KeyInputError(f"the body exceeds {MAX_ADMIN_BODY} bytes")
    raw = await request.body()
    if len(raw) > MAX_ADMIN_BODY:
        raise _keys.KeyInputError(f"the body exceeds {MAX_ADMIN_BODY} bytes")
    try:
        return json_decode(raw)
    except msgspec.DecodeError as exc:
        raise _keys.KeyInputError(f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # msgspec's own guard, near 1,000 levels
        raise _keys.KeyInputError("the body nests arrays and objects too deeply") from None


def _store(teams: Teams) -> Store:
    assert teams.store is not None
    return teams.store


async def _found(teams: Teams, request: Request) -> _keys.KeyRecord | Response:
    key = await _store(teams).get_key(request.path_params["id"])
    if key is None:
        shown = request.path_params["id"][:64]  # (a client's string: quoted, never at length)
        return _error(f"no key with id {shown!r}", "not_found", 404, "key_not_found")
    return key


async def _create(teams: Teams, request: Request) -> Response:
    key, secret = _keys.create(await _body(request))
    await _store(teams).insert_key(key)
    teams.remember(key)
    log.info("admin: created key %s (%s)", key.id, key.name)
    return replies.json_response({**key.public(), "key": secret}, 201)


async def _list(teams: Teams, request: Request) -> Response:
    found = await _store(teams).list_keys()
    return replies.json_response({"object": "list", "data": [k.public() for k in found]})


async def _get(teams: Teams, request: Request) -> Response:
    key = await _found(teams, request)
    if isinstance(key, Response):
        return key
    assert teams.ledger is not None
    await teams.ledger.flush()  # the spend below includes this replica's latest requests
    since = _keys.period_start(key.budget_period, time.time())
    spend = await _store(teams).spend_since(key.id, since)
    return replies.json_response({**key.public(), "spend_usd": round(spend, 9)})


async def _update(teams: Teams, request: Request) -> Response:
    body = await _body(request)
    key = await _found(teams, request)
    if isinstance(key, Response):
        return key
    if key.revoked_at is not None:
        return _error("this key is revoked; create a new one", "invalid_request", 409, "key_revoked")
    key = _keys.update(key, body)
    await _store(teams).save_key(key)
    teams.remember(key)
    return replies.json_response(key.public())


async def _revoke(teams: Teams, request: Request) -> Response:
    key = await _found(teams, request)
    if isinstance(key, Response):
        return key
    if key.revoked_at is None:
        now = time.time()
        key = replace(key, revoked_at=now, updated_at=now)
        await _store(teams).save_key(key)
        teams.remember(key)
        log.info("admin: revoked key %s (%s)", key.id, key.name)
    return replies.json_response(key.public())


async def _rotate(teams: Teams, request: Request) -> Response:
    key = await _found(teams, request)
    if isinstance(key, Response):
        return key
    if key.revoked_at is not None:
        return _error("this key is revoked; create a new one", "invalid_request", 409, "key_revoked")
    old = key.key_hash
    key, secret = _keys.rotate(key)
    await _store(teams).save_key(key)
    teams.remember(key, old_hash=old)
    log.info("admin: rotated key %s (%s)", key.id, key.name)
    return replies.json_response({**key.public(), "key": secret})


async def _own_key(teams: Teams, request: Request, key: _keys.KeyRecord) -> Response:
    assert teams.ledger is not None
    await teams.ledger.flush()
    spend = await _store(teams).spend_since(key.id, _keys.period_start(key.budget_period, time.time()))
    return replies.json_response({**key.public(), "spend_usd": round(spend, 9)})


async def _own_usage(teams: Teams, request: Request, key: _keys.KeyRecord) -> Response:
    return await _usage(teams, request, key.id)


async def _usage(teams: Teams, request: Request, only: str | None = None) -> Response:
    """``only``: the caller's own key id (self-service), overriding any ``key_id`` asked for."""
    q = request.query_params
    by = q.get("by", "key")
    if by not in BY:
        raise _keys.KeyInputError(f"by: must be one of {', '.join(BY)}")  # (never echoes the value)
    since = _keys.parse_since(q["since"]) if q.get("since") else 0.0
    key_id = only or q.get("key_id") or None
    if key_id is not None and len(key_id) > MAX_KEY_ID:
        raise _keys.KeyInputError(f"key_id: a key id has at most {MAX_KEY_ID} characters (like key_0123456789abcdef)")
    assert teams.ledger is not None
    await teams.ledger.flush()  # this replica's buffered rows count too
    rows = await _store(teams).usage(by, since, key_id)
    return replies.json_response({"object": "list", "by": by, "since": _keys.rfc3339(since), "data": rows})
