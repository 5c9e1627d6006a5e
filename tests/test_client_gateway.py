"""The client in each of the six dialects against the gateway, whose upstreams are replay
servers of every dialect serving real corpus streams: the same answer whatever the path."""

from __future__ import annotations

import asyncio

import pytest

from llmbridge import AsyncClient, Client, dialects, replay
from llmbridge.dialects.base import decode_all
from llmbridge.errors import IncompleteStreamError, UpstreamError
from llmbridge.gateway import config, create_app
from llmbridge.unievent import grammar_violations
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, serving
from tests.readers import FINISH_CATEGORY, expected

SOURCES = {
    "claude-thinking-then-tool-use": "anthropic-messages",
    "openai-gpt4o-parallel-tool-calls": "openai-chat",
    "openai-reasoning-function-call-usage": "openai-responses",
    "gemini25pro-thoughts": "gemini",
    "claude-text-simple": "anthropic-messages",
}
CLIENTS = ["llm-stream", "openai-chat", "openai-responses", "anthropic-messages", "gemini", "mmsp"]
# Where each client dialect finds the gateway (MMSP's own wire path sits under /mmsp there).
BASE = {"mmsp": "/mmsp"}


@pytest.fixture(scope="module")
def gateway():
    with serving(replay.create_app(CORPUS, seed=3)) as upstream:
        models = {name: (dialect, name + "@chunk=2048") for name, dialect in SOURCES.items()}
        models["truncated"] = ("anthropic-messages", "claude-text-simple@truncate=800")
        models["broken"] = ("openai-chat", "hf-novita-text@status=500")
        app = create_app(config.parse(replay_config(upstream.url, models)))
        with serving(app) as gw:
            yield gw


def client(gw, dialect: str) -> Client:
    return Client(gw.url + BASE.get(dialect, ""), dialect=dialect, api_key="sk-test", max_retries=0)


def source(name: str):
    dialect = SOURCES[name]
    return expected(decode_all(dialects.get(dialect).StreamDecoder(), (CORPUS / dialect / f"{name}.sse").read_bytes()))


@pytest.mark.parametrize("dialect", CLIENTS)
def test_every_dialect_through_the_gateway(gateway, dialect):
    c = client(gateway, dialect)
    for name in SOURCES:
        want = source(name)
        with c.stream(model=name, messages=[{"role": "user", "content": "hi"}]) as s:
            events = list(s)
        assert grammar_violations(events) == [], (dialect, name)
        got = s.completion
        assert got.text == want.text, (dialect, name)
        assert got.thinking == want.thinking, (dialect, name)  # thinking survives every wire
        assert [(t.name, t.arguments) for t in got.tool_calls] == want.tool_calls, (dialect, name)
        assert all(t.tool_call_id for t in got.tool_calls)
        assert FINISH_CATEGORY[got.finish] == want.finish, (dialect, name)
        assert got.usage.output_tokens == want.output_tokens, (dialect, name)


@pytest.mark.parametrize("dialect", CLIENTS)
def test_gateway_errors_reach_the_client_typed(gateway, dialect):
    c = client(gateway, dialect)
    with pytest.raises(UpstreamError) as info:
        c.complete("no-such-model", "hi")
    assert info.value.status == 404 and info.value.body
    with pytest.raises(IncompleteStreamError) as trunc:
        c.complete("truncated", "hi")
    assert trunc.value.partial.text == "2"  # what arrived before the cut
    with pytest.raises(UpstreamError) as broken:
        c.complete("broken", "hi")
    assert broken.value.status is None or broken.value.status >= 500


def test_async_client_through_the_gateway_in_every_dialect(gateway):
    async def run(dialect: str):
        async with AsyncClient(gateway.url + BASE.get(dialect, ""), dialect=dialect) as c:
            return await c.complete("claude-thinking-then-tool-use", "hi")

    want = source("claude-thinking-then-tool-use")

    async def main():
        return await asyncio.gather(*(run(d) for d in CLIENTS))  # concurrently, one loop

    for dialect, got in zip(CLIENTS, asyncio.run(main()), strict=True):
        assert (got.text, got.thinking) == (want.text, want.thinking), dialect
        assert [(t.name, t.arguments) for t in got.tool_calls] == want.tool_calls, dialect
