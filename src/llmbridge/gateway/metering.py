"""The team features for answers that do not come from an :class:`~.streaming.Exchange`:
images, embeddings (OpenAI's and Gemini's endpoints, MMSP's embedding stream).

Chat requests are admitted in ``Gateway._handle`` and settled by the exchange's ``on_end``;
these endpoints go through the very same :class:`~.teams.Teams` calls — ``admit`` before
anything goes upstream (the key's models, budget, RPM, TPM), ``exchange_ended`` with what
the answer came to, ``responded`` with the response — so limits, the ledger row, metrics and
the span are the chat path's. What is different is only the record of the answer:
:class:`Outcome` carries the attributes ``Teams.settle`` reads off an exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import Response

from .. import hub
from . import replies
from .teams import Principal, Refusal, Teams, Ticket

__all__ = ["Meter", "Outcome", "PRINCIPAL", "admit", "remember_principal"]

PRINCIPAL = "llmbridge.principal"  # where the caller, once authenticated, waits in the ASGI scope's state


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

    __slots__ = ("teams", "ticket")

    def __init__(self, teams: Teams | None = None, ticket: Ticket | None = None) -> None:
        self.teams, self.ticket = teams, ticket

    def ended(self, upstream: str | None, upstream_model: str | None, outcome: Outcome) -> None:
        """The answer is over (a stream's last byte, or the result of a call): note it.

        Settles a streamed answer (one whose response was :meth:`responded` already);
        otherwise :meth:`responded` settles it."""
        if self.teams is not None and self.ticket is not None:
            self.teams.exchange_ended(self.ticket, upstream or "", upstream_model, outcome)

    def responded(self, response: Any) -> None:
        """The response the handler returns; anything but a 200 stream settles now."""
        if self.teams is not None and self.ticket is not None:
            self.teams.responded(self.ticket, response)

    def cancelled(self) -> None:
        """The client went away before a response was ready (a 499 in the ledger)."""
        if self.teams is not None and self.ticket is not None:
            self.teams.settle(self.ticket, 499)


def remember_principal(connection: HTTPConnection, who: Principal) -> None:
    """Keep the authenticated caller for :func:`admit` (the key is checked once per request)."""
    connection.scope.setdefault("state", {})[PRINCIPAL] = who


async def admit(
    teams: Teams | None,
    connection: HTTPConnection,
    hreq: hub.Request,
    size: int,
    dialect_in: str,
    dialect_out: str,
    operation: str,
) -> Meter | Response:
    """Admit a request before anything goes upstream: a :class:`Meter` to settle it with, or
    the refusal (403 budget/model, 429 RPM/TPM with ``retry-after``, 503 limiter down) as a
    response in ``dialect_out``'s error shape.

    ``hreq`` names the model (and, with ``trace_content``, the inputs of the span); ``size``
    is the request's size in bytes (the TPM estimate before the real usage is known);
    ``operation`` is the GenAI operation name of the span (``embeddings``, ``image_generation``).
    """
    if teams is None:
        return Meter()
    state = connection.scope.get("state", {})
    who = state.get(PRINCIPAL)
    if not isinstance(who, Principal):  # not authenticated through accepted_object: do it now
        from .teams import presented_key

        who = await teams.authenticate(presented_key(connection.headers, connection.query_params))
        if isinstance(who, Refusal):
            return replies.error_response(dialect_out, who.error)
    ticket = await teams.admit(who, hreq, size, dialect_in, dialect_out, str(state.get("request_id", "")))
    if isinstance(ticket, Refusal):
        return replies.error_response(dialect_out, ticket.error, ticket.headers)
    if ticket.span is not None:  # the chat path names its spans "chat {model}"
        ticket.span.set_attribute("gen_ai.operation.name", operation)
        ticket.span.update_name(f"{operation} {hreq.model}")
    return Meter(teams, ticket)
