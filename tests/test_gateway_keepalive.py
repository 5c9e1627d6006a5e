"""Keep-alives every client survives: an upstream silent for several keep-alive intervals,
read through the gateway by each dialect's official SDK (and the llm-stream client), ends
with the full text.  Each stream is both relayed (same dialect upstream) and translated.

Before: the gateway sent ``: keep-alive`` on the Gemini endpoint, and google-genai, which
reads every non-empty line not starting with ``data: `` as JSON, died on it.
"""

from __future__ import annotations

import asyncio

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as genai_types

import llmbridge
from llmbridge.gateway._streaming import KEEPALIVE_BYTES
from tests.gateway_util import TEXT_CAPTURES, capture_text, slow_gateway

KEEPALIVE = 0.15
STALL = 0.8  # seconds of upstream silence after the first chunk: five keep-alive intervals
SOURCES = TEXT_CAPTURES
HI = [{"role": "user", "content": "hi"}]
HTTP = httpx.Client(timeout=30)
HTTP2 = httpx2.Client(timeout=30)
pytestmark = pytest.mark.usefixtures("no_collector_pause")  # (keep-alives counted within a stall)


@pytest.fixture(scope="module")
def gw():
    with slow_gateway(KEEPALIVE, STALL, idle=10) as server:
        yield server


def cases(client: str) -> list[tuple[str, str]]:
    """(source dialect, gateway model): the same dialect (relayed) and one other (translated)."""
    other = "anthropic-messages" if client != "anthropic-messages" else "openai-chat"
    if client not in SOURCES:
        return [(other, f"slow-{other}"), ("gemini", "slow-gemini")]
    return [(client, f"slow-{client}"), (other, f"slow-{other}")]


def raw_body(gw, path: str, body: dict) -> bytes:
    return HTTP.post(gw.url + path, json=body).content


@pytest.mark.parametrize(("source", "model"), cases("openai-chat"))
def test_openai_chat_sdk(gw, source, model):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model=model, messages=HI, stream=True)
        if c.choices
    )
    assert text == capture_text(source)
    with client.chat.completions.stream(model=model, messages=HI) as stream:
        assert stream.get_final_completion().choices[0].message.content == capture_text(source)
    body = raw_body(gw, "/v1/chat/completions", {"model": model, "messages": HI, "stream": True})
    assert body.count(KEEPALIVE_BYTES["openai-chat"]) >= 2


@pytest.mark.parametrize(("source", "model"), cases("openai-responses"))
def test_openai_responses_sdk(gw, source, model):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    with client.responses.stream(model=model, input="hi") as stream:
        assert stream.get_final_response().output_text == capture_text(source)


@pytest.mark.parametrize(("source", "model"), cases("anthropic-messages"))
def test_anthropic_sdk(gw, source, model):
    client = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0, http_client=HTTP2)
    with client.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
        message = stream.get_final_message()
    assert "".join(b.text for b in message.content if b.type == "text") == capture_text(source)


@pytest.mark.parametrize(("source", "model"), cases("gemini"))
def test_google_genai_sdk(gw, source, model):
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=gw.url, httpx_client=HTTP))
    text = "".join(chunk.text or "" for chunk in client.models.generate_content_stream(model=model, contents="hi"))
    assert text == capture_text(source)
    contents = {"contents": [{"parts": [{"text": "hi"}]}]}
    body = raw_body(gw, f"/v1beta/models/{model}:streamGenerateContent?alt=sse", contents)
    assert body.count(KEEPALIVE_BYTES["gemini"]) >= 2 and b": keep-alive" not in body
    # The JSON-array form (no alt=sse) stays valid JSON with keep-alives between its elements.
    array = raw_body(gw, f"/v1beta/models/{model}:streamGenerateContent", contents)
    chunks = httpx.Response(200, content=array).json()
    parts = [p for c in chunks for cand in c.get("candidates", []) for p in cand.get("content", {}).get("parts", [])]
    assert "".join(p.get("text", "") for p in parts) == capture_text(source)


@pytest.mark.parametrize(("source", "model"), cases("mmsp"))
def test_mmsp_client(gw, source, model):
    from mmsp.mmsp.client import MmspClient

    async def run() -> list[dict]:
        client = MmspClient(model, api_key="k", base_url=gw.url + "/mmsp/v1")
        user = {"role": "user", "content_items": [{"type": "text.done", "text": "Hi"}]}
        return [e async for e in client.streaming_response([user], {"max_tokens": 64})]

    events = asyncio.run(run())
    text = "".join(
        item.get("text", "")
        for e in events
        for item in (e.get("content_items") or [])
        if item.get("type") == "text.delta"
    )
    assert text == capture_text(source)


@pytest.mark.parametrize(("source", "model"), cases("llm-stream"))
def test_llm_stream_client(gw, source, model):
    with llmbridge.Client(gw.url, dialect="llm-stream") as client:
        completion = client.complete(model, "hi")
    assert completion.text == capture_text(source)
