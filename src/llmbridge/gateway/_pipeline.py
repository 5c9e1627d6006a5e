"""The one request pipeline: the steps every entry point runs, each written once.

Every way into the gateway — the six chat endpoints, images, the three embeddings shapes,
MMSP embedding streams, each WebSocket turn and each console turn — is the same sequence:

1. **authenticate** the presented secret (:meth:`Pipeline.authenticate`): static keys,
   the master key or a virtual key usable *now* (a WebSocket checks it again on every
   turn, so a revoked, rotated or expired key stops at the next turn);
2. **read** the body (:meth:`Pipeline.read_object`): size cap, JSON, nesting depth, an
   object — or, for a body that arrived another way (a WebSocket message, a console
   turn), :meth:`Pipeline.check_object` with the same depth rule;
3. **validate** it in the client's dialect (the entry point's own parser; ranges with
   :func:`~._checks.validate_request`, the request id with :func:`request_id_of`);
4. **find the model** (:meth:`Pipeline.model`): missing → 400, unknown → 404, *before*
   anything is admitted, so no string a client made up becomes a metric label or a ledger
   value;
5. **admit** (:meth:`Pipeline.admit`): the key's model scope, budget, RPM and TPM; a
   :class:`~._metering.Meter` that settles the request exactly once (ledger, metrics, span);
6. **route** (:meth:`Pipeline.route`): the model's deployments as its router plans them
   (``routing.py``: strategy, retries with backoff, cooldowns), the next one only while the
   client has seen nothing and the failure is retryable;
7. **exchange** under the client-disconnect race (:func:`unless_disconnected`);
8. and one **catch-all** (:meth:`Pipeline.failed`, which :meth:`Pipeline.answer` runs the
   steps under; the chat endpoints run theirs themselves and hand it their exceptions): a
   step that refuses raises :class:`Refused`, a dialect parser raises
   :class:`~llmbridge.errors.RequestError`, and anything else is a bug — each answered in the
   client's dialect, never as Starlette's plain-text 500.

Why a raised :class:`Refused` rather than returned responses: each step can stop the
request, and an exception lets an entry point read as the list of its steps, while the
one place that turns a refusal into bytes is :meth:`Pipeline.failed` (the dialect of
the answer is known there, even when it was negotiated halfway through).

The entry points receive this object — config, upstreams, team features, traffic — and
never the app's ``Gateway``, so the gateway's modules import one way: ``app`` → entry
points → ``pipeline`` → config, upstreams, teams.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

import msgspec
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import Response

from .. import hub
from ..dialects.base import json_decode
from ..errors import RequestError
from . import _checks as checks
from . import _replies as replies
from . import _routing as routing
from ._failures import UpstreamFailed
from ._metering import Meter
from ._response import until_disconnected
from ._routing import Attempt
from ._teams import AS_OPEN, AS_STATIC, Principal, Refusal, Teams, Ticket, one_of, presented_key
from ._teams._guesses import Guesses, client_of
from ._traffic import TrafficLog
from ._upstream import Upstream
from .config import Config, ModelConfig

__all__ = [
    "REQUEST_ID",
    "Pipeline",
    "Refused",
    "presented_secret",
    "request_id_of",
    "unless_disconnected",
]

log = logging.getLogger("llmbridge.gateway")
T = TypeVar("T")

# A request id, from the x-request-id header or a body's metadata.request_id: printable
# ASCII, at most 128 characters (it becomes a ledger value and a response header).
REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")


class Refused(Exception):
    """A step refused the request: ``error`` (and ``headers``) for the client, in its dialect."""

    def __init__(self, error: hub.Error, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.headers = dict(headers or {})

    @classmethod
    def of(cls, message: str, type: str, status: int | None = None, code: str | None = None) -> Refused:
        return cls(hub.Error(message, type, code, status or hub.ERROR_STATUS[type]))


def presented_secret(connection: HTTPConnection) -> str | None:
    """The caller's secret from its headers (or Gemini's ``?key=``)."""
    query = connection.query_params if connection.scope.get("query_string") else {}  # (none: no parse)
    return presented_key(connection.headers, query)


def request_id_of(request: hub.Request) -> str | None:
    """The client's own request id (``metadata.request_id``) when it is one the gateway may
    echo and store: 1 to 128 printable ASCII characters, as for the ``x-request-id`` header.
    Any other value is not refused (vendors take metadata values up to 512 characters) and
    still goes upstream inside ``metadata``; it is just not used as the request's id."""
    value = (request.metadata or {}).get("request_id")
    if value is None:
        return None
    rid = str(value)
    return rid if REQUEST_ID.fullmatch(rid) else None


class Pipeline:
    """The steps of a request, for one gateway (see the module docstring).

    Also the typed context the entry points share: ``config``, ``upstreams``, ``teams``
    (``None`` when the team features are off) and ``traffic`` (the console's ring).
    """

    def __init__(
        self,
        config: Config,
        upstreams: Mapping[str, Upstream],
        teams: Teams | None,
        traffic: TrafficLog,
    ) -> None:
        self.config = config
        self.upstreams = upstreams
        self.teams = teams
        self.traffic = traffic
        self._static = [k.encode() for k in config.gateway.api_keys]
        # failed keys per client address: the teams' table (shared with /admin), else our own
        self.guesses = teams.guesses if teams is not None else Guesses(config.gateway.auth_failures_per_minute)
        self.router = routing.create(config, upstreams, teams)  # deployments, retries, cooldowns

    # -- 1. who

    async def authenticate(self, connection: HTTPConnection) -> Principal:
        """The caller behind the secret ``connection`` presents (its headers, or Gemini's
        ``?key=``); raises :class:`Refused`: 401, or 429 with ``retry-after`` for an address
        past its failed attempts (``teams/_guesses.py``: a wrong key counts, a right one
        costs nothing)."""
        client = client_of(connection)
        wait = self.guesses.wait(client)
        if wait is not None:
            refusal = self.guesses.refusal(wait)
            raise Refused(refusal.error, refusal.headers)
        secret = presented_secret(connection)
        teams = self.teams
        if teams is not None:
            # (no accounts: nothing to wait for, and a coroutine per request costs ~1.5 k instructions)
            who = teams.authenticate_keyless(secret) if not teams.accounts else await teams.authenticate(secret)
            if isinstance(who, Refusal):
                if who.reason == "auth":
                    self.guesses.failed(client)
                raise Refused(who.error, who.headers)
            return who
        if not self._static:
            return AS_OPEN
        if secret and one_of(secret.encode(), self._static):
            return AS_STATIC
        self.guesses.failed(client)
        raise Refused.of("invalid or missing API key", "authentication", 401, "invalid_api_key")

    # -- 2. the body

    async def read_object(self, request: Request) -> tuple[dict[str, Any], int]:
        """The body as a JSON object, and its size in bytes; raises :class:`Refused`: 413 over
        ``max_body_bytes``, 400 when it is not JSON, nests too deep or is not an object.
        A client gone mid-body raises :class:`~starlette.requests.ClientDisconnect`."""
        limit = self.config.gateway.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and len(length) < 20 and int(length) > limit:
            raise Refused.of(f"request body exceeds {limit} bytes", "request_too_large")
        parts: list[bytes] = []
        size = 0
        # The ASGI messages read here rather than through ``request.stream()``: an async
        # generator per request costs its set-up and the event loop's bookkeeping of it.
        receive = request.receive
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect: gone mid-body
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Refused.of(f"request body exceeds {limit} bytes", "request_too_large")
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            body = json_decode(raw)
        except RecursionError:  # msgspec's own guard, near 1,000 levels
            raise self._too_deep() from None
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise Refused.of(f"request body is not valid JSON: {exc}", "invalid_request") from None
        return self.check_object(body, size), size

    def check_object(self, body: Any, size: int | None = None) -> dict[str, Any]:
        """``body`` (already decoded, from ``size`` bytes of JSON when known) if it is a JSON
        object nested at most ``max_json_depth`` levels; raises :class:`Refused` (400)."""
        limit = self.config.gateway.max_json_depth
        # Nesting deeper than ``limit`` takes limit + 1 opening brackets and as many closing
        # ones: JSON shorter than that is not walked (the walk costs ~3 k instructions a level).
        if (size is None or size >= 2 * limit + 2) and checks.nesting_exceeds(body, limit):
            raise self._too_deep()
        if not isinstance(body, dict):
            raise Refused.of("request body must be a JSON object", "invalid_request")
        return body

    def _too_deep(self) -> Refused:
        limit = self.config.gateway.max_json_depth
        return Refused.of(f"request body nests arrays and objects more than {limit} levels deep", "invalid_request")

    # -- 4. the model

    def model(self, name: object) -> ModelConfig:
        """The configured model ``name``; raises :class:`Refused`: 400 when the request names
        none (as every vendor answers), 404 when it is not configured."""
        if not isinstance(name, str) or not name:
            raise Refused.of("model: Field required (a model name)", "invalid_request")
        model = self.config.models.get(name)
        if model is None:
            shown = name if len(name) <= 200 else name[:200] + "…"
            raise Refused.of(f"model {shown!r} not found", "not_found", 404, "model_not_found")
        return model

    # -- 5. admission

    async def admit(
        self,
        who: Principal,
        hreq: hub.Request,
        size: int,
        dialect_in: str,
        dialect_out: str,
        request_id: str,
        operation: str = "chat",
    ) -> Meter:
        """Admit a request whose model is configured (:meth:`model` first): the key's model
        scope, budget, RPM and TPM, before anything goes upstream. Returns the
        :class:`Meter` that settles it; raises :class:`Refused` (403, 429 with
        ``retry-after``, 503 when the limiter is down). ``operation`` names the span
        (``chat``, ``embeddings``, ``image_generation``)."""
        teams = self.teams
        if teams is None:
            return Meter()
        if who.key is None:  # nothing to ask a limiter: no coroutine (see Teams.admit_keyless)
            ticket: Ticket | Refusal = teams.admit_keyless(who, hreq, dialect_in, dialect_out, request_id)
        else:
            ticket = await teams.admit(who, hreq, size, dialect_in, dialect_out, request_id)
        if isinstance(ticket, Refusal):
            raise Refused(ticket.error, ticket.headers)
        if operation != "chat" and ticket.span is not None:  # chat spans are named "chat {model}"
            ticket.span.set_attribute("gen_ai.operation.name", operation)
            ticket.span.update_name(f"{operation} {ticket.model}")  # (bounded: a configured model)
        return Meter(teams, ticket)

    # -- 6. routing

    async def route(
        self,
        model: ModelConfig,
        attempt: Callable[[Attempt], Awaitable[T]],
        body_bytes: int = 0,
        failed: Callable[[Attempt, hub.Error], None] | None = None,
    ) -> tuple[T, Attempt]:
        """``attempt`` on the model's deployments as its router plans them (``routing.py``:
        which one, after what backoff, never sooner than a ``retry-after``, around cooling
        ones), until one starts an answer: its result and the router's :class:`Attempt`, whose
        ``on_end`` the caller calls with what the answer came to (an exchange, an outcome).

        An attempt fails by raising :class:`UpstreamFailed` before the client has seen
        anything; the next one follows while the failure is retryable (the one table,
        ``routing.RETRY_STATUS``) and attempts and the request's deadline remain. Raises the
        last :class:`UpstreamFailed` (its error with a status; ``deployment`` names the one
        that failed last) when none starts. ``failed(attempt, error)`` hears each failure.
        (``body_bytes`` and ``failed`` may be passed positionally, as the chat path does: a
        keyword costs ~0.4 k instructions to bind, per request.)
        """
        router = self.router
        clock = router.clock
        deadline = routing.deadline(router, self.upstreams, model.routes)
        plan = router.plan(model.name, model.routes, deadline, body_bytes)  # (positional: see plan)
        while True:
            next_try = router.next_now(plan)
            if next_try is not None and next_try.started is None:  # something to wait for first
                next_try = await router.next(plan, next_try)
            if next_try is None:
                break
            try:
                result = await attempt(next_try)
            except UpstreamFailed as exc:
                next_try.failed(clock(), exc.error, exc.headers)
                if failed is not None:
                    failed(next_try, exc.error)
                log.info("model %s: deployment %s failed (%s)", model.name, next_try.name, exc.error.message[:200])
                continue
            except BaseException:  # cancelled (the client left) or a bug: the attempt is over
                next_try.finished(clock())
                raise
            next_try.answered(clock())
            return result, next_try
        error = plan.error or hub.Error("the model has no deployment to route to", "api_error", status=502)
        if error.status is None:
            error.status = hub.ERROR_STATUS.get(error.type, 502)
        failure = UpstreamFailed(error, plan.headers)
        failure.deployment = plan.last
        raise failure

    # -- the gateway's own time (Server-Timing, the overhead histogram)

    def timing(self, arrived: float, upstream_started: float | None, upstream_at: float | None) -> str:
        """The ``Server-Timing`` value of an answer whose first byte leaves now, and the
        gateway's share observed in ``llmbridge_gateway_overhead_seconds`` (metrics on).

        ``arrived``: ``perf_counter()`` when the request reached the app; the upstream's
        share runs from its first request (``upstream_started``) to the wake-up that brought
        the answer's start (``upstream_at``); the gateway's is the rest."""
        now = time.perf_counter()
        upstream = upstream_at - upstream_started if upstream_at is not None and upstream_started is not None else 0.0
        # Each share is at least 0.0, as max(0.0, x) would have it (NaN and -0.0 included):
        # written as comparisons, since the builtin costs ~1.3 k instructions a call here.
        if not upstream > 0.0:
            upstream = 0.0
        gateway = now - arrived - upstream
        if not gateway > 0.0:
            gateway = 0.0
        metrics = self.teams.metrics if self.teams is not None else None
        if metrics is not None:
            metrics.overhead.observe(gateway)
        return f"gateway;dur={gateway * 1000:.3f}, upstream;dur={upstream * 1000:.3f}"

    # -- 8. the catch-all

    async def answer(self, dialect: str | Callable[[], str], steps: Coroutine[Any, Any, T]) -> T | Response:
        """Run an entry point's ``steps``; any refusal, request error or bug is answered in
        ``dialect``'s error shape (a callable gives the dialect negotiated so far)."""
        try:
            return await steps
        except Exception as exc:
            return self.failed(_name(dialect), exc)

    def failed(self, dialect: str, exc: Exception) -> Response:
        """The catch-all's answer to ``exc``, raised by a step of a request answered in
        ``dialect``: a refusal, a request error or an upstream failure in that dialect's error
        shape, 499 for a client gone mid-body, and a bug as a 500 (logged with its traceback).
        An entry point that runs its steps itself (``Chat.handle``: one coroutine less on the
        busiest path) hands its exceptions here, so they are answered as :meth:`answer` does."""
        if isinstance(exc, Refused):
            return replies.error_response(dialect, exc.error, exc.headers)
        if isinstance(exc, RequestError):
            return replies.error(dialect, str(exc), exc.type, exc.status)
        if isinstance(exc, UpstreamFailed):
            error = exc.error
            if error.status is None:
                error.status = hub.ERROR_STATUS.get(error.type, 502)
            response = replies.error_response(dialect, error, exc.headers)
            routing.named(response, exc.deployment)  # (its headers: which deployment failed last)
            return response
        if isinstance(exc, ClientDisconnect):  # gone (or cut off by the server's body timeout) mid-body
            return Response(status_code=499)
        # a bug must still answer in the client's dialect
        log.error("internal error", exc_info=(type(exc), exc, exc.__traceback__))
        return replies.error(dialect, "internal gateway error", "api_error", 500)


def _name(dialect: str | Callable[[], str]) -> str:
    return dialect if isinstance(dialect, str) else dialect()


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T | Response:
    """Step 7's race: run ``work`` (until a response is ready) but drop it, and so the
    upstream request, as soon as the client disconnects (a 499 then). The body must have
    been read: this waits on the same ``receive`` channel. (Once a stream is flowing,
    :class:`~._response.StreamResponse` watches instead.)"""

    finished, result = await until_disconnected(request.receive, work)
    if not finished:
        return Response(status_code=499)  # nobody is listening any more
    return result  # type: ignore[return-value]  # (finished: work's own result)
