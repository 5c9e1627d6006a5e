"""Stored responses and response caches on the request path: the gateway's memory of answers.

Two steps of the chat pipeline (``chat.py``) call it:

1. :meth:`Memory.begin`, once a request is decoded and admitted and before it is routed:
   rebuilds the conversation of a ``previous_response_id`` (gateway/_responses_store.py), and
   looks the request up in its model's cache (gateway/_cache.py). It returns a :class:`Memo`
   (``turn.hit`` is set when the cache answers), an error response, or None (nothing to do).
2. :meth:`Memo.tap`, when an exchange is opened: a tap on the upstream's hub events (its
   decoder, or its event iterator) that stamps the response id the gateway stores under, keeps
   the events, and at ``ResponseEnd`` (never after an ``Error``) writes the stored response and
   the cache entry, in a background task (the stream never waits for a database).

:meth:`Memory.mark` adds ``x-llmbridge-cache: hit|miss`` to the response.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, cast

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import dialects, hub
from ..dialects.base import StreamDecoder
from . import _cache as _cache
from . import _extensions as extensions
from . import _replies as replies
from . import _teams as teams
from ._embeddings import Embeddings
from ._pipeline import Pipeline, Refused
from ._response import StreamResponse
from ._responses_store import (
    DatabaseResponses,
    MemoryResponses,
    Responses,
    Stored,
    _openai_error,
    assistant_message,
    input_items,
    not_found,
    owner_of,
    previous_not_found,
    store_unavailable,
)

if TYPE_CHECKING:
    from ._upstream import Upstream
    from .config import ModelConfig

__all__ = ["CACHE_HEADER", "Tap", "Memo", "Memory"]

log = logging.getLogger("llmbridge.gateway")
RESPONSES = "openai-responses"
PREFIX = RESPONSES + ":"
CACHE_HEADER = "x-llmbridge-cache"
SWEEP_SECONDS = 300.0  # how often expired stored responses and cache entries are deleted
_COPIED = (
    "instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "reasoning", "temperature", "text",
    "tool_choice", "tools", "top_p", "truncation", "user",
)  # fmt: skip


# The Responses object's fields around its output (as openai-responses' encoder writes them by
# default; temperature and top_p are left to its documented defaults when the client set none).
_BASE_FIELDS: dict[str, Any] = {
    "object": "response", "status": "in_progress", "error": None, "incomplete_details": None, "output": [],
    "usage": None, "instructions": None, "max_output_tokens": None, "parallel_tool_calls": True,
    "previous_response_id": None, "reasoning": None, "store": True,
    "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "truncation": "disabled",
    "metadata": {},
}  # fmt: skip


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


class Memory:
    """The gateway's stored responses and caches: what it remembers of answers (``chat.memory``)."""

    def __init__(self, pipeline: Pipeline, embeddings: Embeddings):
        self.pipeline = pipeline
        self.embeddings = embeddings  # a semantic cache embeds the question with the gateway's own models
        config = pipeline.config
        self.settings = config.gateway.store
        self.any_cache = any(m.cache is not None for m in config.models.values())
        self.responses: Responses | None = None
        self.cache: _cache.Backend | None = None
        self._own_store: Any = None
        self._started = False
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    # -- life cycle

    async def start(self) -> None:
        async with self._lock:
            if self._started:
                return
            s = self.settings
            db = None
            if s.database and (s.response_store or (self.any_cache and s.cache_backend == "database")):
                t = self.pipeline.teams
                if t is not None and t.store is not None:  # the ledger's own connection
                    await t.start()
                    db = t.store
                else:
                    from ._teams.store import connect

                    db = self._own_store = connect(self.pipeline.config.gateway.teams.database_url)
                    await db.open()
            if s.response_store:
                backend = DatabaseResponses(db) if db is not None else MemoryResponses(s.response_store_max)
                self.responses = Responses(backend, s.response_store_days)
            if self.any_cache:
                redis_url = self.pipeline.config.gateway.teams.redis_url
                if s.cache_backend == "redis" and redis_url:  # (the config refuses "redis" without a URL)
                    self.cache = _cache.Layered(_cache.RedisCache(redis_url))
                elif db is not None:
                    self.cache = _cache.Layered(_cache.DatabaseCache(db))
                else:
                    self.cache = _cache.MemoryCache(s.cache_max_entries)
            if self.responses is not None or self.cache is not None:
                self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="llmbridge-sweep")
            self._started = True

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.cache is not None:
            with contextlib.suppress(Exception):
                await self.cache.aclose()
        if self._own_store is not None:
            with contextlib.suppress(Exception):
                await self._own_store.close()
            self._own_store = None
        self._started = False

    async def responses_store(self) -> Responses | None:
        if not self._started:
            await self.start()
        return self.responses

    async def _sweep(self) -> None:
        while True:
            now = time.time()
            for what, purge in (("stored responses", self.responses), ("cache entries", self.cache)):
                if purge is None:
                    continue
                try:
                    gone = await (purge.backend.purge(now) if isinstance(purge, Responses) else purge.purge(now))
                    if gone:
                        log.info("deleted %d expired %s", gone, what)
                except Exception as exc:
                    log.warning("cannot delete expired %s (%s: %s)", what, type(exc).__name__, exc)
            await asyncio.sleep(SWEEP_SECONDS)

    def spawn(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception as exc:  # the database is down: the answer was served, only the copy is lost
                log.warning("cannot write %s (%s: %s)", what, type(exc).__name__, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- hook 1: before routing

    def involved(self, request_dialect: str, model: ModelConfig) -> bool:
        """Whether :meth:`begin` has anything to do for a request: one in the Responses dialect
        (stored conversations), or to a model with a cache. (Checked first, so that the others,
        most requests, skip a coroutine that would return ``None`` at once.)"""
        return request_dialect == RESPONSES or model.cache is not None

    async def begin(
        self,
        headers: Mapping[str, str],
        who: teams.Principal,
        body: dict[str, Any],
        hreq: hub.Request,
        model: ModelConfig,
        request_dialect: str,
        ticket: teams.Ticket | None,
    ) -> Memo | Response | None:
        """What this request needs from the store and the cache (see the module docstring)."""
        if request_dialect == RESPONSES and not self.settings.response_store:
            if body.get("store") is not False:
                hreq.extensions[PREFIX + "store"] = False  # the operator turned storing off: upstreams too
            previous = body.get("previous_response_id")
            if previous and not any(self._format(r.upstream) == RESPONSES for r in model.routes):
                return previous_not_found(str(previous))  # nobody keeps conversations here
        if not (self.settings.response_store and request_dialect == RESPONSES) and model.cache is None:
            return None
        if not self._started:
            await self.start()
        turn = Memo(self, owner_of(who), body)
        key = who.key
        if request_dialect == RESPONSES and self.responses is not None:
            wanted = body.get("store") is not False
            turn.store = wanted and (key is None or key.response_store)
            if wanted and not turn.store:
                hreq.extensions[PREFIX + "store"] = False  # forced off: an OpenAI upstream must not keep it either
            previous = body.get("previous_response_id")
            if isinstance(previous, str) and previous:
                try:
                    refused = await self._continue(turn, who, previous, hreq, model)
                except Exception as exc:  # the database is down: a clear 503, no traceback
                    log.warning("response store unavailable (%s: %s)", type(exc).__name__, exc)
                    return store_unavailable()
                if refused is not None:
                    return refused
        policy = model.cache
        usable = policy is not None and self.cache is not None and (key is None or key.cache) and not turn.forward
        if policy is not None and usable and _cache.cacheable(hreq, policy):
            await self._lookup(turn, headers, hreq, policy)
            if ticket is not None:
                ticket.cache = turn.cache_result
        return turn

    async def _continue(
        self, turn: Memo, who: teams.Principal, previous: str, hreq: hub.Request, model: ModelConfig
    ) -> Response | None:
        assert self.responses is not None
        owner = None if who.kind == teams.MASTER else turn.owner
        forwardable = any(self._format(r.upstream) == RESPONSES for r in model.routes)
        # (an id an OpenAI upstream made, and made elsewhere, is never here: no waiting for it)
        stored = await (self.responses.get if forwardable else self.responses.find)(previous, None)
        if stored is not None and owner is not None and stored.owner != owner:
            return previous_not_found(previous)  # another key's: as if it did not exist
        if stored is None or stored.kept_upstream:
            if forwardable:  # an OpenAI upstream keeps the conversation: the id goes to it untouched
                turn.forward = True
                return None
            return previous_not_found(previous)
        history: list[hub.Message] = []
        decode = dialects.get(RESPONSES).decode_request
        for s in await self.responses.chain(stored, owner):
            history += decode({"input": s.input}).messages
            events = [e for e in map(hub.event_from_json, s.response.get("events") or ()) if e is not None]
            history.append(assistant_message(events))
        lead = 0
        while lead < len(hreq.messages) and hreq.messages[lead].role == "system":
            lead += 1
        hreq.messages = hreq.messages[:lead] + history + hreq.messages[lead:]
        hreq.extensions.pop(PREFIX + "previous_response_id", None)  # every upstream now gets it all
        turn.previous = previous
        return None

    def _format(self, upstream: str) -> str | None:
        u = self.pipeline.config.upstreams.get(upstream)
        return u.format if u is not None else None

    async def _lookup(
        self, turn: Memo, headers: Mapping[str, str], hreq: hub.Request, policy: _cache.CachePolicy
    ) -> None:
        assert self.cache is not None
        scope = "gateway" if policy.scope == "gateway" else turn.owner
        turn.cache_key, turn.cache_part = _cache.request_keys(hreq, scope, policy)
        turn.policy = policy
        control = headers.get("cache-control", "").lower()
        refresh = "no-cache" in control or "no-store" in control
        text = None
        try:
            if not refresh:
                found = await self.cache.get(turn.cache_key, time.time())
                text = found[0] if found is not None else None
            if text is None and policy.mode == "semantic":
                turn.vector = await self._embed(policy, hreq)
                if turn.vector is not None and not refresh:
                    entries = await self.cache.candidates(turn.cache_part, time.time())
                    text = _cache.best_match(turn.vector, entries, policy.threshold)
        except Exception as exc:  # the cache's backend is down: answer from the upstream
            log.warning("response cache unavailable (%s: %s)", type(exc).__name__, exc)
            turn.cache_key = None
            return
        replay = _cache.decode_events(text) if text is not None else None
        if replay is not None:
            turn.hit = _cache.ReplayUpstream(replay)
            turn.cache_result = "hit"
        else:
            turn.cache_result = "miss"
            if policy.mode == "semantic" and turn.vector is None:
                turn.cache_key = None  # nothing to file it under

    async def _embed(self, policy: _cache.CachePolicy, hreq: hub.Request) -> list[float] | None:
        from ._embeddings import EmbedRequest

        text = _cache.last_user_text(hreq)
        if not text or policy.embed_model is None:
            return None
        result = await self.embeddings.embed(EmbedRequest(policy.embed_model, [text]))
        if isinstance(result, hub.Error) or not result.vectors:
            return None
        return [float(x) for x in result.vectors[0]]

    def routes(self) -> list[Route]:
        """``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``."""

        async def caller(request: Request) -> tuple[Responses, str | None] | Response:
            try:  # the pipeline's step: keys and the guess throttle, as every request
                who = await self.pipeline.authenticate(request)
            except Refused as exc:
                return replies.error_response(RESPONSES, exc.error, exc.headers)
            store = await self.responses_store()
            if store is None:
                return not_found(request.path_params["response_id"])
            return store, None if who.kind == teams.MASTER else owner_of(who)

        async def owned(request: Request) -> tuple[Responses, Stored, str] | Response:
            """The store, the stored response the path names and its id, if this caller may
            see it; else the answer (401, 404: another key's is as if it did not exist)."""
            found = await caller(request)
            if isinstance(found, Response):
                return found
            store, owner = found
            response_id = request.path_params["response_id"]
            stored = await store.find(response_id, owner)
            if stored is None or stored.kept_upstream:  # (an OpenAI upstream's: not proxied, see docs)
                return not_found(response_id)
            return store, stored, response_id

        async def retrieve(request: Request) -> Response:
            found = await owned(request)
            if isinstance(found, Response):
                return found
            return replies.json_response(found[1].response["object"])

        async def delete(request: Request) -> Response:
            found = await owned(request)
            if isinstance(found, Response):
                return found
            store, _, response_id = found
            if not await store.delete(response_id):
                return not_found(response_id)
            return replies.json_response({"id": response_id, "object": "response", "deleted": True})

        async def items(request: Request) -> Response:
            found = await owned(request)
            if isinstance(found, Response):
                return found
            _, stored, _ = found
            q = request.query_params
            order = q.get("order", "desc")
            if order not in ("asc", "desc"):
                return _openai_error("Invalid value for 'order': expected 'asc' or 'desc'.", 400, "order")
            limit_text = q.get("limit", "20")
            if not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
                return _openai_error("Invalid value for 'limit': expected an integer from 1 to 100.", 400, "limit")
            limit = int(limit_text)
            data = list(stored.input) if order == "asc" else list(reversed(stored.input))
            after = q.get("after")
            if after:
                ids = [i.get("id") for i in data]
                if after not in ids:
                    return _openai_error(f"Item with id '{after}' not found.", 404, "after")
                data = data[ids.index(after) + 1 :]
            page = data[:limit]
            return replies.json_response(
                {
                    "object": "list",
                    "data": page,
                    "first_id": page[0]["id"] if page else None,
                    "last_id": page[-1]["id"] if page else None,
                    "has_more": len(data) > limit,
                }
            )

        def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
            async def endpoint(request: Request) -> Response:
                try:
                    return await handler(request)
                except Exception as exc:  # the database is down: a clear 503, no traceback
                    log.warning("response store unavailable (%s: %s)", type(exc).__name__, exc)
                    return store_unavailable()

            return endpoint

        path = "/v1/responses/{response_id}"
        return [
            Route(path, guarded(retrieve), methods=["GET"]),
            Route(path, guarded(delete), methods=["DELETE"]),
            Route(path + "/input_items", guarded(items), methods=["GET"]),
        ]

    # -- the answer's header

    def mark(self, turn: Memo | None, response: Response | StreamResponse) -> None:
        """``x-llmbridge-cache: hit`` / ``miss`` on a response whose model has a cache."""
        if turn is None or turn.cache_result is None:
            return
        header = (CACHE_HEADER.encode(), turn.cache_result.encode())
        if isinstance(response, StreamResponse):
            response.headers.append(header)
        else:
            response.raw_headers.append(header)


class Memo:
    """One request's business with the store and the cache."""

    def __init__(self, memory: Memory, owner: str, body: dict[str, Any]):
        self.memory = memory
        self.owner = owner
        self.body = body
        self.store = False  # keep this /v1/responses answer (unless an OpenAI upstream keeps it)
        self.forward = False  # previous_response_id is an OpenAI upstream's: forwarded untouched
        self.previous: str | None = None
        self.response_id: str | None = None
        self.hit: _cache.ReplayUpstream | None = None
        self.cache_result: str | None = None  # "hit" | "miss"
        self.cache_key: str | None = None
        self.cache_part = ""
        self.vector: list[float] | None = None
        self.policy: _cache.CachePolicy | None = None

    # -- hook 2: the exchange

    def tap(self, upstream: Upstream) -> Tap | None:
        """The tap for one exchange with ``upstream`` (None: nothing to keep from it). An
        OpenAI Responses upstream keeps its own responses (a cache hit replays in process)."""
        forwarding = upstream.format == RESPONSES
        store = self.store and not forwarding
        owner_only = self.store and forwarding  # the upstream keeps it; we note whose it is
        fill = self.cache_key is not None and self.hit is None
        if not (store or fill or owner_only):
            return None
        if store and self.response_id is None:
            self.response_id = _new_id("resp")
        return Tap(self, upstream.name, store, fill, owner_only)

    def own_fields(self, extensions: dict[str, Any] | None) -> dict[str, Any]:
        """ResponseStart extensions whose ``openai-responses`` part is the response object's fields."""
        fields = {**_BASE_FIELDS, **{k: self.body[k] for k in _COPIED if k in self.body}}
        fields["previous_response_id"] = self.body.get("previous_response_id")
        return {**(extensions or {}), RESPONSES: fields}

    def note_owner(self, response_id: str, upstream: str | None) -> None:
        """An OpenAI upstream made and keeps ``response_id``: remember only whose it is, so that
        no other key continues it through the gateway."""
        responses = self.memory.responses
        if responses is None:
            return
        now = time.time()
        stub = Stored(response_id, self.owner, now, now + responses.seconds, None, upstream, [], {"upstream": upstream})
        responses.pending[response_id] = stub
        self.memory.spawn(responses.put(stub), "a stored response's owner")

    def commit(self, tap: Tap) -> None:
        """A whole answer arrived: file it (background writes; a follow-up turn finds it at once)."""
        memory = self.memory
        events = tap.events
        now = time.time()
        if tap.fill and self.cache_key is not None and self.policy is not None and memory.cache is not None:
            text = _cache.encode_events(events)
            vector = _cache.pack_vector(self.vector) if self.vector is not None else None
            put = memory.cache.put(self.cache_key, self.cache_part, vector, text, now, self.policy.ttl_seconds)
            memory.spawn(put, "a cache entry")
        if tap.store and self.response_id is not None and memory.responses is not None:
            stored = self._stored(events, tap.upstream, now, memory.responses.seconds)
            memory.responses.pending[stored.id] = stored
            memory.spawn(memory.responses.put(stored), "a stored response")

    def _stored(self, events: list[hub.Event], upstream: str | None, now: float, keep: float) -> Stored:
        assert self.response_id is not None
        body = self.body
        codec = dialects.get(RESPONSES)
        plain = extensions.plain_response(hub.assemble(events), RESPONSES)
        obj: dict[str, Any] = extensions.plain_body(codec.encode_response(plain))
        for name in _COPIED:
            if name in body:
                obj[name] = body[name]
        obj["id"] = self.response_id
        obj["previous_response_id"] = body.get("previous_response_id")
        obj["store"] = True
        kept = []
        for event in events:
            data = hub.event_to_json(event)
            if type(event) in (hub.ResponseStart, hub.ResponseEnd):
                data.pop("request_id", None)
            kept.append(data)
        return Stored(
            self.response_id, self.owner, now, now + keep, self.previous, upstream,
            input_items(body, _new_id), {"object": obj, "events": kept},
        )  # fmt: skip


class Tap:
    """Sees one exchange's hub events before they are encoded (see the module docstring)."""

    def __init__(self, turn: Memo, upstream: str | None, store: bool, fill: bool, owner_only: bool = False):
        self.turn = turn
        self.upstream = upstream
        self.store = store
        self.fill = fill
        self.owner_only = owner_only
        # A relay decodes only a few events (its ResponseStart among them): keeping the answer
        # needs every event, so the exchange must translate; noting the owner does not.
        self.needs_events = store or fill
        self.events: list[hub.Event] = []
        self.failed = False
        self.done = False

    def see(self, events: list[hub.Event]) -> None:
        if self.done:
            return
        if not self.needs_events:
            for event in events:
                if type(event) is hub.ResponseStart:
                    self.done = True
                    if event.id:
                        self.turn.note_owner(event.id, self.upstream)
            return
        for n, event in enumerate(events):
            kind = type(event)
            if kind is hub.ResponseStart:
                start = cast(hub.ResponseStart, event)
                if self.store:
                    # Kept under our id; the client's object says so (store, previous_response_id
                    # and the request's fields, as OpenAI's), the kept copy stays as the upstream sent it.
                    event = msgspec.structs.replace(start, id=self.turn.response_id)
                    events[n] = msgspec.structs.replace(event, extensions=self.turn.own_fields(start.extensions))
                elif self.owner_only and start.id:
                    self.turn.note_owner(start.id, self.upstream)
            self.events.append(event)
            if kind is hub.Error or (kind is hub.Finish and event.reason == "error"):  # type: ignore[union-attr]
                self.failed = True
            elif kind is hub.ResponseEnd:
                self.done = True
                if not self.failed:
                    self.turn.commit(self)
                self.events = []
                return

    def decoder(self, inner: StreamDecoder) -> StreamDecoder:
        return _TapDecoder(inner, self)

    async def stream(self, source: AsyncIterator[hub.Event]) -> AsyncIterator[hub.Event]:
        try:
            async for event in source:
                seen = [event]
                self.see(seen)
                yield seen[0]
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()


class _TapDecoder:
    """A decoder whose events the tap sees first (the same events, in the same lists)."""

    def __init__(self, inner: StreamDecoder, tap: Tap):
        self._inner = inner
        self._tap = tap
        self.violations = inner.violations  # the same list: the inner decoder appends to it

    def feed(self, data: bytes) -> list[hub.Event]:
        events = self._inner.feed(data)
        if events:
            self._tap.see(events)
        return events

    def close(self) -> list[hub.Event]:
        events = self._inner.close()
        if events:
            self._tap.see(events)
        return events
