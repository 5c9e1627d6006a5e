"""Response caches: an answer kept as hub events, served again for a request of the same meaning.

``cache = { mode = "exact", ttl_seconds = 3600 }`` (or ``mode = "semantic"`` with ``threshold``
and ``embed_model``) on a ``[[models]]`` entry turns it on; ``cache_scope = "gateway"`` beside
it shares the entries between keys (the default is one cache per key).

The key is the request's meaning in the hub, not its bytes (:func:`canonical`): the model, the
messages (system prompts folded into one, adjacent text parts joined, tool-call ids numbered in
order of appearance, images by the hash of their bytes), the tools, and every parameter that
changes the answer. So the same question asked through the Chat Completions, Messages,
Responses or Gemini endpoints finds the same entry. A semantic cache partitions its entries by
the meaning of everything but the last user message, and compares that message's embedding
(cosine similarity) with the partition's entries.

An entry holds the answer's hub events (``hub.event_to_json``); a hit replays them through the
client's own encoder, so text, tool calls, thinking and usage keep their structure. Only a
whole answer is kept: one that ended with ``ResponseEnd`` and no ``Error`` (never a truncated
stream, a timeout or a client gone mid-answer), for a request whose ``temperature`` is at most
the entry's ``max_temperature`` (0.3 unless configured).

Backends: the gateway's database (the ledger's SQLite or Postgres: table ``llmb_cache``), Redis
(``[gateway] cache_backend = "redis"``, with ``redis_url``), or, with neither, a bounded
in-process LRU.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import hub
from ..dialects.base import json_decode, json_encode

__all__ = [
    "CACHE_BACKENDS",
    "CachePolicy",
    "DatabaseCache",
    "Layered",
    "MemoryCache",
    "RedisCache",
    "ReplayUpstream",
    "cacheable",
    "best_match",
    "canonical",
    "cosine",
    "decode_events",
    "encode_events",
    "last_user_text",
    "pack_vector",
    "parse_policy",
    "request_keys",
    "unpack_vector",
]

MODES = ("exact", "semantic")
SCOPES = ("key", "gateway")
CACHE_BACKENDS = ("database", "redis")
POLICY_KEYS = frozenset({"mode", "ttl_seconds", "threshold", "embed_model", "max_temperature"})
SEMANTIC_CANDIDATES = 2000  # entries of one partition compared at most (the newest)

# Hub extensions that never change the answer: bookkeeping, transport, storage. Every other
# vendor parameter (logprobs, include, reasoning options ...) is part of the key.
_NEUTRAL = frozenset(
    {
        "store", "previous_response_id", "stream_options", "user", "metadata", "service_tier",
        "prompt_cache_key", "safety_identifier", "background", "truncation", "prompt_cache_retention",
        "max_tokens_field",
    }
)  # fmt: skip


@dataclass(frozen=True)
class CachePolicy:
    """One model's cache, as configured."""

    mode: str = "exact"
    ttl_seconds: float = 3600.0
    threshold: float = 0.95  # semantic: the least cosine similarity that counts as the same question
    embed_model: str | None = None  # semantic: a [[models]] entry of kind "embedding"
    max_temperature: float = 0.3  # requests asking for more randomness are never cached
    scope: str = "key"  # "key": one cache per key; "gateway": shared


def parse_policy(table: Any, scope: Any, where: str) -> CachePolicy:
    """A ``[[models]]`` entry's ``cache`` table and ``cache_scope``; ``ValueError(key, why)``."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}.cache", 'must be a table like { mode = "exact", ttl_seconds = 3600 }')
    for key in table:
        if key not in POLICY_KEYS:
            raise ValueError(f"{where}.cache.{key}", f"unknown key; known: {', '.join(sorted(POLICY_KEYS))}")
    mode = table.get("mode", "exact")
    if mode not in MODES:
        raise ValueError(f"{where}.cache.mode", 'must be "exact" or "semantic"')
    ttl = _number(table, "ttl_seconds", 3600.0, f"{where}.cache", low=0.0, high=10 * 365 * 86400.0)
    if ttl <= 0:
        raise ValueError(f"{where}.cache.ttl_seconds", "must be a positive number of seconds")
    threshold = _number(table, "threshold", 0.95, f"{where}.cache", low=-1.0, high=1.0)
    ceiling = _number(table, "max_temperature", 0.3, f"{where}.cache", low=0.0, high=2.0)
    embed_model = table.get("embed_model")
    if mode == "semantic":
        if not isinstance(embed_model, str) or not embed_model:
            raise ValueError(f"{where}.cache.embed_model", 'a semantic cache needs embed_model (e.g. "local-embed")')
    elif embed_model is not None or "threshold" in table:
        raise ValueError(f"{where}.cache.mode", 'threshold and embed_model apply to mode = "semantic" only')
    if scope is None:
        scope = "key"
    if scope not in SCOPES:
        raise ValueError(f"{where}.cache_scope", 'must be "key" (one cache per key, the default) or "gateway"')
    return CachePolicy(mode, ttl, threshold, embed_model, ceiling, scope)


def _number(t: dict[str, Any], name: str, default: float, where: str, *, low: float, high: float) -> float:
    value = t.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}.{name}", "must be a number")
    if not low <= value <= high:
        raise ValueError(f"{where}.{name}", f"must be in [{low:g}, {high:g}]")
    return float(value)


# --------------------------------------------------------------------------- the key


def cacheable(request: hub.Request, policy: CachePolicy) -> bool:
    """Whether ``policy`` lets this request be answered from (and fill) the cache."""
    t = request.temperature
    return t is None or t <= policy.max_temperature


def _digest(data: str | None) -> str | None:
    return None if data is None else hashlib.sha256(data.encode()).hexdigest()


def _json(value: Any) -> Any:
    """A JSON value with its object keys sorted (so ``{"a":1,"b":2}`` equals ``{"b":2,"a":1}``)."""
    if isinstance(value, dict):
        return {k: _json(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _arguments(text: str) -> Any:
    try:
        return _json(json_decode(text)) if text.strip() else {}
    except Exception:  # arguments that are not JSON: compared as written
        return text


def _parts(parts: Sequence[hub.Part], ids: dict[str, int]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        if isinstance(part, hub.TextPart):
            if not part.text:
                continue
            if out and out[-1][0] == "text":  # one text, however a dialect split it into parts
                out[-1] = ["text", out[-1][1] + part.text]
            else:
                out.append(["text", part.text])
        elif isinstance(part, hub.ImagePart):
            out.append(["image", part.media_type if part.data else None, _digest(part.data), part.url])
        elif isinstance(part, hub.FilePart):
            out.append(["file", part.media_type, _digest(part.data), part.url])
        elif isinstance(part, hub.ThinkingPart):
            if part.text:
                out.append(["thinking", part.text])
        elif isinstance(part, hub.ToolCallPart):
            out.append(["call", ids.setdefault(part.id, len(ids)), part.name, _arguments(part.arguments)])
        elif isinstance(part, hub.ToolResultPart):
            call = ids.setdefault(part.tool_call_id, len(ids))
            out.append(["result", call, bool(part.is_error), _parts(part.content, ids)])
        else:  # NativePart: a vendor block, compared as it is
            out.append(["native", part.namespace, _json(part.data)])
    return out


def canonical(request: hub.Request, *, without_last_user: bool = False) -> dict[str, Any]:
    """The request's meaning as JSON: what :func:`request_keys` hashes (see the module docstring)."""
    ids: dict[str, int] = {}
    system = "\n\n".join(m.text for m in request.messages if m.role == "system")
    messages: list[Any] = []
    rest = [m for m in request.messages if m.role != "system"]
    last_user = max((n for n, m in enumerate(rest) if m.role == "user"), default=-1) if without_last_user else -1
    for n, message in enumerate(rest):
        parts = _parts(message.parts, ids)
        role = message.role
        if parts and all(p[0] == "result" for p in parts):
            role = "tool"  # Anthropic and Gemini send tool results in a user turn, Chat in a tool one
        if n == last_user:
            parts = [p for p in parts if p[0] != "text"] + [["text", "<last user message>"]]
        if messages and messages[-1][0] == role and role == "tool":
            messages[-1][1].extend(parts)
        else:
            messages.append([role, parts])
    tools = [[t.name, t.description or "", _json(t.parameters)] for t in request.tools]
    choice = request.tool_choice
    extensions = {  # ("$order" and other "$" keys: how the client spelled its request, not what it asked)
        k: _json(v) for k, v in sorted(request.extensions.items())
        if (name := k.rpartition(":")[2]) not in _NEUTRAL and not name.startswith("$")
    }  # fmt: skip
    return {
        "model": request.model,
        "system": system,
        "messages": messages,
        "tools": tools,
        "tool_choice": [choice.mode, choice.name] if choice is not None and tools else None,
        "max_tokens": request.max_tokens,
        "temperature": None if request.temperature is None else float(request.temperature),
        "top_p": None if request.top_p is None else float(request.top_p),
        "top_k": request.top_k,
        "stop": list(request.stop),
        "seed": request.seed,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "n": request.n or 1,
        "response_format": _json(request.response_format),
        "thinking": _json(request.thinking),
        "extensions": extensions,
    }


def request_keys(request: hub.Request, scope: str, policy: CachePolicy) -> tuple[str, str]:
    """``(entry key, partition)``: the exact key, and (semantic) the hash of all but the last user message."""
    exact = hashlib.sha256(json_encode([scope, canonical(request)])).hexdigest()
    if policy.mode != "semantic":
        return exact, exact
    rest = hashlib.sha256(json_encode([scope, canonical(request, without_last_user=True)])).hexdigest()
    return exact, "s:" + rest


def last_user_text(request: hub.Request) -> str:
    """The text a semantic cache embeds: the last user message (its text parts)."""
    for message in reversed(request.messages):
        if message.role == "user" and message.text.strip():
            return message.text
    return ""


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or not a:
        return -1.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else -1.0


def best_match(query: Sequence[float], candidates: Sequence[tuple[str, str | None]], threshold: float) -> str | None:
    """The events of the candidate most similar to ``query`` (cosine), if it reaches ``threshold``.

    numpy when it is installed (the local extra): one matrix product over the partition;
    otherwise plain Python (the same result, slower for big partitions)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with the local extra
        best, found = threshold, None
        for events, packed in candidates:
            other = unpack_vector(packed)
            if other is not None and (score := cosine(query, other)) >= best:
                best, found = score, events
        return found
    q = np.asarray(query, dtype=np.float32)
    rows, kept = [], []
    for events, packed in candidates:
        if packed:
            vector = np.frombuffer(base64.b64decode(packed), dtype="<f4")
            if vector.shape == q.shape:
                rows.append(vector)
                kept.append(events)
    if not rows:
        return None
    matrix = np.stack(rows)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
    scores = (matrix @ q) / np.where(norms == 0, 1.0, norms)
    n = int(np.argmax(scores))
    return kept[n] if float(scores[n]) >= threshold else None


def pack_vector(vector: Sequence[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def unpack_vector(text: str | None) -> list[float] | None:
    if not text:
        return None
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


# --------------------------------------------------------------------------- entries


def encode_events(events: Sequence[hub.Event]) -> str:
    """An answer's hub events as stored: request ids left out (a hit gets its own)."""
    out = []
    for event in events:
        data = hub.event_to_json(event)
        if type(event) in (hub.ResponseStart, hub.ResponseEnd):
            data.pop("request_id", None)
        out.append(data)
    return json_encode(out).decode()


def decode_events(text: str | bytes) -> list[hub.Event] | None:
    """The stored events, or None if the entry does not hold a whole, valid answer."""
    try:
        items = json_decode(text)
    except Exception:
        return None
    if not isinstance(items, list):
        return None
    events = [hub.event_from_json(item) for item in items]
    if not events or any(e is None for e in events) or type(events[-1]) is not hub.ResponseEnd:
        return None
    return [e for e in events if e is not None]


class ReplayUpstream:
    """A cache hit as an upstream: it streams the stored events (through the normal exchange)."""

    name = "cache"
    format = "cache"

    def __init__(self, events: list[hub.Event]):
        self.events = events

    async def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        for event in self.events:
            yield event


# --------------------------------------------------------------------------- backends


class Backend(Protocol):
    async def get(self, key: str, now: float) -> tuple[str, float] | None:
        """(events, expires_at) of a live entry."""

    async def put(self, key: str, part: str, vector: str | None, events: str, now: float, ttl: float) -> None: ...

    async def candidates(self, part: str, now: float) -> list[tuple[str, str | None]]:
        """(events, packed vector) of the partition's live entries, newest first."""

    async def purge(self, now: float) -> int: ...

    async def aclose(self) -> None: ...


class MemoryCache:
    """In-process, least recently used first out past ``max_entries`` (no database configured)."""

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[str, str | None, str, float]] = OrderedDict()  # part, vector, events, exp

    async def get(self, key: str, now: float) -> tuple[str, float] | None:
        found = self._entries.get(key)
        if found is None or found[3] <= now:
            return None
        self._entries.move_to_end(key)
        return found[2], found[3]

    async def put(self, key: str, part: str, vector: str | None, events: str, now: float, ttl: float) -> None:
        self._entries[key] = (part, vector, events, now + ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def candidates(self, part: str, now: float) -> list[tuple[str, str | None]]:
        found = [(e[2], e[1]) for e in self._entries.values() if e[0] == part and e[3] > now]
        return found[::-1][:SEMANTIC_CANDIDATES]

    async def purge(self, now: float) -> int:
        dead = [k for k, e in self._entries.items() if e[3] <= now]
        for k in dead:
            del self._entries[k]
        return len(dead)

    async def aclose(self) -> None:
        self._entries.clear()


class DatabaseCache:
    """Table ``llmb_cache`` in the gateway's database (the ledger's :class:`~._teams.store.Store`)."""

    def __init__(self, store: Any):
        self.store = store

    async def get(self, key: str, now: float) -> tuple[str, float] | None:
        sql = "SELECT events, expires_at FROM llmb_cache WHERE key = ? AND expires_at > ?"
        rows = await self.store.fetch(sql, key, now)
        return (str(rows[0][0]), float(rows[0][1])) if rows else None

    async def put(self, key: str, part: str, vector: str | None, events: str, now: float, ttl: float) -> None:
        await self.store.execute(
            "INSERT INTO llmb_cache (key, part, created_at, expires_at, vector, events) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET part = excluded.part, created_at = excluded.created_at, "
            "expires_at = excluded.expires_at, vector = excluded.vector, events = excluded.events",
            key, part, now, now + ttl, vector, events,
        )  # fmt: skip

    async def candidates(self, part: str, now: float) -> list[tuple[str, str | None]]:
        rows = await self.store.fetch(
            "SELECT events, vector FROM llmb_cache WHERE part = ? AND expires_at > ? ORDER BY created_at DESC LIMIT ?",
            part, now, SEMANTIC_CANDIDATES,
        )  # fmt: skip
        return [(str(r[0]), r[1]) for r in rows]

    async def purge(self, now: float) -> int:
        return int(await self.store.execute("DELETE FROM llmb_cache WHERE expires_at <= ?", now))

    async def aclose(self) -> None:
        return None


class RedisCache:
    """Redis: one string per entry (expiring with the entry's TTL), one sorted set per semantic partition."""

    PREFIX = "llmb:cache:"

    def __init__(self, url: str):
        import redis.asyncio as redis

        self._redis: Any = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    async def get(self, key: str, now: float) -> tuple[str, float] | None:
        raw = await self._redis.get(self.PREFIX + key)
        if raw is None:
            return None
        entry = json_decode(raw)
        return entry["events"], float(entry.get("expires", now + 1.0))

    async def put(self, key: str, part: str, vector: str | None, events: str, now: float, ttl: float) -> None:
        value = json_encode({"events": events, "vector": vector, "expires": now + ttl})
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(self.PREFIX + key, value, px=max(1, int(ttl * 1000)))
        if part != key:  # a semantic partition: its members, scored by expiry
            zset = self.PREFIX + "part:" + part
            pipe.zremrangebyscore(zset, "-inf", now)
            pipe.zadd(zset, {key: now + ttl})
            pipe.expire(zset, max(1, int(ttl)) + 60)
        await pipe.execute()

    async def candidates(self, part: str, now: float) -> list[tuple[str, str | None]]:
        zset = self.PREFIX + "part:" + part
        keys = await self._redis.zrangebyscore(zset, now, "+inf")
        keys = list(reversed(keys))[:SEMANTIC_CANDIDATES]
        if not keys:
            return []
        values = await self._redis.mget([self.PREFIX + k.decode() for k in keys])
        out = []
        for raw in values:
            if raw is not None:
                entry = json_decode(raw)
                out.append((entry["events"], entry.get("vector")))
        return out

    async def purge(self, now: float) -> int:
        return 0  # Redis expires entries itself

    async def aclose(self) -> None:
        await self._redis.aclose()


class Layered:
    """A shared backend (the database, Redis) with this process's hot entries in front of it.

    A hit found in front costs no round trip (no database thread, no network): what keeps an
    exact hit's added time to first token small on a busy machine. A copy lives at most
    ``local_seconds`` (and never past the entry's own expiry), so a refresh made on another
    replica is seen here within that time; one made here replaces the copy at once.
    """

    def __init__(self, shared: Backend, max_entries: int = 1000, local_seconds: float = 60.0):
        self.shared = shared
        self.front = MemoryCache(max_entries)
        self.local_seconds = local_seconds

    async def get(self, key: str, now: float) -> tuple[str, float] | None:
        found = await self.front.get(key, now)
        if found is not None:
            return found
        found = await self.shared.get(key, now)
        if found is not None:
            events, expires = found
            await self.front.put(key, key, None, events, now, min(expires, now + self.local_seconds) - now)
        return found

    async def put(self, key: str, part: str, vector: str | None, events: str, now: float, ttl: float) -> None:
        await self.front.put(key, key, None, events, now, min(ttl, self.local_seconds))
        await self.shared.put(key, part, vector, events, now, ttl)

    async def candidates(self, part: str, now: float) -> list[tuple[str, str | None]]:
        return await self.shared.candidates(part, now)  # semantic: the shared view

    async def purge(self, now: float) -> int:
        await self.front.purge(now)
        return await self.shared.purge(now)

    async def aclose(self) -> None:
        await self.front.aclose()
        await self.shared.aclose()
