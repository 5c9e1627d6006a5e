"""The embedded model behind the gateway, read by the official openai and anthropic SDKs."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from llmbridge.gateway import create_app
from tests.conftest import require_local_model
from tests.gateway_util import serving

require_local_model()

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}


def valid_weather(arguments: dict) -> bool:
    return (
        set(arguments) == {"city", "unit"}
        and isinstance(arguments["city"], str)
        and len(arguments["city"]) <= 24
        and arguments["unit"] in ("celsius", "fahrenheit")
    )


@pytest.fixture(scope="module")
def gateway():
    with serving(create_app()) as server:
        yield server


def test_openai_sdk_streams_text(gateway):
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 8


def test_openai_sdk_forced_tool_call(gateway):
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    with client.chat.completions.stream(
        model="local",
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=48,
    ) as stream:
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id
    assert valid_weather(json.loads(call.function.arguments))


def test_anthropic_sdk_streams_text(gateway):
    client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    with client.messages.stream(
        model="local", max_tokens=8, messages=[{"role": "user", "content": "Say hello."}]
    ) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    assert len(texts) >= 3 and "".join(texts) == message.content[0].text
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 8


def test_anthropic_sdk_forced_tool_call(gateway):
    client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    with client.messages.stream(
        model="local",
        max_tokens=48,
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "Current weather", "input_schema": WEATHER_SCHEMA}],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.id
    assert valid_weather(block.input)
