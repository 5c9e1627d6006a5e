"""The client against a scripted fake model server over real HTTP on loopback: the tool loop
and its safety rules, conversations, cancellation, errors, retries, message forms, schemas.

The fake server speaks openai-chat, anthropic-messages and llm-stream (the request decoded by
that dialect's codec, the answer built as hub events and encoded by its stream encoder), and
its behaviour is chosen by the model name.
"""

from __future__ import annotations

import asyncio
import enum
import json
import socket
import threading
import time
from typing import Literal, Optional

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse

from llmbridge import AsyncClient, Client, dialects, hub, tool
from llmbridge.client import Completion
from llmbridge.client.tools import ToolRegistry, schema_for
from llmbridge.dialects.base import json_decode
from llmbridge.errors import (
    ConversationBusyError,
    IncompleteStreamError,
    ProtocolError,
    ToolCallArgumentParseError,
    ToolLoopError,
    TransportError,
    UpstreamError,
)
from llmbridge.gateway._app import ENDPOINTS
from llmbridge.gateway._response import StreamResponse
from llmbridge.unievent import grammar_violations
from tests.gateway_util import serving, wait_for

# --------------------------------------------------------------------------- the fake model


class FakeModel:
    """An ASGI model server; ``requests`` holds (model, hub.Request) in arrival order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, hub.Request]] = []
        self.attempts: dict[str, int] = {}
        self.disconnected: list[str] = []
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path = request.url.path
        url_model = None
        if path.startswith("/v1beta/models/"):  # Gemini: the model is in the URL
            dialect, url_model = "gemini", path.removeprefix("/v1beta/models/").rpartition(":")[0]
        else:
            dialect = ENDPOINTS[path]
        codec = dialects.get(dialect)
        req = codec.decode_request(json_decode(await request.body()), model=url_model)
        model = req.model or ""
        with self.lock:
            self.requests.append((model, req))
            self.attempts[model] = self.attempts.get(model, 0) + 1
            attempt = self.attempts[model]
        response = self.answer(codec, model, req, attempt)
        await response(scope, receive, send)

    def answer(self, codec, model: str, req: hub.Request, attempt: int):
        if model.startswith("status-"):
            status = int(model.split("-")[1])
            _, body = codec.encode_error(hub.Error("scripted failure", hub.error_type_for_status(status)))
            return JSONResponse(body, status_code=status, headers={"retry-after": "0"})
        if model.startswith("flaky-") and attempt <= int(model.split("-")[1]):
            _, body = codec.encode_error(hub.Error("try again", "overloaded", status=503))
            return JSONResponse(body, status_code=503, headers={"retry-after": "0"})
        if model == "slow":
            return StreamResponse(self.slow(codec, model), media_type=codec.STREAM_CONTENT_TYPE)
        events = self.script(model.removesuffix("+whole"), req, codec.NAME)
        encoder = codec.StreamEncoder()
        body = [encoder.encode(e) for e in events]
        if model.endswith("+whole"):
            body = [b"".join(body)]  # one write: the client decodes every event at once
        if model == "cut":
            body = body[: len(body) // 2]  # the connection ends before the terminal event
        if model == "seq-gap":  # LLM-Stream: seq must grow by exactly 1
            body = [b.replace(b'"seq":3,', b'"seq":9,') for b in body]
        return StreamResponse(_aiter(body), media_type=codec.STREAM_CONTENT_TYPE)

    async def slow(self, codec, model: str):
        encoder = codec.StreamEncoder()
        try:
            for e in [hub.ResponseStart("r-slow", model), hub.BlockStart(0, "text")]:
                yield encoder.encode(e)
            for n in range(2000):
                await asyncio.sleep(0.005)
                yield encoder.encode(hub.Delta(0, f"w{n} "))
        finally:
            self.disconnected.append(model)

    def script(self, model: str, req: hub.Request, dialect: str) -> list[hub.Event]:
        last = req.messages[-1]
        out: list[hub.Event] = [hub.ResponseStart(f"resp-{len(self.requests)}", model)]
        finish = "end_turn"
        if model in ("tools", "loop") and (last.role == "user" or model == "loop"):
            calls = json.loads(last.text) if model == "tools" else [{"name": "ping", "arguments": {}}]
            for n, call in enumerate(calls):
                out += [
                    hub.BlockStart(n, "tool_call", f"call_{len(self.requests)}_{n}", call["name"]),
                    hub.Delta(n, json.dumps(call["arguments"])),
                    hub.BlockStop(n),
                ]
            finish = "tool_use"
        elif model == "tools":  # tool results came back: report what the model saw
            results = []
            for m in req.messages:
                for p in m.parts:
                    if isinstance(p, hub.ToolResultPart):
                        text = "".join(c.text for c in p.content if isinstance(c, hub.TextPart))
                        results.append(f"{p.tool_call_id}:{'ERR' if p.is_error else 'OK'}:{text}")
            out += _text(0, " | ".join(results))
        elif model == "think":
            sig = signature(dialect, len(req.messages))
            out += [hub.BlockStart(0, "thinking"), hub.Delta(0, "hmm"), hub.BlockStop(0, fidelity=sig)]
            out += _text(1, f"turn {sum(m.role == 'user' for m in req.messages)}")
        elif model == "error-mid":
            out += [hub.BlockStart(0, "text"), hub.Delta(0, "partial "), hub.Delta(0, "words")]
            out += [hub.Error("the model fell over", "overloaded", code="overloaded_error")]
            out.append(hub.ResponseEnd())
            return out
        elif model == "bad-args":
            out += [hub.BlockStart(0, "tool_call", "call_x", "f"), hub.Delta(0, '{"a": '), hub.BlockStop(0)]
            finish = "tool_use"
        else:  # echo
            users = [m for m in req.messages if m.role == "user"]
            out += _text(0, f"echo:{users[-1].text if users else ''}|{len(users)}")
        out += [hub.Usage(input_tokens=10, output_tokens=3), hub.Finish(finish), hub.ResponseEnd()]
        return out


def signature(dialect: str, n: int) -> dict:
    """Opaque thinking state as the dialect's own vendor sends it (others carry Anthropic's)."""
    if dialect == "gemini":
        return {"gemini": {"thoughtSignature": f"sig-{n}"}}
    if dialect == "openai-responses":
        return {"openai-responses": {"encrypted_content": f"sig-{n}", "id": f"rs_{n}"}}
    return {"anthropic-messages": {"signature": f"sig-{n}"}}


def _text(index: int, text: str) -> list[hub.Event]:
    return [hub.BlockStart(index, "text"), hub.Delta(index, text), hub.BlockStop(index)]


async def _aiter(parts):
    for p in parts:
        if p:
            yield p


@pytest.fixture(scope="module")
def fake():
    model = FakeModel()
    with serving(model) as server:
        server.model = model
        yield server


@pytest.fixture
def fresh(fake):
    fake.model.requests.clear()
    fake.model.attempts.clear()
    return fake


DIALECTS = ["openai-chat", "anthropic-messages", "llm-stream", "gemini", "openai-responses", "mmsp"]


def make(server, dialect="openai-chat", **kw) -> Client:
    return Client(server.url + ("/mmsp" if dialect == "mmsp" else ""), dialect=dialect, **kw)


# --------------------------------------------------------------------------- tools: schemas


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


def test_schema_from_type_hints_and_docstring():
    @tool
    def weather(
        city: str,
        days: int,
        unit: Unit = Unit.C,
        tags: list[str] | None = None,
        mode: Literal["fast", "exact"] = "fast",
        ratio: float = 1.0,
        raw: bool = False,
        extra: dict | None = None,
        note: Optional[str] = None,  # noqa: UP045 - the typing spelling is what is tested
    ) -> str:
        """Forecast for a city.

        Longer text that is not the description.

        Args:
            city: The city name.
            days: How many days
                ahead (1-7).
        """
        return ""

    assert weather.name == "weather" and weather.description == "Forecast for a city."
    p = weather.parameters
    assert p["required"] == ["city", "days"]
    props = p["properties"]
    assert props["city"] == {"type": "string", "description": "The city name."}
    assert props["days"] == {"type": "integer", "description": "How many days ahead (1-7)."}
    assert props["unit"] == {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
    assert props["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"], "default": "fast"}
    assert props["ratio"]["type"] == "number" and props["raw"]["type"] == "boolean"
    assert props["extra"] == {"type": ["object", "null"]}
    assert props["note"] == {"type": ["string", "null"]}
    assert weather.bind({"city": "x", "unit": "fahrenheit"})["unit"] is Unit.F
    assert not weather.side_effects


def test_explicit_schema_side_effects_and_registry():
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

    @tool(side_effects=True, schema=schema, name="rm")
    def remove(path):
        return f"removed {path}"

    assert remove.name == "rm" and remove.parameters == schema and remove.side_effects
    assert remove(path="a") == "removed a"
    registry = ToolRegistry()

    @registry.register
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    registry.register(remove)
    assert [t.name for t in registry] == ["add", "rm"] and "add" in registry
    with pytest.raises(TypeError):
        schema_for(complex)


# --------------------------------------------------------------------------- tools: the loop

RAN: list[tuple[str, dict]] = []


@tool
def get_weather(city: str) -> dict:
    """Current weather for a city."""
    RAN.append(("get_weather", {"city": city}))
    return {"city": city, "temp": 21}


@tool(side_effects=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    RAN.append(("delete_file", {"path": path}))
    return f"deleted {path}"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


def launch_missiles() -> str:  # exists here, but never declared to the model
    RAN.append(("launch_missiles", {}))
    return "launched"


def script(*calls: tuple[str, dict]) -> str:
    return json.dumps([{"name": n, "arguments": a} for n, a in calls])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_tool_loop_runs_declared_tools_and_refuses_the_rest(fresh, dialect):
    RAN.clear()
    asked: list[str] = []

    def confirm(call) -> bool:
        asked.append(call.arguments["path"])
        return call.arguments["path"] == "tmp.txt"

    prompt = script(
        ("get_weather", {"city": "Paris"}),
        ("delete_file", {"path": "tmp.txt"}),
        ("delete_file", {"path": "important.txt"}),
        ("launch_missiles", {}),
        ("explode", {"reason": "kaboom"}),
    )
    client = make(fresh, dialect)
    client.tools.register(launch_missiles)  # known to the client, but not declared in this request
    run = client.run_tools("tools", prompt, tools=[get_weather, delete_file, explode], confirm=confirm)
    # only the declared, confirmed calls ran; the undeclared one never did
    assert RAN == [("get_weather", {"city": "Paris"}), ("delete_file", {"path": "tmp.txt"})]
    assert asked == ["tmp.txt", "important.txt"]
    assert run.rounds == 2 and run.completion.finish == "end_turn"
    results = dict(r.split(":", 1) for r in run.text.replace("call_", "").split(" | "))
    outcome = {k: v.split(":", 1) for k, v in results.items()}
    ids = [f"1_{n}" for n in range(5)]
    assert outcome[ids[0]][0] == "OK" and json.loads(outcome[ids[0]][1]) == {"city": "Paris", "temp": 21}
    assert outcome[ids[1]] == ["OK", "deleted tmp.txt"]
    # Responses' function_call_output has no error flag: there the text alone says so
    err = "OK" if dialect == "openai-responses" else "ERR"
    assert outcome[ids[2]][0] == err and "the user declined" in outcome[ids[2]][1]
    assert outcome[ids[3]][0] == err and "not declared" in outcome[ids[3]][1]
    assert outcome[ids[4]][0] == err and "ValueError: kaboom" in outcome[ids[4]][1]
    assert all(outcome[i][1].startswith("error: ") for i in ids[2:])
    # the second request carried the assistant's calls, then one result per call id
    second = fresh.model.requests[1][1]
    assert {t.name for t in second.tools} == {"get_weather", "delete_file", "explode"}
    calls = [p for m in second.messages for p in m.parts if isinstance(p, hub.ToolCallPart)]
    assert [c.id for c in calls] == [f"call_{i}" for i in ids]
    roles = [m.role for m in run.transcript]
    assert roles[:2] == ["user", "assistant"] and roles[-1] == "assistant" and roles.count("tool") == 5


def test_side_effect_tool_without_confirm_callback_is_refused(fresh):
    RAN.clear()
    run = make(fresh).run_tools("tools", script(("delete_file", {"path": "x"})), tools=[delete_file])
    assert RAN == [] and "ERR" in run.text and "no confirmation callback" in run.text


def test_tool_loop_stops_after_max_rounds(fresh):
    @tool
    def ping() -> str:
        return "pong"

    with pytest.raises(ToolLoopError) as info:
        make(fresh).run_tools("loop", "go", tools=[ping], max_rounds=3)
    assert len(fresh.model.requests) == 3 and info.value.partial.rounds == 3


def test_client_registry_supplies_tools(fresh):
    RAN.clear()
    c = make(fresh, "anthropic-messages")
    c.tools.register(get_weather)
    run = c.run_tools("tools", script(("get_weather", {"city": "Oslo"})), tool_choice="get_weather")
    assert RAN == [("get_weather", {"city": "Oslo"})] and ":OK:" in run.text
    choices = [r.tool_choice for _, r in fresh.model.requests]
    assert choices == [hub.ToolChoice("tool", "get_weather"), hub.ToolChoice("auto")]  # forced once, then auto


def test_async_tool_loop_with_async_tools_and_confirm(fresh):
    RAN.clear()

    @tool(side_effects=True)
    async def send_mail(to: str) -> str:
        await asyncio.sleep(0)
        RAN.append(("send_mail", {"to": to}))
        return "sent"

    async def confirm(call) -> bool:
        return call.arguments["to"] == "ok@example.com"

    async def main():
        async with AsyncClient(fresh.url, dialect="llm-stream") as c:
            prompt = script(("send_mail", {"to": "ok@example.com"}), ("send_mail", {"to": "boss@example.com"}))
            return await c.run_tools("tools", prompt, tools=[send_mail], confirm=confirm)

    run = asyncio.run(main())
    assert RAN == [("send_mail", {"to": "ok@example.com"})]
    assert ":OK:sent" in run.text and "ERR" in run.text


# --------------------------------------------------------------------------- conversations


@pytest.mark.parametrize("dialect", DIALECTS)
def test_conversation_records_the_turn_before_stop_and_replays_thinking(fresh, dialect):
    conv = make(fresh, dialect).conversation("think", system="be brief")
    seen_at_stop = None
    with conv.send("first") as s:
        for event in s:
            if event.event_type == "stop":
                seen_at_stop = [m.role for m in conv.history]
    assert seen_at_stop == ["user", "assistant"]
    assert conv.complete("second").text == "turn 2"
    sent = fresh.model.requests[-1][1]
    assert [m.role for m in sent.messages] == ["system", "user", "assistant", "user"]
    thinking = [p for p in sent.messages[2].parts if isinstance(p, hub.ThinkingPart)]
    assert thinking and thinking[0].fidelity == signature(dialect, 2)  # replayed intact
    assert len(conv.history) == 4
    conv.clear()
    assert conv.history == []


def test_conversation_rejects_a_concurrent_call(fresh):
    conv = make(fresh).conversation("echo")
    first = conv.send("one")
    with pytest.raises(ConversationBusyError):
        conv.send("two")
    assert first.until_done().text == "echo:one|1"
    assert conv.complete("two").text == "echo:two|2"  # free again once the first ended


def test_aborted_or_failed_call_records_nothing(fresh):
    c = make(fresh, max_retries=0)
    conv = c.conversation("echo")
    conv.complete("kept")
    before = conv.history
    with conv.send("aborted") as s:
        next(iter(s))
        s.abort()
    assert conv.history == before
    slow = c.conversation("slow")
    with slow.send("x") as s:
        next(s)
        next(s)
    assert slow.history == []
    failing = c.conversation("error-mid")
    with pytest.raises(UpstreamError):
        failing.complete("boom")
    assert failing.history == []
    assert failing.send("again") is not None  # the failure released the conversation


def test_async_conversation(fresh):
    async def main():
        async with AsyncClient(fresh.url, dialect="anthropic-messages") as c:
            conv = c.conversation("echo")
            stream = conv.send("a")
            with pytest.raises(ConversationBusyError):
                conv.send("b")
            got = []
            async with stream as s:
                async for event in s:
                    if event.event_type == "stop":
                        got.append(len(conv.history))
            await conv.complete("b")
            return got, [m.text for m in conv.history]

    at_stop, texts = asyncio.run(main())
    assert at_stop == [2] and texts == ["a", "echo:a|1", "b", "echo:b|2"]


# --------------------------------------------------------------------------- cancellation


def test_closing_a_stream_closes_the_connection(fresh):
    fresh.model.disconnected.clear()
    s = make(fresh).stream("slow", "go")
    events = [next(s) for _ in range(3)]
    assert all(e.event_type == "delta" for e in events)
    t = time.monotonic()
    s.close()
    assert wait_for(lambda: "slow" in fresh.model.disconnected, timeout=3)
    assert time.monotonic() - t < 2  # at once, not after 2000 tokens
    assert list(s) == []  # nothing more after close


def test_nothing_is_yielded_after_close_even_if_already_decoded(fresh):
    s = make(fresh, "anthropic-messages").stream("think+whole", "hi")
    first = next(s)
    assert first.event_type == "delta" and s._buffer  # more events were waiting
    s.abort()
    assert list(s) == [] and s.completion is None


def test_async_cancel_closes_the_connection(fresh):
    fresh.model.disconnected.clear()

    async def main():
        async with AsyncClient(fresh.url) as c:
            s = c.stream("slow", "go")
            n = 0
            async for _ in s:
                n += 1
                if n == 3:
                    await s.abort()
            return n

    assert asyncio.run(main()) == 3
    assert wait_for(lambda: "slow" in fresh.model.disconnected, timeout=3)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("dialect", DIALECTS)
def test_http_errors_before_the_stream(fresh, dialect):
    c = make(fresh, dialect, max_retries=0)
    for status, kind in ((400, "invalid_request"), (401, "authentication"), (404, "not_found")):
        with pytest.raises(UpstreamError) as info:
            c.complete(f"status-{status}", "hi")
        assert info.value.status == status and info.value.type == kind
        want = dialects.get(dialect).encode_error(hub.Error("scripted failure", kind))[1]
        assert info.value.body == want  # the dialect's own error shape


@pytest.mark.parametrize("dialect", DIALECTS)
def test_mid_stream_error_is_raised_with_the_partial_message(fresh, dialect):
    events = []
    with pytest.raises(UpstreamError) as info:
        for event in make(fresh, dialect).stream("error-mid", "hi"):
            events.append(event)
    assert info.value.type == "overloaded"
    assert isinstance(info.value.partial, Completion) and info.value.partial.text == "partial words"
    assert grammar_violations(events) == ["end: 0 stop events"]  # an exception, never a stop


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncated_stream_raises_incomplete(fresh, dialect):
    with pytest.raises(IncompleteStreamError) as info:
        make(fresh, dialect, max_retries=2).complete("cut", "hi")
    assert info.value.partial is not None
    assert fresh.model.attempts["cut"] == 1  # no retry after the first byte


def test_protocol_break_raises_protocol_error(fresh):
    events = []
    with pytest.raises(ProtocolError) as info:
        for event in make(fresh, "llm-stream").stream("seq-gap", "hi"):
            events.append(event)
    assert info.value.partial.text == "echo:hi|1" and not any(e.event_type == "stop" for e in events)


def test_unparseable_tool_arguments_raise(fresh):
    with pytest.raises(ToolCallArgumentParseError) as info:
        make(fresh, "anthropic-messages").complete("bad-args", "hi")
    assert info.value.name == "f" and info.value.partial is not None


# --------------------------------------------------------------------------- retries


def test_retries_before_the_first_byte(fresh):
    assert make(fresh, max_retries=2).complete("flaky-2", "hi").text == "echo:hi|1"
    assert fresh.model.attempts["flaky-2"] == 3
    with pytest.raises(UpstreamError) as info:
        make(fresh, max_retries=1).complete("flaky-5", "hi")
    assert info.value.status == 503 and fresh.model.attempts["flaky-5"] == 2
    with pytest.raises(UpstreamError):
        make(fresh, max_retries=3).complete("status-400", "hi")
    assert fresh.model.attempts["status-400"] == 1  # a 4xx other than 408/429 is not retried


def test_connect_errors_are_retried_then_raised():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here
    t = time.monotonic()
    with pytest.raises(TransportError):
        Client(f"http://127.0.0.1:{port}", max_retries=2).complete("m", "hi")
    assert 0.3 <= time.monotonic() - t < 5  # two backoffs (0.1 s, 0.2 s) happened


# --------------------------------------------------------------------------- message forms


def test_messages_in_every_form(fresh):
    image = "data:image/png;base64,iVBORw0KGgo="
    messages = [
        hub.Message("system", [hub.TextPart("sys")]),
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": image}}],
        },
        {
            "role": "assistant",
            "content_items": [
                {"type": "thinking.done", "thinking": "t", "fidelity": {"anthropic-messages": {"signature": "S"}}},
                {"type": "tool_call.done", "name": "f", "arguments": {"a": 1}, "tool_call_id": "c1"},
            ],
        },
        {"role": "user", "content_items": [{"type": "tool_result.done", "text": "42", "tool_call_id": "c1"}]},
        "and now?",
    ]
    make(fresh, "anthropic-messages").complete("echo", messages, max_tokens=50, temperature=0.5, stop="END")
    req = fresh.model.requests[-1][1]
    assert req.system == "sys" and req.max_tokens == 50 and req.temperature == 0.5 and req.stop == ["END"]
    parts = [p for m in req.messages for p in m.parts]
    kinds = [type(p).__name__ for p in parts]
    assert kinds == ["TextPart", "TextPart", "ImagePart", "ThinkingPart", "ToolCallPart", "ToolResultPart", "TextPart"]
    assert parts[2].data == "iVBORw0KGgo=" and parts[2].media_type == "image/png"
    assert parts[3].fidelity == {"anthropic-messages": {"signature": "S"}}
    assert (parts[4].id, json.loads(parts[4].arguments)) == ("c1", {"a": 1}) and parts[5].tool_call_id == "c1"
    with pytest.raises(TypeError):
        make(fresh).stream("echo", "hi", bogus=1)


def test_stream_to_dict_and_grammar(fresh):
    with make(fresh, "llm-stream").stream("think", "hi") as s:
        dicts = [e.to_dict() for e in s]
    assert grammar_violations(dicts) == []
    items = [d["content_items"][0] for d in dicts[:-1]]
    assert [i["type"] for i in items] == [
        "thinking.delta",
        "thinking.delta",
        "thinking.done",
        "text.delta",
        "text.done",
    ]
    signature = {"anthropic-messages": {"signature": "sig-1"}}
    assert items[1]["fidelity"] == items[2]["fidelity"] == signature  # the signature arrives with the block's end
    assert dicts[-1]["event_type"] == "stop" and dicts[-1]["usage_metadata"]["prompt_tokens"] == 10
    assert s.completion.to_dict()["finish_reason"] == "stop" and s.completion.text == "turn 1"


# --------------------------------------------------------------------------- the twins (issue 12)
# _sync.py is generated from _async.py (scripts/unasync.py); these pin what both must do alike.


def test_sync_client_is_generated_from_the_async_one():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "unasync.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()


def test_end_callback_runs_after_the_close_even_when_closing_fails(fresh):
    seen = []
    s = make(fresh).stream("slow", "go")
    s._on_end = lambda: seen.append(s.response.is_closed)
    next(s)
    s.close()
    assert seen == [True]  # the connection was closed before the conversation was freed

    conv = make(fresh).conversation("slow")
    s = conv.send("go")
    next(s)

    def broken_close():
        raise OSError("socket gone")

    s.response.close = broken_close
    with pytest.raises(OSError):
        s.close()
    assert conv.send("again") is not None  # the failed close still freed the conversation


def test_async_end_callback_runs_after_the_close_even_when_closing_fails(fresh):
    async def main():
        async with AsyncClient(fresh.url) as c:
            seen = []
            s = c.stream("slow", "go")
            s._on_end = lambda: seen.append(s.response.is_closed)
            await s.__anext__()
            await s.aclose()
            conv = c.conversation("slow")
            s2 = conv.send("go")
            await s2.__anext__()

            async def broken_close():
                raise OSError("socket gone")

            s2.response.aclose = broken_close
            with pytest.raises(OSError):
                await s2.aclose()
            conv.send("again")  # would raise ConversationBusyError if the failed close kept it
            return seen

    assert asyncio.run(main()) == [True]


def test_an_abandoned_stream_frees_its_conversation_in_both_twins(fresh):
    import gc

    conv = make(fresh).conversation("echo")
    conv.send("dropped")  # never iterated, never closed
    gc.collect()
    assert conv.complete("kept").text.startswith("echo:kept")

    async def main():
        async with AsyncClient(fresh.url) as c:
            aconv = c.conversation("echo")
            aconv.send("dropped")
            gc.collect()
            return (await aconv.complete("kept")).text

    assert asyncio.run(main()).startswith("echo:kept")
