"""The console's Playground: one upstream answer encoded in all six dialects at once.

:class:`Fanout` is the sans-I/O core: a hub event in, each dialect's stream bytes for it out
(the same ``dialects.stream_encoder`` the gateway's endpoints use, so a pane shows exactly
what that endpoint would have sent), and at the end each pane's bytes decoded back and
validated.  :func:`run` is the I/O shell: it pulls the hub events of one answer from the
gateway's upstream objects and yields NDJSON lines for the page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import msgspec

from ... import dialects, errors, hub
from ..config import ModelConfig
from ._traffic import TrafficLog
from ._translate import event_dict

if TYPE_CHECKING:
    from ..app import Gateway
    from ..upstream import Upstream

PANES = dialects.NAMES  # the six dialects, in the order the page shows them
KEPT = 4 * 1024 * 1024  # bytes per pane kept for the final validation (a turn is far smaller)
MAX_TOOLS = 32


class BadRequest(ValueError):
    """The playground request is malformed; the message names the field."""


def parse_request(body: Any, models: dict[str, ModelConfig]) -> hub.Request:
    """The page's JSON (``{model, prompt, system?, tools?, max_tokens?, temperature?}``) as a hub request.

    Raises :class:`BadRequest` naming the field.  ``tools`` is a list of
    ``{name, description?, parameters?}``; ``tool_choice`` is ``auto``, ``required``,
    ``none`` or a tool name.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in models:
        raise BadRequest(f"model: unknown model {model!r}; one of {', '.join(models) or '(none configured)'}")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadRequest("prompt: write a message to send")
    messages = []
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise BadRequest("system: must be a string")
    if system and system.strip():
        messages.append(hub.Message("system", [hub.TextPart(system)]))
    messages.append(hub.Message("user", [hub.TextPart(prompt)]))
    tools = []
    raw_tools = body.get("tools") or []
    if not isinstance(raw_tools, list) or len(raw_tools) > MAX_TOOLS:
        raise BadRequest(f"tools: must be a list of at most {MAX_TOOLS} tools")
    for i, t in enumerate(raw_tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise BadRequest(f"tools[{i}]: needs a name")
        params = t.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise BadRequest(f"tools[{i}].parameters: must be a JSON Schema object")
        description = t.get("description")
        tools.append(hub.Tool(t["name"], description if isinstance(description, str) else None, params))
    choice = body.get("tool_choice") or "auto"
    if not isinstance(choice, str):
        raise BadRequest("tool_choice: auto, required, none or a tool name")
    tool_choice = None
    if tools:
        if choice in ("auto", "required", "none"):
            tool_choice = hub.ToolChoice(choice)
        elif any(t.name == choice for t in tools):
            tool_choice = hub.ToolChoice("tool", choice)
        else:
            raise BadRequest(f"tool_choice: no tool named {choice!r}")
    max_tokens = body.get("max_tokens", 256)
    if type(max_tokens) is not int or not 1 <= max_tokens <= 8192:
        raise BadRequest("max_tokens: an integer from 1 to 8192")
    temperature = body.get("temperature")
    if temperature is not None and (type(temperature) not in (int, float) or not 0 <= temperature <= 2):
        raise BadRequest("temperature: a number from 0 to 2")
    return hub.Request(
        model=model,
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        stream=True,
        max_tokens=max_tokens,
        temperature=temperature,
    )


class Fanout:
    """Sans-I/O: each hub event of one answer, encoded by the six dialects' stream encoders.

    :meth:`feed` returns ``{dialect: text}`` for one event (a dialect may buffer: ``""``);
    :meth:`check` decodes each dialect's whole output back and validates it.
    """

    def __init__(self, request: hub.Request, names: tuple[str, ...] = PANES) -> None:
        self.names = names
        self._encoders = {n: dialects.stream_encoder(dialects.get(n), request) for n in names}
        self._kept = {n: bytearray() for n in names}
        self.overflow = False

    def feed(self, event: hub.Event) -> dict[str, str]:
        out = {}
        for name, encoder in self._encoders.items():
            try:
                data = encoder.encode(event)
            except Exception as exc:  # a codec bug shows in that pane, the others go on
                data = f": llmbridge console: the {name} encoder failed: {type(exc).__name__}: {exc}\n\n".encode()
            kept = self._kept[name]
            if len(kept) + len(data) <= KEPT:
                kept += data
            else:
                self.overflow = True
            out[name] = data.decode("utf-8", "replace")
        return out

    def check(self) -> dict[str, dict[str, Any]]:
        """Per dialect: ``{ok, events, problems}``: its bytes decoded by its own decoder, validated."""
        result = {}
        for name in self.names:
            decoder = dialects.get(name).StreamDecoder()
            try:
                events = decoder.feed(bytes(self._kept[name])) + decoder.close()
                problems = [str(v) for v in decoder.violations] + [f"{v} (hub)" for v in hub.validate(events)]
            except Exception as exc:
                events, problems = [], [f"decoder failed: {type(exc).__name__}: {exc}"]
            if self.overflow:
                problems.append("not checked in full: the answer is larger than the console keeps")
            result[name] = {"ok": not problems, "events": len(events), "problems": problems[:20]}
        return result


def _line(obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode(obj) + b"\n"


async def run(gateway: Gateway, request: hub.Request, traffic: TrafficLog | None = None) -> AsyncIterator[bytes]:
    """NDJSON lines for one playground turn (see docs/ui.md for the line kinds).

    Tries the model's routes in order while nothing has been received (like the gateway's
    fallback); every failure becomes a line, never an exception.
    """
    model: ModelConfig = gateway.config.models[request.model or ""]  # parse_request checked it is configured
    fanout = Fanout(request)
    started = time.monotonic()
    first: float | None = None
    usage: hub.Usage | None = None
    finish: str | None = None
    error: hub.Error | None = None

    def ms(at: float) -> float:
        return round((at - started) * 1000, 1)

    def emit(now: float, event: hub.Event) -> bytes:
        nonlocal first, usage, finish, error
        if first is None and type(event) in (hub.BlockStart, hub.Delta):
            first = now
        if type(event) is hub.Usage:
            usage = hub.merge_usage(usage, event)
        elif type(event) is hub.Finish:
            finish = event.reason
        elif type(event) is hub.Error:
            error = event
        return _line({"kind": "event", "t": ms(now), "hub": event_dict(event), "out": fanout.feed(event)})

    for n, route in enumerate(model.routes):
        upstream = gateway.upstreams[route.upstream]
        upstream_request = dataclasses.replace(request, model=route.upstream_model)
        fmt = getattr(upstream, "format", "local")
        entry = traffic.begin(route.upstream, upstream_request, "console", upstream_format=fmt) if traffic else None
        yield _line({"kind": "start", "model": request.model, "upstream": route.upstream,
                     "upstream_model": route.upstream_model, "dialects": list(fanout.names)})
        events = _events(upstream, upstream_request)
        held: list[tuple[float, hub.Event]] = []  # until the answer commits (as the gateway's prime())
        committed = fell_back = ended = False
        try:
            async for event in events:
                now = time.monotonic()
                if entry is not None:
                    entry.observe(b"", [event], now)
                kind = type(event)
                if not committed:
                    if kind is hub.ResponseStart or kind is hub.Usage:
                        held.append((now, event))
                        continue
                    if type(event) is hub.Error and n < len(model.routes) - 1 and _retryable(event):
                        fell_back = True  # nothing shown yet: try the next route, like the gateway
                        yield _line({"kind": "fallback", "upstream": route.upstream, "message": event.message})
                        break
                    committed = True
                    for at, e in held:
                        yield emit(at, e)
                yield emit(now, event)
                if kind is hub.ResponseEnd:
                    ended = True
                    break
        finally:
            await events.aclose()
            if entry is not None:  # not ended: the page went away (Stop) and the turn was cancelled
                entry.end(SimpleNamespace(ended=ended or fell_back))
        if not fell_back:
            break
    end = time.monotonic()
    out_tokens = usage.output_tokens if usage else None
    tps = None
    if out_tokens and first is not None and end > first:
        tps = round(out_tokens / (end - first), 1)
    yield _line({
        "kind": "end",
        "t": ms(end),
        "ttft_ms": ms(first) if first is not None else None,
        "duration_ms": ms(end),
        "tokens_per_s": tps,
        "usage": msgspec.to_builtins(usage) if usage else None,
        "finish": finish,
        "error": event_dict(error) if error else None,
        "checks": fanout.check(),
    })


def _retryable(error: hub.Error) -> bool:
    status = error.status or hub.ERROR_STATUS.get(error.type, 500)
    return status == 429 or status >= 500


async def _events(upstream: Upstream, request: hub.Request) -> AsyncGenerator[hub.Event, None]:
    """The upstream's hub events, always ending in ``ResponseEnd``; failures become ``Error`` events.

    Bounded by the upstream's timeouts (first event, between events, total), which the
    gateway applies the same way.
    """
    timeouts = getattr(upstream, "timeouts", None)
    first_byte = getattr(timeouts, "first_byte", 120.0)
    idle = getattr(timeouts, "idle", 120.0)
    total = getattr(timeouts, "total", 900.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + total if total else None
    it = upstream.stream(request)
    started = ended = False
    try:
        while True:
            wait = first_byte if not started else idle
            if deadline is not None:
                wait = min(wait, deadline - loop.time()) if wait is not None else deadline - loop.time()
            try:
                async with asyncio.timeout(wait):
                    event = await anext(it)
            except StopAsyncIteration:
                break
            except TimeoutError:
                if not started:
                    yield hub.ResponseStart()
                yield hub.Error(f"upstream {upstream.name!r} timed out", "timeout", status=504)
                yield hub.ResponseEnd()
                return
            if not started and type(event) is not hub.ResponseStart:
                yield hub.ResponseStart()
            started = True
            ended = type(event) is hub.ResponseEnd
            yield event
            if ended:
                return
    except (errors.UpstreamError, OSError, RuntimeError, ValueError) as exc:
        if not started:
            yield hub.ResponseStart()
        message = str(exc) or type(exc).__name__
        status = getattr(exc, "status", None)
        kind = getattr(exc, "type", None) or (hub.error_type_for_status(status) if status else "api_error")
        yield hub.Error(message, kind if kind in hub.ERROR_TYPES else "api_error", status=status)
        yield hub.ResponseEnd()
        return
    finally:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()
    if not ended:
        if not started:
            yield hub.ResponseStart()
        yield hub.Error("upstream ended before its terminal event", "incomplete_stream", status=502)
        yield hub.ResponseEnd()
