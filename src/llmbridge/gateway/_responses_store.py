"""Stored responses: OpenAI's stateful Responses API over any upstream.

``POST /v1/responses`` with ``store`` (true unless the client, its key or the operator says
otherwise) keeps the request's input items and the answer; a later request names it with
``previous_response_id`` and the gateway rebuilds the whole conversation for upstreams that
keep no state (Anthropic, Gemini, Chat Completions, the local model). An OpenAI Responses
upstream keeps its own: ids it made are forwarded to it untouched. ``GET /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items`` and ``DELETE /v1/responses/{id}`` answer in OpenAI's
shapes.

A stored response is visible only to the key that made it (and the master key): any other
key gets OpenAI's 404 (400 ``previous_response_not_found`` when it names it as
``previous_response_id``), exactly as for an id that never existed. Prompts and answers are
kept only here (table ``llmb_responses``), never in logs or the ledger; rows expire after
``response_store_days`` and are deleted by a background sweep.

Where: the ledger's database (SQLite or Postgres) when ``database_url`` or ``master_key`` is
set; otherwise an in-process store bounded to ``response_store_max`` responses.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.responses import Response

from .. import hub
from ..dialects.base import json_decode, json_encode
from . import _replies as replies
from . import _teams as teams

__all__ = [
    "KEYS",
    "DatabaseResponses",
    "MemoryResponses",
    "Responses",
    "StoreSettings",
    "Stored",
    "assistant_message",
    "input_items",
    "owner_of",
    "parse",
    "store_unavailable",
]

log = logging.getLogger("llmbridge.gateway")
DIALECT = "openai-responses"
KEYS = frozenset({"response_store", "response_store_days", "response_store_max", "cache_backend", "cache_max_entries"})
_RETRIES = (0.05, 0.1, 0.2, 0.4)  # seconds: an id not found yet may still be committing on another replica
MAX_CHAIN = 1000  # previous_response_id hops followed at most (a longer chain is cut at its oldest end)


@dataclass(frozen=True)
class StoreSettings:
    """``[gateway]`` keys of stored responses and of the response caches' backend."""

    response_store: bool = True
    response_store_days: float = 30.0
    response_store_max: int = 10_000  # responses kept in process when there is no database
    database: bool = False  # database_url (or master_key: the ledger's database) is set
    cache_backend: str = "database"  # or "redis" (redis_url)
    cache_max_entries: int = 10_000  # cache entries kept in process when there is no database


def parse(t: dict[str, Any]) -> StoreSettings:
    """The keys above from a ``[gateway]`` table; ``ValueError(key, why)``."""
    d = StoreSettings()
    store = t.get("response_store", d.response_store)
    if not isinstance(store, bool):
        raise ValueError("gateway.response_store", "must be true or false")
    days = t.get("response_store_days", d.response_store_days)
    if isinstance(days, bool) or not isinstance(days, int | float) or not math.isfinite(days) or not 0 < days <= 36500:
        raise ValueError("gateway.response_store_days", "must be a number of days in (0, 36500]")
    most = t.get("response_store_max", d.response_store_max)
    if type(most) is not int or not 1 <= most <= 10_000_000:
        raise ValueError("gateway.response_store_max", "must be an integer in [1, 10000000]")
    backend = t.get("cache_backend", d.cache_backend)
    if backend not in ("database", "redis"):
        raise ValueError("gateway.cache_backend", 'must be "database" or "redis"')
    if backend == "redis" and not t.get("redis_url"):
        raise ValueError("gateway.cache_backend", 'cache_backend = "redis" needs gateway.redis_url')
    entries = t.get("cache_max_entries", d.cache_max_entries)
    if type(entries) is not int or not 1 <= entries <= 10_000_000:
        raise ValueError("gateway.cache_max_entries", "must be an integer in [1, 10000000]")
    database = "database_url" in t or "master_key" in t
    return StoreSettings(store, float(days), most, database, backend, entries)


def owner_of(principal: teams.Principal) -> str:
    """Who a stored response (or a per-key cache entry) belongs to."""
    if principal.key is not None:
        return "key:" + principal.key.id
    return principal.kind  # master, static (every static key alike) or open (no auth)


@dataclass
class Stored:
    """One stored response: this request's input items and the answer (its Responses object and hub events)."""

    id: str
    owner: str
    created_at: float
    expires_at: float
    previous_id: str | None
    upstream: str | None
    input: list[dict[str, Any]] = field(default_factory=list)
    # {"object": {...}, "events": [...]}; or {"upstream": name}: an OpenAI upstream keeps it, only its owner is here
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def kept_upstream(self) -> bool:
        return "upstream" in self.response


class Backend(Protocol):
    async def get(self, response_id: str, now: float) -> Stored | None: ...
    async def put(self, stored: Stored) -> None: ...
    async def delete(self, response_id: str) -> bool: ...
    async def purge(self, now: float) -> int: ...


class MemoryResponses:
    """In-process, the oldest dropped past ``max_entries`` (no database configured)."""

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._rows: OrderedDict[str, Stored] = OrderedDict()

    async def get(self, response_id: str, now: float) -> Stored | None:
        found = self._rows.get(response_id)
        return found if found is not None and found.expires_at > now else None

    async def put(self, stored: Stored) -> None:
        self._rows[stored.id] = stored
        while len(self._rows) > self.max_entries:
            self._rows.popitem(last=False)

    async def delete(self, response_id: str) -> bool:
        return self._rows.pop(response_id, None) is not None

    async def purge(self, now: float) -> int:
        dead = [k for k, s in self._rows.items() if s.expires_at <= now]
        for k in dead:
            del self._rows[k]
        return len(dead)


_COLUMNS = "id, owner, created_at, expires_at, previous_id, upstream, input, response"


class DatabaseResponses:
    """Table ``llmb_responses`` in the gateway's database (the ledger's :class:`~._teams.store.Store`)."""

    def __init__(self, store: Any):
        self.store = store

    async def get(self, response_id: str, now: float) -> Stored | None:
        rows = await self.store.fetch(
            f"SELECT {_COLUMNS} FROM llmb_responses WHERE id = ? AND expires_at > ?", response_id, now
        )
        if not rows:
            return None
        r = rows[0]
        return Stored(r[0], r[1], float(r[2]), float(r[3]), r[4], r[5], json_decode(r[6]), json_decode(r[7]))

    async def put(self, s: Stored) -> None:
        await self.store.execute(
            f"INSERT INTO llmb_responses ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            s.id, s.owner, s.created_at, s.expires_at, s.previous_id, s.upstream,
            json_encode(s.input).decode(), json_encode(s.response).decode(),
        )  # fmt: skip

    async def delete(self, response_id: str) -> bool:
        return bool(await self.store.execute("DELETE FROM llmb_responses WHERE id = ?", response_id))

    async def purge(self, now: float) -> int:
        return int(await self.store.execute("DELETE FROM llmb_responses WHERE expires_at <= ?", now))


class Responses:
    """The store as the gateway uses it: ownership, the conversation chain, writes not yet committed."""

    def __init__(self, backend: Backend, days: float):
        self.backend = backend
        self.seconds = days * 86400.0
        # Written by a background task; a follow-up turn may come before the commit: served from here.
        self.pending: dict[str, Stored] = {}

    async def get(self, response_id: str, owner: str | None) -> Stored | None:
        """The response if it exists and ``owner`` may see it (None: the master key, who sees all)."""
        found = self.pending.get(response_id)
        if found is None:
            found = await self.backend.get(response_id, time.time())
        if found is None or (owner is not None and found.owner != owner):
            return None
        return found

    async def find(self, response_id: str, owner: str | None) -> Stored | None:
        """:meth:`get`, patient with a database: another replica may be committing it this moment
        (its client got the answer before the background write ended). Costs only a miss."""
        found = await self.get(response_id, owner)
        if found is None and isinstance(self.backend, DatabaseResponses):
            for pause in _RETRIES:
                await asyncio.sleep(pause)
                found = await self.get(response_id, owner)
                if found is not None:
                    break
        return found

    async def chain(self, last: Stored, owner: str | None) -> list[Stored]:
        """``last`` and the responses before it (by ``previous_response_id``), oldest first."""
        out = [last]
        seen = {last.id}
        while out[-1].previous_id and len(out) < MAX_CHAIN:
            prev = await self.get(out[-1].previous_id, owner)
            if (
                prev is None or prev.id in seen or prev.kept_upstream
            ):  # deleted or expired: the conversation starts after it
                break
            seen.add(prev.id)
            out.append(prev)
        return out[::-1]

    async def put(self, stored: Stored) -> None:
        self.pending[stored.id] = stored
        try:
            await self.backend.put(stored)
        finally:
            self.pending.pop(stored.id, None)

    async def delete(self, response_id: str) -> bool:
        self.pending.pop(response_id, None)
        return await self.backend.delete(response_id)


# --------------------------------------------------------------------------- conversation


def _prefix(item: dict[str, Any]) -> str:
    kind = item.get("type") or "message"
    return {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}.get(kind, "item")


def input_items(body: dict[str, Any], new_id: Callable[[str], str]) -> list[dict[str, Any]]:
    """The request's ``input`` as the items OpenAI lists under ``input_items`` (each with an id)."""
    raw = body.get("input")
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    out = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        item = dict(item)
        if "role" in item and item.get("type") in (None, "message"):
            item["type"] = "message"
            if isinstance(item.get("content"), str):
                kind = "output_text" if item["role"] == "assistant" else "input_text"
                item["content"] = [{"type": kind, "text": item["content"]}]
            item.setdefault("status", "completed")
        if not item.get("id"):
            item = {"id": new_id(_prefix(item)), **item}
        out.append(item)
    return out


def assistant_message(events: list[hub.Event]) -> hub.Message:
    """A stored answer as the assistant turn of the conversation (text, thinking with its
    signatures, tool calls with their ids): what a stateless upstream is sent next time."""
    response = hub.assemble(events)
    parts: list[hub.Part] = []
    for b in response.choice_blocks(0):
        if b.kind == "text" and b.text:
            parts.append(hub.TextPart(b.text))
        elif b.kind == "thinking":
            parts.append(hub.ThinkingPart(b.text, b.fidelity))
        elif b.kind == "tool_call":
            parts.append(hub.ToolCallPart(b.id or f"call_{b.index}", b.name or "", b.text or "{}", b.fidelity))
    return hub.Message("assistant", parts)


# --------------------------------------------------------------------------- HTTP


def _openai_error(message: str, status: int, param: str | None = None, code: str | None = None) -> Response:
    kind = "invalid_request_error"
    return replies.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


def not_found(response_id: str) -> Response:
    return _openai_error(f"Response with id '{response_id}' not found.", 404)


def previous_not_found(response_id: str) -> Response:
    """OpenAI's answer to a ``previous_response_id`` it does not know (or that is another key's)."""
    message = f"Previous response with id '{response_id}' not found."
    return _openai_error(message, 400, "previous_response_id", "previous_response_not_found")


def store_unavailable() -> Response:
    """The database behind the store is down (503, OpenAI's shape; the SDKs retry it)."""
    body = {"message": "The response store is unavailable; try again shortly.", "type": "server_error",
            "param": None, "code": "store_unavailable"}  # fmt: skip
    return replies.json_response({"error": body}, 503)
