"""The embedded model upstream, against the real SmolLM2-135M GGUF (greedy, short answers).

The model's text differs from machine to machine (the CPU's instruction set changes
llama.cpp's arithmetic), so these tests assert properties — determinism on this machine,
agreement with llama-cpp-python called directly here, valid events, schema-valid tool calls —
and never a particular answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from llmbridge import hub
from llmbridge.errors import UpstreamError
from tests.conftest import require_local_model

require_local_model()

from llmbridge.local import LocalUpstream  # noqa: E402  (after the skip: needs the local extra)
from llmbridge.local.chat import ChatTemplate  # noqa: E402
from llmbridge.local.upstream import DEFAULT_REPEAT_PENALTY  # noqa: E402

WEATHER = hub.Tool(
    "get_weather",
    "Get the current weather in a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
)
EMAIL = hub.Tool(
    "send_email",
    "Send an email",
    {
        "type": "object",
        "properties": {"to": {"type": "string", "maxLength": 30}, "subject": {"type": "string", "maxLength": 30}},
        "required": ["to", "subject"],
    },
)


def ask(text: str, **fields: Any) -> hub.Request:
    return hub.Request(model="local", messages=[hub.Message("user", [hub.TextPart(text)])], **fields)


def check(value: Any, schema: dict[str, Any], path: str = "$") -> None:
    """A small JSON-schema check (the keywords these tests use); raises AssertionError."""
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "boolean": bool}
    if kind:
        assert isinstance(value, types[kind]) and not (kind in ("integer", "number") and isinstance(value, bool)), (
            f"{path}: {value!r} is not {kind}"
        )
    if "enum" in schema:
        assert value in schema["enum"], f"{path}: {value!r} not in {schema['enum']}"
    if kind == "string" and "maxLength" in schema:
        assert len(value) <= schema["maxLength"], f"{path}: longer than {schema['maxLength']}"
    if kind == "object":
        for name in schema.get("required", []):
            assert name in value, f"{path}: missing {name}"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                check(item, properties[name], f"{path}.{name}")
            else:
                assert schema.get("additionalProperties", True) is not False, f"{path}: unexpected {name}"


@pytest.fixture(scope="module")
def upstream():
    up = LocalUpstream()
    yield up
    asyncio.run(up.aclose())


async def collect(up: LocalUpstream, request: hub.Request) -> tuple[list[hub.Event], hub.Response]:
    events = [e async for e in up.stream(request)]
    assert hub.validate(events) == []
    return events, hub.assemble(events)


# --------------------------------------------------------------------------- no model needed


def test_tool_history_renders_as_text():
    request = hub.Request(
        messages=[
            hub.Message("system", [hub.TextPart("Be brief.")]),
            hub.Message("user", [hub.TextPart("Weather in Oslo?")]),
            hub.Message("assistant", [hub.ToolCallPart("call_1", "get_weather", '{"city": "Oslo"}')]),
            hub.Message("tool", [hub.ToolResultPart("call_1", [hub.TextPart("-3 C")])]),
        ],
        tools=[WEATHER],
    )
    prompt = ChatTemplate().render(request, tools=[WEATHER])
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nYou can call functions.")
    assert '{"name": "get_weather", "description": "Get the current weather in a city"' in prompt
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}' in prompt
    assert "<|im_start|>user\n<tool_response>\n-3 C\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


# --------------------------------------------------------------------------- the model


async def test_greedy_stream_is_deterministic_and_matches_llama_cpp(upstream):
    request = ask("Say hello in Japanese.", max_tokens=16)
    events, first = await collect(upstream, request)
    _, second = await collect(upstream, request)
    text = first.blocks[0].text
    assert text and text == second.blocks[0].text
    deltas = [e for e in events if type(e) is hub.Delta]
    assert len(deltas) >= 4
    assert not text.endswith("\ufffd")  # an incomplete last character is dropped, never shown
    kinds = [type(e) for e in events]
    assert kinds[:2] == [hub.ResponseStart, hub.BlockStart] and kinds[-3:] == [hub.Usage, hub.Finish, hub.ResponseEnd]
    assert events[0].model == "local"
    # The same prompt straight through llama-cpp-python gives the same tokens.
    engine = upstream._engine
    prompt = upstream._template.render(
        request,
    )
    direct = engine.llm.create_completion(
        engine.tokenize(prompt), max_tokens=16, temperature=0.0, repeat_penalty=DEFAULT_REPEAT_PENALTY
    )
    direct_text, direct_tokens = direct["choices"][0]["text"], direct["usage"]["completion_tokens"]
    assert first.usage.input_tokens == direct["usage"]["prompt_tokens"]
    assert direct_text.startswith(text)
    if direct_tokens > 16:
        # llama-cpp-python generates past max_tokens to finish a character cut in half; we stop
        # at max_tokens and drop the half character: at most that one character differs.
        assert first.usage.output_tokens == 16 and len(direct_text) - len(text) == 1
    else:
        assert first.usage.output_tokens == direct_tokens and direct_text == text


async def test_openai_style_penalties_replace_the_default_repeat_penalty(upstream):
    _, response = await collect(
        upstream, ask("Count from one to ten.", max_tokens=12, frequency_penalty=0.5, presence_penalty=0.2)
    )
    assert response.error is None and response.blocks[0].text
    assert response.finish.reason in ("max_tokens", "end_turn")


async def test_sampling_with_a_seed_repeats(upstream):
    request = ask("Name a fruit.", max_tokens=8, temperature=0.9, top_p=0.9, seed=7)
    _, first = await collect(upstream, request)
    _, second = await collect(upstream, request)
    assert first.blocks[0].text == second.blocks[0].text


async def test_max_tokens_finish_and_usage(upstream):
    _, response = await collect(upstream, ask("Write a long story about a dragon.", max_tokens=9))
    assert response.finish.reason == "max_tokens" and response.finish.raw == "length"
    assert response.usage.output_tokens == 9
    prompt = upstream._template.render(
        ask("Write a long story about a dragon."),
    )
    assert response.usage.input_tokens == len(upstream._engine.tokenize(prompt))
    assert response.usage.total_tokens == response.usage.input_tokens + 9


async def test_stop_sequence_cuts_the_text(upstream):
    request = ask("Count from 1 to 10, separated by commas.", max_tokens=24)
    _, free = await collect(upstream, request)
    full = free.blocks[0].text
    # A stop sequence taken from this machine's own greedy answer: its third visible character.
    visible = [i for i, c in enumerate(full) if not c.isspace()]
    assert len(visible) >= 3, full
    stop = full[visible[2]]
    request.stop = [stop]
    _, stopped = await collect(upstream, request)
    text = stopped.blocks[0].text if stopped.blocks else ""
    assert stopped.finish.reason == "stop_sequence" and stopped.finish.stop_sequence == stop
    assert text == full[: full.index(stop)]


async def test_forced_tool_call_is_valid_against_its_schema(upstream):
    request = ask("What's the weather in Paris?", tools=[EMAIL, WEATHER], max_tokens=48)
    request.tool_choice = hub.ToolChoice("tool", "get_weather")
    events, response = await collect(upstream, request)
    (block,) = response.blocks
    assert block.kind == "tool_call" and block.name == "get_weather" and block.id.startswith("call_")
    assert sum(type(e) is hub.Delta for e in events) >= 3  # the arguments stream
    check(json.loads(block.text), WEATHER.parameters)
    assert response.finish.reason == "tool_use"


async def test_auto_tool_choice_answers_text_or_a_valid_call(upstream):
    # Whether the model calls the tool is its own (machine-dependent) choice; what it sends is not.
    for prompt in ("What's the weather in Rome?", "Call get_weather for Tokyo in celsius."):
        _, response = await collect(upstream, ask(prompt, tools=[WEATHER], max_tokens=40))
        kinds = [b.kind for b in response.blocks]
        assert kinds in (["text"], ["tool_call"], ["text", "tool_call"]), kinds
        if kinds[-1] == "tool_call":
            block = response.blocks[-1]
            assert block.name == "get_weather" and block.id.startswith("call_")
            check(json.loads(block.text), WEATHER.parameters)
            assert response.finish.reason == "tool_use"
        else:
            assert response.finish.reason in ("end_turn", "max_tokens")


async def test_required_tool_choice_picks_a_tool_by_grammar(upstream):
    request = ask("Email bob@example.com that lunch is at noon.", tools=[WEATHER, EMAIL], max_tokens=64)
    request.tool_choice = hub.ToolChoice("required")
    _, response = await collect(upstream, request)
    (block,) = response.blocks
    tool = {"get_weather": WEATHER, "send_email": EMAIL}[block.name]
    check(json.loads(block.text), tool.parameters)
    assert response.finish.reason == "tool_use"


async def test_json_schema_response_format(upstream):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    request = ask("Invent a person.", max_tokens=64, response_format={"type": "json_schema", "schema": schema})
    _, response = await collect(upstream, request)
    check(json.loads(response.blocks[0].text), schema)
    assert response.finish.reason == "end_turn"


async def test_requests_the_model_cannot_serve_are_refused_before_streaming(upstream):
    bad = [
        ask("hi", n=2),
        ask("hi", tools=[WEATHER], tool_choice=hub.ToolChoice("tool", "no_such_tool")),
        hub.Request(messages=[hub.Message("user", [hub.ImagePart("image/png", "iVBORw0KGgo=")])]),
        ask("hi " * 3000),
    ]
    for request in bad:
        with pytest.raises(UpstreamError) as info:
            await anext(upstream.stream(request))
        assert info.value.status == 400 and info.value.type == "invalid_request"


async def wait_idle(upstream: LocalUpstream) -> None:
    engine = upstream._engine
    started = time.monotonic()
    while engine._running is not None:
        assert time.monotonic() - started < 2, "the worker kept generating after the client left"
        await asyncio.sleep(0.005)


async def test_closing_the_stream_frees_the_model_at_once(upstream):
    stream = upstream.stream(ask("Write a long story about a dragon.", max_tokens=400))
    deltas = 0
    async for event in stream:
        deltas += type(event) is hub.Delta
        if deltas == 3:
            break
    await stream.aclose()
    await wait_idle(upstream)
    _, response = await collect(upstream, ask("Say hi.", max_tokens=4))
    assert response.usage.output_tokens <= 4


async def test_cancelling_the_consumer_task_frees_the_model(upstream):
    seen = asyncio.Event()

    async def consume() -> None:
        async for event in upstream.stream(ask("Write a long story about a dragon.", max_tokens=400)):
            if type(event) is hub.Delta:
                seen.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_idle(upstream)


async def test_waiting_requests_run_in_arrival_order(upstream):
    order: list[int] = []

    async def consume(number: int, stream) -> None:
        async for event in stream:
            if type(event) is hub.Delta:
                order.append(number)

    streams = [upstream.stream(ask("Say hi.", max_tokens=2)) for _ in range(3)]
    for stream in streams:  # admitted in this order
        assert type(await anext(stream)) is hub.ResponseStart
    await asyncio.gather(*(consume(n, s) for n, s in reversed(list(enumerate(streams)))))
    assert order and order == sorted(order) and set(order) == {0, 1, 2}


async def test_full_queue_answers_429_and_cancelled_waiters_leave_it():
    up = LocalUpstream(max_queue=1)
    try:
        running = up.stream(ask("Write a long story about a dragon.", max_tokens=400))
        async for event in running:
            if type(event) is hub.Delta:
                break  # generating now
        waiting = up.stream(ask("Say hi.", max_tokens=4))
        assert type(await anext(waiting)) is hub.ResponseStart  # queued
        with pytest.raises(UpstreamError) as info:
            await anext(up.stream(ask("Say hi.", max_tokens=4)))
        assert info.value.status == 429 and info.value.type == "rate_limit"
        await waiting.aclose()  # a waiter that leaves frees its place
        assert up._engine.waiting == 0
        again = up.stream(ask("Say hi.", max_tokens=4))
        assert type(await anext(again)) is hub.ResponseStart
        await running.aclose()
        rest = [e async for e in again]  # runs once the first one stopped
        assert type(rest[-1]) is hub.ResponseEnd and hub.Finish in {type(e) for e in rest}

        # Shutting down ends a running and a waiting stream with an error, never a clean end.
        running = up.stream(ask("Write a long story about a dragon.", max_tokens=400))
        async for event in running:
            if type(event) is hub.Delta:
                break
        waiting = up.stream(ask("Say hi.", max_tokens=4))
        await anext(waiting)
        await up.aclose()
        for stream in (running, waiting):
            tail = [type(e) for e in [e async for e in stream][-2:]]
            assert tail == [hub.Error, hub.ResponseEnd]
        with pytest.raises(UpstreamError) as info:
            await anext(up.stream(ask("Say hi.")))
        assert info.value.status == 503
    finally:
        await up.aclose()
