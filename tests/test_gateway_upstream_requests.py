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
    config = parse({
        "upstreams": {"chat": {"format": "openai-chat", "base_url": upstream.url + "/v1", "extensions": extensions}},
        "models": [{"name": "m", "upstream": "chat", "upstream_model": "m"}],
    })
    with serving(create_app(config)) as gateway:
        client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
        # A failed tool result: Chat Completions has no is_error flag, so it needs the extension key.
        message = client.messages.create(
            model="m", max_tokens=10,
            messages=[
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                              "content": "boom"}]},
            ],
        )
    assert message.content[0].text == "ok"
    body = upstream.received[-1]
    assert body["messages"][-1]["role"] == "tool" and body["messages"][-1]["tool_call_id"] == "t1"
    assert has_key(body, "llmbridge") is extensions


def test_extensions_must_be_a_boolean():
    from llmbridge.gateway.config import ConfigError

    with pytest.raises(ConfigError, match=r"upstreams\.chat\.extensions"):
        parse({"upstreams": {"chat": {"format": "openai-chat", "base_url": "http://x", "extensions": "yes"}},
               "models": []})


@pytest.fixture(scope="module")
def anthropic_upstream():
    body = (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes()

    async def messages(request: Request) -> Response:
        return Response(body, media_type="text/event-stream")

    with serving(Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])) as server:
        yield server


@pytest.mark.parametrize("include_usage", [None, False, True])
def test_chat_usage_chunk_only_when_the_client_asks(anthropic_upstream, include_usage):
    config = parse({
        "upstreams": {"claude": {"format": "anthropic-messages", "base_url": anthropic_upstream.url}},
        "models": [{"name": "m", "upstream": "claude", "upstream_model": "claude-x"}],
    })
    extra = {} if include_usage is None else {"stream_options": {"include_usage": include_usage}}
    with serving(create_app(config)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
        chunks = list(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, **extra))
    usage_chunks = [c for c in chunks if not c.choices]
    assert all(c.choices for c in chunks[:-1])  # every chunk but a final usage chunk has a choice
    if include_usage:
        assert len(usage_chunks) == 1 and chunks[-1].usage.prompt_tokens > 0
    else:
        assert usage_chunks == [] and all(c.usage is None for c in chunks)
