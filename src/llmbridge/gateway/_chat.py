"""The chat entry points: every dialect's generation endpoint, on the one pipeline.

``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/messages``, ``/v1/stream``,
``/mmsp/v1/stream`` and Gemini's ``:generateContent`` / ``:streamGenerateContent`` all run
:meth:`Chat.handle`: the pipeline's steps (``pipeline.py``) with content negotiation and the
dialect's request codec as the "validate" step, and an :class:`~._streaming.Exchange` per
upstream try as the "exchange" step. A WebSocket turn runs :meth:`Chat.turn` — the same
steps from "validate" on — and the console's turns reuse :meth:`Chat.routes` through the
pipeline's fallback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import operator
import time
import types
from collections.abc import Callable, Coroutine, Generator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from .. import dialects, hub
from ..dialects.base import DialectModule, StreamEncoder
from ..errors import RequestError
from . import _acceptance as acceptance
from . import _binding as binding
from . import _checks as checks
from . import _extensions as extensions
from . import _negotiation as negotiation
from . import _replies as replies
from . import _routing as routing
from ._embeddings import Embeddings
from ._failures import UpstreamFailed
from ._memory import Memo, Memory
from ._metering import Meter
from ._pipeline import Pipeline, Refused, request_id_of
from ._record import Recorder
from ._relay import relay_filter
from ._response import STARTED, StreamResponse, until_disconnected
from ._routing import Attempt
from ._streaming import Exchange, Options
from ._teams import Principal
from ._upstream import adopt
from .config import ModelConfig

__all__ = ["Chat", "Turn"]

log = logging.getLogger("llmbridge.gateway")
T = TypeVar("T")

_REQUEST_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(hub.Request)))


def copy_request(request: hub.Request) -> hub.Request:
    """A shallow copy of ``request``, as ``dataclasses.replace(request)`` makes, at a fraction
    of its cost: its fields read in one C call and passed to the constructor by position
    (``tests/test_gateway_start_cost.py`` holds that every field is an ``__init__``
    argument, in order). Not through ``__dict__``: on CPython 3.11 reading an object's
    ``__dict__`` turns its inline attribute values into a real dict, for good, and every
    later attribute read on it (the upstream codec's ``encode_request`` reads them all)
    misses its fast path -- about 7 k instructions more a request than this constructor
    costs."""
    return hub.Request(*_REQUEST_FIELDS(request))


@dataclasses.dataclass(slots=True)
class Turn:
    """One chat request once read: what the steps after "validate" need."""

    # (The fields Chat.handle sets come first, in the order it passes them: positionally, since
    # each keyword costs ~0.4 k instructions to bind, per request. Other callers name theirs.)
    request: hub.Request
    request_dialect: str
    out_dialect: str
    size: int  # bytes of the body (the TPM estimate before the real usage is known)
    json_array: bool = False  # Gemini's streamGenerateContent without ?alt=sse
    binary: bool = False  # LLM-Stream's binary frames (llm-stream-bindings §2)
    with_extensions: bool = True  # our "llmbridge" data in vendor-dialect answers (extensions.py)
    request_id: str | None = None  # the client's own, echoed in llm-stream's stream.start/end
    # the body as the client sent it and its headers: what stored responses and caches read
    body: dict[str, Any] | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # perf_counter() when the request reached the app, and when its first upstream try began
    # (Server-Timing: Pipeline.timing)
    arrived: float = 0.0
    upstream_started: float | None = None
    # The console's turns: their own encoder (made per upstream try: its name and model) and
    # media type in place of a dialect's; None for every dialect endpoint.
    encoder: Callable[[str, str], StreamEncoder] | None = None
    media_type: str | None = None
    # (upstream, error) of each try that failed before the client saw anything
    failures: list[tuple[str, hub.Error]] = dataclasses.field(default_factory=list)


class Chat:
    """The chat endpoints of one gateway; ``embeddings`` serves embedding models named at them."""

    def __init__(self, pipeline: Pipeline, embeddings: Embeddings, memory: Memory) -> None:
        self.pipeline = pipeline
        self.config = pipeline.config
        self.embeddings = embeddings
        self.memory = memory  # stored responses (previous_response_id) and response caches
        gw = pipeline.config.gateway
        self.record_dir = Path(gw.record_dir) if gw.record_dir else None
        self._recorded = 0

    # -- the HTTP entry point

    async def handle(
        self,
        request: Request,
        endpoint: str,
        *,
        url_model: str | None = None,
        stream: bool | None = None,
        json_array: bool = False,
    ) -> Response | StreamResponse:
        """One HTTP chat request to ``endpoint`` (a dialect name), through every step.

        The steps run here rather than under :meth:`Pipeline.answer` (two coroutines fewer on
        the path every chat request takes, issue 23); their exceptions go to the same
        catch-all, :meth:`Pipeline.failed`, in the dialect negotiated so far."""
        arrived = request.scope.get(STARTED) or time.perf_counter()
        headers = request.headers
        content_type, accept = headers.get("content-type"), headers.get("accept")
        negotiated = (endpoint, content_type, accept)
        known = negotiation.KNOWN.get(negotiated)  # (these three negotiated before: their dialects)
        dialect = negotiation.error_dialect(endpoint, content_type, accept) if known is None else known[0]
        p = self.pipeline
        try:
            who = await p.authenticate(request)
            if known is not None:
                request_dialect, out_dialect = known[1], known[2]
            else:
                try:
                    request_dialect = negotiation.request_dialect(content_type, endpoint)
                except negotiation.UnsupportedMediaType as exc:
                    raise Refused.of(str(exc), "unsupported_media_type") from None
                out_dialect = negotiation.response_dialect(endpoint, request_dialect, accept)
                negotiation.remember(negotiated, dialect, request_dialect, out_dialect)
            dialect = out_dialect
            if out_dialect != endpoint:
                json_array = False  # the standard stream is SSE
            if endpoint == negotiation.STANDARD and not binding.acceptable(accept):  # llm-stream-bindings §2.1
                raise Refused.of(f"cannot answer with any of {accept!r}", "invalid_request", 406, "not_acceptable")
            body, size = await p.read_object(request)
            hreq = self.decode(body, request_dialect, url_model, headers)
            if stream is not None:
                hreq.stream = stream
            if out_dialect == negotiation.STANDARD and negotiation.wants_standard_stream(accept):
                hreq.stream = True
            turn = Turn(  # (positional, in field order: see Turn)
                hreq,
                request_dialect,
                out_dialect,
                size,
                json_array,
                out_dialect == negotiation.STANDARD and binding.wants_binary(accept),  # binary
                extensions.wanted(out_dialect, headers, self.config.gateway.extensions),  # with_extensions
                request_id_of(hreq),  # request_id
                body,
                headers,
                arrived,
            )
            ledger_id = turn.request_id or request.scope.get("state", {}).get("request_id", "")
            return await self.serve(turn, who, ledger_id, request)
        except Exception as exc:
            return p.failed(dialect, exc)

    def decode(
        self,
        body: dict[str, Any],
        request_dialect: str,
        url_model: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> hub.Request:
        """Step 3 for chat: ``body`` read by ``request_dialect``'s codec, ranges and images
        checked, and what that dialect's vendor itself refuses refused (``acceptance``);
        raises :class:`~llmbridge.errors.RequestError` or :class:`Refused` (400)."""
        try:
            hreq = dialects.get(request_dialect).decode_request(body, model=url_model)
        except RequestError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise Refused.of(f"malformed request: {type(exc).__name__}: {exc}", "invalid_request") from None
        checks.validate_request(hreq, request_dialect)
        if url_model and not hreq.model:
            hreq.model = url_model
        default_max_tokens = self.config.gateway.anthropic_default_max_tokens
        refused = acceptance.refusal(body, hreq, request_dialect, default_max_tokens, headers)
        if refused is not None:  # only what the client's vendor refuses
            raise refused
        bad_image = checks.check_images(hreq, self.config.gateway.max_image_bytes)
        if bad_image is not None:
            raise Refused.of(bad_image, "invalid_request")
        return hreq

    async def serve(
        self, turn: Turn, who: Principal, ledger_id: str, request: Request | None = None
    ) -> Response | StreamResponse:
        """Steps 4-7 for a read request: the model, admission, routing and the exchange
        (raced against ``request``'s disconnect when there is one); settles the meter."""
        p = self.pipeline
        hreq = turn.request
        model = p.model(hreq.model)
        meter = await p.admit(who, hreq, turn.size, turn.request_dialect, turn.out_dialect, ledger_id)
        memo: Memo | None = None
        try:
            if model.kind == "embedding":  # vectors over MMSP's stream, metered like chat
                response: Response | StreamResponse = await self.embeddings.stream_endpoint(
                    hreq, model, turn.out_dialect, turn.request_id, meter
                )
            else:
                # a previous_response_id's conversation rebuilt, the model's cache asked (memory.py)
                found = None
                if self.memory.involved(turn.request_dialect, model):
                    found = await self.memory.begin(
                        turn.headers, who, turn.body or {}, hreq, model, turn.request_dialect, meter.ticket
                    )
                if isinstance(found, Response):  # refused: an unknown previous_response_id, the store down
                    meter.responded(found)
                    return found
                memo = found
                work = self.routes(turn, model, meter, memo)
                if request is None:
                    response = await work
                else:  # step 7's race (pipeline.unless_disconnected, without its coroutine)
                    finished, result = await until_disconnected(request.receive, work)
                    response = result if finished and result is not None else Response(status_code=499)
        except UpstreamFailed as exc:
            response = self.error_response(turn, exc.error, exc.headers)
            routing.named(response, exc.deployment)  # which deployment failed last
        except BaseException:  # cancelled before the answer began: the ledger still gets its row
            meter.cancelled()
            raise
        self.memory.mark(memo, response)  # x-llmbridge-cache: hit | miss
        meter.responded(response)
        return binding.as_binary(response) if turn.binary else response

    def error_response(self, turn: Turn, error: hub.Error, headers: dict[str, str] | None = None) -> Response:
        """Every upstream failed before the client saw anything: ``error`` in its dialect
        (a console turn: its lines, ending with the error, as a stream would)."""
        if error.status is None:
            error.status = hub.ERROR_STATUS.get(error.type, 502)
        if turn.encoder is None:
            return replies.error_response(turn.out_dialect, error, headers)
        upstream = turn.failures.pop()[0] if turn.failures else ""
        encoder = turn.encoder(upstream, turn.request.model or "")
        body = b"".join(encoder.encode(e) for e in (hub.ResponseStart(), error, hub.ResponseEnd()))
        return Response(body, media_type=turn.media_type)

    # -- routing and the exchange

    async def routes(
        self, turn: Turn, model: ModelConfig, meter: Meter, memo: Memo | None = None
    ) -> Response | StreamResponse:
        """The model's deployments as the pipeline routes them; the answer of the first that
        starts, naming its deployment. Raises :class:`UpstreamFailed` when none does. A cache
        hit (``memo.hit``) answers instead, through the same exchange and encoder."""
        hreq = turn.request
        if memo is not None and memo.hit is not None:
            return await self._replay(turn, memo, meter)

        def failed(deployment: Attempt, error: hub.Error) -> None:
            turn.failures.append((deployment.upstream, error))

        attempt = partial(self.start, turn, meter, memo)
        exchange, deployment = await self.pipeline.route(model, attempt, turn.size, failed)  # (positional: see route)
        meter.also(deployment.on_end)  # the router hears how the answer ended
        try:
            response = await self.answer(exchange, turn)
        except BaseException:
            await exchange.aclose()
            raise
        if turn.encoder is None:  # what the upstream's dialect had no place for: a header
            served = self.pipeline.upstreams[deployment.upstream]
            acceptance.report(response, hreq, turn.request_dialect, served.format)
        return routing.named(response, deployment)

    async def _replay(self, turn: Turn, memo: Memo, meter: Meter) -> Response | StreamResponse:
        """A cache hit: its stored events as an in-process upstream, through an exchange."""
        # (UpstreamFailed is never raised here: a cache keeps only answers that ended well)
        exchange = await self.start(turn, meter, memo, None)
        try:
            return await self.answer(exchange, turn)
        except BaseException:
            await exchange.aclose()
            raise

    async def start(self, turn: Turn, meter: Meter, memo: Memo | None, deployment: Attempt | None) -> Exchange:
        """One try of the request: sent to ``deployment`` (its upstream and model), or, for
        ``None``, to the cache hit ``memo.hit`` (its stored events as an in-process upstream);
        the exchange that carries its answer to the client once it has started (its events
        tapped for the response store and the cache when ``memo`` asks). Raises
        :class:`UpstreamFailed` when the upstream refused or failed before the answer began.

        One coroutine for sending and priming, the pipeline's ``attempt`` itself: every
        coroutine a request passes through costs more than the lines it holds (issue 23)."""
        hreq = copy_request(turn.request)  # (the client's own stays as it came)
        hreq.stream = True
        if deployment is not None:
            upstream = self.pipeline.upstreams[deployment.upstream]
            hreq.model = deployment.model
        else:
            assert memo is not None and memo.hit is not None
            upstream = adopt(memo.hit)
        started = asyncio.get_running_loop().time()
        if turn.upstream_started is None:
            turn.upstream_started = time.perf_counter()
        out_dialect, stream = turn.out_dialect, turn.request.stream
        recorder = None
        relay = False
        traffic = self.pipeline.traffic
        opened = traffic.clock()
        tap = memo.tap(upstream) if memo is not None else None
        # The Traffic row is begun once the upstream has the request, not before: the opening's
        # first step runs to the request's write (or a new connection's start) and stops at
        # the wait for the answer's head, and the row is made there, in the upstream's time
        # rather than the first token's. No other task runs between the two, so nobody sees
        # the difference: the row, its number and its start are what they were.
        opening = upstream.open_stream(hreq, started, tap)
        entry = None
        try:
            try:
                waiting = opening.send(None)
            except StopIteration as done:  # opened without waiting (an in-process upstream)
                entry = traffic.begin(upstream.name, hreq, out_dialect, upstream.format, stream, opened)
                source = done.value
            else:
                entry = traffic.begin(upstream.name, hreq, out_dialect, upstream.format, stream, opened)
                source = await _resumed(opening, waiting)
        except BaseException as exc:  # refused (or cancelled) before any answer: still a Traffic row
            opening.close()  # (over already, unless the row's begin failed: then the request is dropped)
            if entry is None:
                entry = traffic.begin(upstream.name, hreq, out_dialect, upstream.format, stream, opened)
            entry.fail(exc)
            raise
        if source.decoder is not None and self.record_dir is not None:  # raw bytes to record
            self._recorded += 1
            recorder = Recorder.start(self.record_dir, self._recorded, upstream.config, hreq)
            source.record = recorder.write
        # Same dialect, same framing, and no request id to stamp in: relay the bytes untouched.
        relay = stream and not turn.json_array and upstream.format == out_dialect and "request_id" not in hreq.metadata
        relay = relay and (tap is None or not tap.needs_events)  # keeping the answer needs every event
        keepalive = self.config.gateway.keepalive_seconds if stream else None
        encoder: Callable[[], StreamEncoder]
        if turn.encoder is not None:  # a console turn: its lines, no SSE keep-alive comments
            encoder, relay, keepalive = partial(turn.encoder, upstream.name, hreq.model or ""), False, None
        else:
            # (dialects.stream_encoder takes the plain module: the optional stream_encoder(request))
            encoder = partial(dialects.stream_encoder, dialects.get(out_dialect), hreq)
            if not turn.with_extensions:  # no "llmbridge" data for vendor SDKs and tools unless asked
                encoder = partial(extensions.plain_encoder, encoder, out_dialect)
        # (positional, in the fields' order: ten keywords cost ~4.5 k instructions to bind)
        options = Options(
            out_dialect,  # dialect
            relay,
            relay_filter(out_dialect, hreq) if relay else None,
            keepalive,
            turn.json_array,
            turn.request_id,
            self.config.gateway.max_event_bytes,
            entry.hook,  # observer
            entry.then(partial(_finished, upstream.name, hreq.model, out_dialect, recorder, meter)),  # on_end
            hreq.model,
        )
        exchange = Exchange(source, encoder, options)
        try:
            error = await exchange.prime()
        except BaseException:  # cancelled or broken: never leave the upstream request open
            await exchange.aclose()
            raise
        if error is not None:
            await exchange.aclose()
            raise UpstreamFailed(error)
        return exchange

    async def answer(self, exchange: Exchange, turn: Turn) -> Response | StreamResponse:
        """The client's response from a primed exchange: a stream, or the collected body."""
        out_dialect = turn.out_dialect
        if turn.request.stream:
            media = turn.media_type or (
                "application/json" if turn.json_array else dialects.get(out_dialect).STREAM_CONTENT_TYPE
            )
            whole = exchange.whole()  # came complete while priming: one write, no iterator
            streamed = StreamResponse(
                exchange.body() if whole is None else whole, media_type=media, on_close=exchange.aclose
            )
            streamed.last = lambda: exchange.finished
            if turn.arrived:
                timing = self.pipeline.timing
                streamed.timing = partial(timing, turn.arrived, turn.upstream_started, exchange.upstream_at)
            return streamed
        codec: DialectModule = dialects.get(out_dialect)
        response = await exchange.collect()
        if response.error is not None:
            error = response.error
            if error.status is None:
                error.status = hub.ERROR_STATUS.get(error.type, 502)
            return replies.error_response(out_dialect, error)
        response.request_id = turn.request_id or response.request_id
        if turn.with_extensions:
            answer = replies.json_response(codec.encode_response(response))
        else:
            plain = extensions.plain_response(response, out_dialect)
            answer = replies.json_response(extensions.plain_body(codec.encode_response(plain)))
        if turn.arrived:
            answer.headers["server-timing"] = self.pipeline.timing(
                turn.arrived, turn.upstream_started, exchange.upstream_at
            )
        return answer


@types.coroutine
def _resumed(coroutine: Coroutine[Any, Any, T], waiting: Any) -> Generator[Any, Any, T]:
    """The rest of ``coroutine`` once its first step (``coroutine.send(None)``) has yielded
    ``waiting``, as ``await coroutine`` would have run it: what the task sends or throws in
    goes on to the coroutine, what the coroutine yields goes out to the task."""
    while True:
        try:
            value = yield waiting
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as exc:  # (cancelled: on to the coroutine, which may handle it)
            try:
                waiting = coroutine.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                waiting = coroutine.send(value)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def _finished(
    upstream: str,
    model: str | None,
    dialect: str,
    recorder: Recorder | None,
    meter: Meter,
    exchange: Exchange,
) -> None:
    """An exchange is over: record it, account for it, log what the upstream reported (usage, finish, error)."""
    if recorder is not None:
        recorder.finish(exchange)
    meter.ended(upstream, model, exchange)
    if log.isEnabledFor(logging.INFO):
        u = exchange.usage
        log.info(
            "%s/%s -> %s%s: %d events, tokens in=%s out=%s, finish=%s%s",
            upstream,
            model,
            dialect,
            " (relayed)" if exchange.relay else "",
            exchange.events,
            u.input_tokens if u else None,
            u.output_tokens if u else None,
            exchange.finish.reason if exchange.finish else None,
            f", error={exchange.error.type}: {exchange.error.message}" if exchange.error else "",
        )
