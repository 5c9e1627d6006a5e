"""Console sessions: random tokens kept server-side, each with an expiry.

A login makes a token (``secrets.token_urlsafe(32)``, 256 bits) that goes to the browser as
the session cookie; only its SHA-256 is kept, with the time the session ends. A token is
valid until then, or until :meth:`Sessions.end` (logout): the old cookie then opens nothing.
At most ``max_sessions`` are kept (past it the oldest ends).

Where they are kept: with the team features on (``master_key``), in the teams database
(table ``llmb_sessions``), so every worker and replica sharing that database knows every
session and a logout ends it everywhere; otherwise in this process (``--workers N`` then
means a login per worker: docs/ui.md).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._teams.store import Store

__all__ = ["MAX_SESSIONS", "Sessions"]

MAX_SESSIONS = 1000
MAX_TOKEN = 256  # characters: a longer cookie is no token of ours (and is not hashed)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """Live console sessions: token digest -> end time (``clock`` seconds, epoch by default).

    ``store``: a callable giving the teams store to keep them in (``None`` from it, or no
    callable: this process's memory). Store errors propagate (the console answers 503).
    """

    def __init__(
        self,
        ttl: float,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.time,
        store: Callable[[], Store | None] | None = None,
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.clock = clock
        self._store = store or (lambda: None)
        self._ends: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        """Sessions held in memory (0 when they live in the database)."""
        return len(self._ends)

    async def start(self) -> str:
        """A new session; its token (to put in the cookie, never stored)."""
        now = self.clock()
        token = secrets.token_urlsafe(32)
        store = self._store()
        if store is not None:
            await store.insert_session(_digest(token), now + self.ttl, now, self.max_sessions)
            return token
        self._expire(now)
        while len(self._ends) >= self.max_sessions:
            self._ends.popitem(last=False)  # the oldest session
        self._ends[_digest(token)] = now + self.ttl
        return token

    async def valid(self, token: str) -> bool:
        """Whether ``token`` is a live session (an expired one is forgotten)."""
        if not token or len(token) > MAX_TOKEN:
            return False
        digest = _digest(token)
        store = self._store()
        if store is not None:
            end = await store.session_ends_at(digest)
            if end is not None and self.clock() >= end:
                await store.delete_session(digest)
                return False
            return end is not None
        end = self._ends.get(digest)
        if end is None:
            return False
        if self.clock() >= end:
            del self._ends[digest]
            return False
        return True

    async def end(self, token: str) -> None:
        """Logout: the token opens nothing from now on."""
        if not token or len(token) > MAX_TOKEN:
            return
        store = self._store()
        if store is not None:
            await store.delete_session(_digest(token))
        else:
            self._ends.pop(_digest(token), None)

    def _expire(self, now: float) -> None:
        # Sessions are kept in start order with one ttl, so the ended ones are at the front.
        while self._ends:
            digest, end = next(iter(self._ends.items()))
            if end > now:
                break
            del self._ends[digest]
