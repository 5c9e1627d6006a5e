"""What the gateway sends upstream: vendor APIs reject unknown fields, so hub data a dialect has
no field for (our "llmbridge" key) is left out unless the upstream is configured to take it."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.gateway import create_app
from llmbridge.gateway.config import parse
from tests.conftest import CORPUS
from tests.gateway_util import serving

CHAT_STREAM = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def has_key(obj: object, key: str) -> bool:
    if isinstance(obj, dict):
        return key in obj or any(has_key(v, key) for v in obj.values())
    if isinstance(obj, list):
        return any(has_key(v, key) for v in obj)
    return False


@pytest.fixture(scope="module")
def upstream():
    received: list[dict] = []

    async def chat(request: Request) -> Response:
        received.append(json.loads(await request.body()))
        return Response(CHAT_STREAM, media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serving(app) as server:
        server.received = received
        yield server


@pytest.mark.parametrize("extensions", [False, True])
def test_llmbridge_key_reaches_only_upstreams_that_take_it(upstream, extensions):
    config = parse(
        {
            "upstreams": {
                "chat": {"format": "openai-chat", "base_url": upstream.url + "/v1", "extensions": extensions}
            },
            "models": [{"name": "m", "upstream": "chat", "upstream_model": "m"}],
        }
    )
    with serving(create_app(config)) as gateway:
        client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
        # A failed tool result: Chat Completions has no is_error flag, so it needs the extension key.
        message = client.messages.create(
            model="m",
            max_tokens=10,
            messages=[
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "boom"}],
                },
            ],
        )
    assert message.content[0].text == "ok"
    body = upstream.received[-1]
    assert body["messages"][-1]["role"] == "tool" and body["messages"][-1]["tool_call_id"] == "t1"
    assert has_key(body, "llmbridge") is extensions


def test_extensions_must_be_a_boolean():
    from llmbridge.gateway.config import ConfigError

    with pytest.raises(ConfigError, match=r"upstreams\.chat\.extensions"):
        parse(
            {
                "upstreams": {"chat": {"format": "openai-chat", "base_url": "http://x", "extensions": "yes"}},
                "models": [],
            }
        )


@pytest.fixture(scope="module")
def anthropic_upstream():
    body = (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes()

    async def messages(request: Request) -> Response:
        return Response(body, media_type="text/event-stream")

    with serving(Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])) as server:
        yield server


@pytest.mark.parametrize("include_usage", [None, False, True])
def test_chat_usage_chunk_always_last(anthropic_upstream, include_usage):
    """The gateway spec: the last chunk before [DONE] carries usage; with
    stream_options.include_usage its choices are [] (OpenAI's shape), without it the chunk keeps
    one choice with an empty delta (clients that never asked index choices[0] on every chunk)."""
    config = parse(
        {
            "upstreams": {"claude": {"format": "anthropic-messages", "base_url": anthropic_upstream.url}},
            "models": [{"name": "m", "upstream": "claude", "upstream_model": "claude-x"}],
        }
    )
    extra = {} if include_usage is None else {"stream_options": {"include_usage": include_usage}}
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    with serving(create_app(config)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
        chunks = list(client.chat.completions.create(stream=True, **request))
        with client.chat.completions.stream(**request) as stream:  # the SDK's stream helper
            helper_chunks = [e.chunk for e in stream if e.type == "chunk"]
            final = stream.get_final_completion()
    assert all(c.choices for c in chunks[:-1])  # every chunk but the last has a choice
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.usage is not None and last.usage.prompt_tokens > 0 and last.usage.completion_tokens > 0
    if include_usage:
        assert last.choices == []
    else:
        assert len(last.choices) == 1 and last.choices[0].index == 0
        assert last.choices[0].delta.content is None and last.choices[0].delta.tool_calls is None
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "2"
    # the helper reads the same stream: the text once, the finish reason kept, the usage
    assert len(helper_chunks) == len(chunks)
    assert final.choices[0].message.content == "2"
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.total_tokens == last.usage.total_tokens
