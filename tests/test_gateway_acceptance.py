"""The gateway refuses only what the client's vendor refuses, and names what a translation
left out (issue 22): a Claude Code 2.1 request reaches an Anthropic upstream as it came and a
Chat upstream with the x-llmbridge-dropped-fields header."""

from __future__ import annotations

import copy
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.gateway import create_app
from llmbridge.gateway.config import ConfigError, parse
from tests.conftest import CORPUS
from tests.gateway_util import serving
from tests.test_accept_requests import CLAUDE_CODE

CHAT_STREAM = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
CLAUDE_STREAM = (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes()


@pytest.fixture(scope="module")
def upstream():
    """Records each request (headers and JSON body) and answers in the path's dialect."""
    received: list[tuple[dict[str, str], dict]] = []

    async def record(request: Request, body: bytes) -> Response:
        received.append((dict(request.headers), json.loads(await request.body())))
        return Response(body, media_type="text/event-stream")

    async def chat(request: Request) -> Response:
        return await record(request, CHAT_STREAM)

    async def messages(request: Request) -> Response:
        return await record(request, CLAUDE_STREAM)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
    ]
    with serving(Starlette(routes=routes)) as server:
        server.received = received
        yield server


def gateway_config(upstream, **gateway) -> dict:
    return {
        "gateway": gateway,
        "upstreams": {
            "chat": {"format": "openai-chat", "base_url": upstream.url + "/v1"},
            "claude": {"format": "anthropic-messages", "base_url": upstream.url},
        },
        "models": [
            {
                "name": "claude-sonnet-4-5-20250929",
                "upstream": "claude",
                "upstream_model": "claude-sonnet-4-5-20250929",
            },
            {"name": "gpt", "upstream": "chat", "upstream_model": "gpt-x"},
        ],
    }


@pytest.fixture(scope="module")
def gateway(upstream):
    with serving(create_app(parse(gateway_config(upstream)))) as server:
        yield server


def post(gateway, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(gateway.url + path, json=body, headers=headers or {}, timeout=30)


def test_claude_code_request_reaches_an_anthropic_upstream_as_it_came(gateway, upstream):
    headers = {k: v for k, v in CLAUDE_CODE["headers"].items() if k != "content-type"}
    response = post(gateway, "/v1/messages", CLAUDE_CODE["body"], headers)
    assert response.status_code == 200, response.text
    assert "message_stop" in response.text
    sent_headers, sent = upstream.received[-1]
    assert sent == CLAUDE_CODE["body"] and list(sent) == list(CLAUDE_CODE["body"])
    assert sent_headers["anthropic-beta"] == CLAUDE_CODE["headers"]["anthropic-beta"]  # betas go on
    assert "x-llmbridge-dropped-fields" not in response.headers


def test_claude_code_request_to_a_chat_upstream_names_what_chat_cannot_say(gateway, upstream):
    body = {**copy.deepcopy(CLAUDE_CODE["body"]), "model": "gpt"}
    response = post(gateway, "/v1/messages", body, {"anthropic-version": "2023-06-01"})
    assert response.status_code == 200, response.text
    dropped = response.headers["x-llmbridge-dropped-fields"].split(",")
    assert {"context_management", "system.cache_control", "messages.cache_control", "tools.cache_control"} <= set(
        dropped
    )
    _, sent = upstream.received[-1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "system"]  # in order, in place
    assert len(sent["tools"]) == 24 and sent["reasoning_effort"] == "high" and sent["model"] == "gpt-x"
    assert "context_management" not in sent and "llmbridge" not in sent


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "you must provide a model"),
        ("/v1/responses", {"input": "hi"}, "you must provide a model"),
        ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, "model: Field required"),
        ("/v1/chat/completions", {"model": "", "messages": [{"role": "user", "content": "hi"}]}, "model"),
    ],
)
def test_a_missing_model_is_a_400_in_the_vendors_shape(gateway, path, body, message):
    response = post(gateway, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/messages", {"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_an_unknown_model_is_a_404(gateway, path, body):
    response = post(gateway, path, body)
    assert response.status_code == 404 and "nope" in response.text


def test_anthropic_without_max_tokens_is_refused_as_anthropic_does(gateway, upstream):
    count = len(upstream.received)
    body = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
    response = post(gateway, "/v1/messages", body, {"anthropic-version": "2023-06-01"})
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error"
    assert error["error"] == {"type": "invalid_request_error", "message": "max_tokens: Field required"}
    assert len(upstream.received) == count  # nothing went upstream


def test_anthropic_default_max_tokens_fills_it_in(upstream):
    with serving(create_app(parse(gateway_config(upstream, anthropic_default_max_tokens=1234)))) as gateway:
        body = {"model": "claude-sonnet-4-5-20250929", "messages": [{"role": "user", "content": "hi"}]}
        response = post(gateway, "/v1/messages", body)
    assert response.status_code == 200, response.text
    assert upstream.received[-1][1]["max_tokens"] == 1234


@pytest.mark.parametrize("value", [-1, "10", 1.5, True])
def test_anthropic_default_max_tokens_must_be_a_count(upstream, value):
    with pytest.raises(ConfigError, match=r"gateway\.anthropic_default_max_tokens"):
        parse(gateway_config(upstream, anthropic_default_max_tokens=value))


def test_anthropic_max_tokens_zero_is_accepted_as_anthropic_does(gateway, upstream):
    """Anthropic's max_tokens 0 fills the prompt cache and generates nothing: not a 400."""
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}
    response = post(gateway, "/v1/messages", body)
    assert response.status_code == 200, response.text
    assert upstream.received[-1][1]["max_tokens"] == 0
