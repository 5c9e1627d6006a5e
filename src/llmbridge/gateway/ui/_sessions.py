"""Console sessions: random tokens kept server-side, each with an expiry (sans-I/O).

A login makes a token (``secrets.token_urlsafe(32)``, 256 bits) that goes to the browser as
the session cookie; only its SHA-256 is kept here, with the time the session ends. A token
is valid until then, or until :meth:`Sessions.end` (logout): the old cookie then opens
nothing. The table is bounded (``max_sessions``; past it the oldest session ends) and lives
in the process: with several workers or replicas a login holds on the process that made it
(docs/ui.md says so; scripts send ``Authorization: Bearer <ui_key>`` instead).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["MAX_SESSIONS", "Sessions"]

MAX_SESSIONS = 1000


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """Live console sessions: token digest -> end time (``clock`` seconds)."""

    def __init__(
        self, ttl: float, max_sessions: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.clock = clock
        self._ends: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ends)

    def start(self) -> str:
        """A new session; its token (to put in the cookie, never stored here)."""
        now = self.clock()
        self._expire(now)
        while len(self._ends) >= self.max_sessions:
            self._ends.popitem(last=False)  # the oldest session
        token = secrets.token_urlsafe(32)
        self._ends[_digest(token)] = now + self.ttl
        return token

    def valid(self, token: str) -> bool:
        """Whether ``token`` is a live session (an expired one is forgotten here)."""
        if not token or len(token) > 256:
            return False
        digest = _digest(token)
        end = self._ends.get(digest)
        if end is None:
            return False
        if self.clock() >= end:
            del self._ends[digest]
            return False
        return True

    def end(self, token: str) -> None:
        """Logout: the token opens nothing from now on."""
        if token:
            self._ends.pop(_digest(token), None)

    def _expire(self, now: float) -> None:
        # Sessions are kept in start order with one ttl, so the expired ones are at the front.
        while self._ends:
            digest, end = next(iter(self._ends.items()))
            if end > now:
                break
            del self._ends[digest]
