"""Settling an admitted request: :class:`Meter`, what :meth:`.pipeline.Pipeline.admit` returns.

Every entry point settles through it — ``ended`` with what the answer came to (a chat
:class:`~._streaming.Exchange`, or the :class:`Outcome` of an images, embeddings or console
call), ``responded`` with the response, ``cancelled`` when the client left first — so the
limits, the ledger row, the metrics and the span are written by the same
:class:`~._teams.Teams` calls for every kind of request, exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import hub
from ._teams import Teams, Ticket
from ._teams.core import Answer

__all__ = ["Meter", "Outcome"]


@dataclass(slots=True)
class Outcome:
    """What an answer came to, in the terms ``Teams.settle`` reads off an exchange."""

    usage: hub.Usage | None = None
    error: hub.Error | None = None  # the error the client got, if any
    finish: hub.Finish | None = None
    ended: bool = False  # the client's answer reached its end (a stream: its terminal event)
    closed: bool = True
    first_byte_at: float | None = None  # loop time of the first client bytes of a stream


class Meter:
    """One admitted request until it is settled; a no-op when the team features are off."""

    __slots__ = ("_then", "teams", "ticket")

    def __init__(self, teams: Teams | None = None, ticket: Ticket | None = None) -> None:
        self.teams, self.ticket = teams, ticket
        self._then: list[Callable[[Answer], None]] = []

    def also(self, then: Callable[[Answer], None]) -> None:
        """Tell ``then`` too what the answer came to when it is over (the router's attempt:
        its deployment's requests in flight, latency and tokens)."""
        self._then.append(then)

    def ended(self, upstream: str | None, upstream_model: str | None, outcome: Answer) -> None:
        """The answer is over (a stream's last byte, or the result of a call): note it.

        Settles a streamed answer (one whose response was :meth:`responded` already);
        otherwise :meth:`responded` settles it."""
        if self.teams is not None and self.ticket is not None:
            self.teams.exchange_ended(self.ticket, upstream or "", upstream_model, outcome)
        if self._then:
            then, self._then = self._then, []
            for call in then:
                call(outcome)

    def responded(self, response: Any) -> None:
        """The response the handler returns; anything but a 200 stream settles now."""
        if self.teams is not None and self.ticket is not None:
            self.teams.responded(self.ticket, response)

    def cancelled(self) -> None:
        """The client went away before a response was ready (a 499 in the ledger)."""
        if self.teams is not None and self.ticket is not None:
            self.teams.settle(self.ticket, 499)
