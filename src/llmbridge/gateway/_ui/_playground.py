"""The console's Playground: one upstream answer encoded in all six dialects at once.

:class:`Fanout` is the sans-I/O core: a hub event in, each dialect's stream bytes for it out
(the same ``dialects.stream_encoder`` the gateway's endpoints use, so a pane shows exactly
what that endpoint would have sent), and at the end each pane's bytes decoded back and
validated.  :class:`Lines` writes one turn as the page's NDJSON lines; the turn itself runs
on the gateway's chat pipeline (``ui/_routes.py``).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ... import dialects, hub
from ..config import ModelConfig
from ._translate import event_dict

_HUB_TYPES = frozenset(hub.EVENT_TYPES.values())
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


class Lines:
    """Sans-I/O: the console's turn as a stream encoder, one NDJSON line per hub event.

    A console turn is a chat request like any other — the same pipeline, fallback,
    deadlines, traffic row and ledger row — whose "dialect" is this: a ``start`` line
    (after a ``start`` and a ``fallback`` line for each upstream that failed before answering), an
    ``event`` line per hub event with the six panes' bytes for it (:class:`Fanout`),
    and an ``end`` line with the timings, usage and each pane's check (docs/ui.md).
    ``encode`` returns ``b""`` after the end, like every encoder.
    """

    def __init__(
        self,
        request: hub.Request,
        upstream: str,
        upstream_model: str,
        fallbacks: list[tuple[str, str]] | None = None,
        started: float | None = None,
    ) -> None:
        self.request = request
        self.upstream, self.upstream_model = upstream, upstream_model
        self.fallbacks = fallbacks if fallbacks is not None else []
        self.fanout = Fanout(request)
        self.started = time.monotonic() if started is None else started
        self.first: float | None = None
        self.usage: hub.Usage | None = None
        self.finish: str | None = None
        self.error: hub.Error | None = None
        self.opened = self.closed = False

    def _ms(self, at: float) -> float:
        return round((at - self.started) * 1000, 1)

    def encode(self, event: hub.Event) -> bytes:
        if self.closed:
            return b""
        if type(event) not in _HUB_TYPES:
            raise TypeError(f"not a hub event: {type(event).__name__}")
        now = time.monotonic()
        out = b""
        if not self.opened:
            self.opened = True
            for upstream, message in self.fallbacks:  # each try that failed before answering
                out += self._start(upstream, "") + _line({"kind": "fallback", "upstream": upstream, "message": message})
            out += self._start(self.upstream, self.upstream_model)
        if self.first is None and isinstance(event, hub.BlockStart | hub.Delta):
            self.first = now
        if isinstance(event, hub.Usage):
            self.usage = hub.merge_usage(self.usage, event)
        elif isinstance(event, hub.Finish):
            self.finish = event.reason
        elif isinstance(event, hub.Error):
            self.error = event
        out += _line({"kind": "event", "t": self._ms(now), "hub": event_dict(event), "out": self.fanout.feed(event)})
        if isinstance(event, hub.ResponseEnd):
            self.closed = True
            out += self._end(now)
        return out

    def _start(self, upstream: str, upstream_model: str) -> bytes:
        return _line({"kind": "start", "model": self.request.model, "upstream": upstream,
                      "upstream_model": upstream_model, "dialects": list(self.fanout.names)})  # fmt: skip

    def _end(self, end: float) -> bytes:
        out_tokens = self.usage.output_tokens if self.usage else None
        tps = None
        if out_tokens and self.first is not None and end > self.first:
            tps = round(out_tokens / (end - self.first), 1)
        return _line(
            {
                "kind": "end",
                "t": self._ms(end),
                "ttft_ms": self._ms(self.first) if self.first is not None else None,
                "duration_ms": self._ms(end),
                "tokens_per_s": tps,
                "usage": msgspec.to_builtins(self.usage) if self.usage else None,
                "finish": self.finish,
                "error": event_dict(self.error) if self.error else None,
                "checks": self.fanout.check(),
            }
        )
