"""Who a request comes from (:class:`Principal`), or why it may not go on (:class:`Refusal`).

Their own module because both the key check (``core``) and the guess throttle
(``_guesses``), which wraps it, speak in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import hub
from . import keys as _keys

__all__ = ["AS_MASTER", "AS_OPEN", "AS_STATIC", "MASTER", "OPEN", "STATIC", "VIRTUAL", "Principal", "Refusal"]

MASTER, STATIC, VIRTUAL, OPEN = "master", "static", "virtual", "open"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request; ``key`` for a virtual key."""

    kind: str  # MASTER, STATIC, VIRTUAL or OPEN (no auth configured)
    key: _keys.KeyRecord | None = None

    def visible(self, models: list[str]) -> list[str]:
        """The models this caller may use (a virtual key with a model list sees only those)."""
        if self.key is None or self.key.models is None:
            return models
        allowed = self.key.models
        return [m for m in models if m in allowed]


# The principals without a key, made once: frozen, so every request shares them (a frozen
# dataclass sets each field through object.__setattr__: ~1.5 k instructions per request).
AS_MASTER, AS_STATIC, AS_OPEN = Principal(MASTER), Principal(STATIC), Principal(OPEN)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused before routing: the error for the client's dialect and extra headers."""

    error: hub.Error
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = "auth"
