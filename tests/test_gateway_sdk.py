"""The official SDKs pointed at a running gateway, whose upstreams are replay servers of
every dialect serving real corpus streams: any client dialect over any upstream dialect,
streaming (with each SDK's stream helper / accumulator) and not."""

from __future__ import annotations

import json

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from llmbridge import dialects, replay
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, serving
from tests.readers import FINISH_CATEGORY, Summary, expected

# Per upstream dialect: plain text, a tool call, thinking (where the corpus has it).
CASES = {
    "anthropic-messages": ["claude-text-simple", "claude-sonnet4-text-then-tool-use", "claude-thinking-then-tool-use"],
    "openai-chat": [
        "openai-gpt4o-text-include-usage",
        "openai-gpt4o-parallel-tool-calls",
        "deepseek-reasoner-reasoning-content",
    ],
    "openai-responses": ["openai-text", "openai-function-call", "openai-reasoning-function-call-usage"],
    "gemini": ["gemini20-text", "gemini20-parallel-function-calls", "gemini25pro-thoughts"],
}
SOURCES = [(dialect, name) for dialect, names in CASES.items() for name in names]
WHOLE = [(dialect, names[-1]) for dialect, names in CASES.items()]  # non-streaming: the richest case each
CLIENTS = ["openai-chat", "openai-responses", "anthropic-messages", "gemini"]
CARRIES_THINKING = {"anthropic-messages", "gemini"}  # client dialects whose SDK exposes thinking text
HELLO = "Say hello"
# Shared clients: a new one per call builds an SSL context, which is slow. (anthropic uses httpx2.)
HTTP = httpx.Client(timeout=30)
HTTP2 = httpx2.Client(timeout=30)


@pytest.fixture(scope="module")
def gateway():
    with serving(replay.create_app(CORPUS, seed=7)) as upstream:
        # Larger chunks than the replay default: chunking at every boundary is tested elsewhere.
        models = {name: (dialect, name + "@chunk=2048") for dialect, name in SOURCES}
        models["openai-error-insufficient-quota-failed"] = (
            "openai-responses",
            "openai-error-insufficient-quota-failed",
        )
        app = create_app(config.parse(replay_config(upstream.url, models)))
        with serving(app) as gw:
            yield gw


def source_summary(dialect: str, name: str) -> Summary:
    body = (CORPUS / dialect / f"{name}.sse").read_bytes()
    return expected(decode_all(dialects.get(dialect).StreamDecoder(), body))


# --------------------------------------------------------------------------- SDK readers


def _args(text: str | None) -> dict:
    return json.loads(text) if text and text.strip() else {}


def read_openai_chat(url: str, model: str, stream: bool) -> Summary:
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    messages = [{"role": "user", "content": HELLO}]
    if stream:
        with client.chat.completions.stream(
            model=model, messages=messages, stream_options={"include_usage": True}
        ) as s:
            for _ in s:
                pass
            completion = s.get_final_completion()
    else:
        completion = client.chat.completions.create(model=model, messages=messages)
    choice = completion.choices[0]
    calls = choice.message.tool_calls or []
    usage = completion.usage
    finish = {"stop": "stop", "length": "length", "tool_calls": "tool", "content_filter": "filter"}
    return Summary(
        text=choice.message.content or "",
        tool_calls=[(c.function.name, _args(c.function.arguments)) for c in calls],
        tool_call_ids=[c.id for c in calls],
        finish=finish.get(choice.finish_reason, "other"),
        input_tokens=usage.prompt_tokens if usage else None,
        output_tokens=usage.completion_tokens if usage else None,
    )


def read_openai_responses(url: str, model: str, stream: bool) -> Summary:
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    if stream:
        with client.responses.stream(model=model, input=HELLO) as s:
            for _ in s:
                pass
            response = s.get_final_response()
    else:
        response = client.responses.create(model=model, input=HELLO)
    out = Summary()
    for item in response.output:
        if item.type == "message":
            out.text += "".join(c.text for c in item.content if c.type == "output_text")
        elif item.type == "function_call":
            out.tool_calls.append((item.name, _args(item.arguments)))
            out.tool_call_ids.append(item.call_id)
    if response.status == "completed":
        out.finish = "tool" if out.tool_calls else "stop"
    elif response.status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        out.finish = "length" if reason == "max_output_tokens" else "filter" if reason == "content_filter" else "other"
    if response.usage:
        out.input_tokens, out.output_tokens = response.usage.input_tokens, response.usage.output_tokens
    return out


def read_anthropic(url: str, model: str, stream: bool) -> Summary:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, http_client=HTTP2)
    kwargs = {"model": model, "max_tokens": 1024, "messages": [{"role": "user", "content": HELLO}]}
    if stream:
        with client.messages.stream(**kwargs) as s:
            for _ in s:
                pass
            message = s.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    out = Summary(thinking="")
    for block in message.content:
        if block.type == "text":
            out.text += block.text
        elif block.type == "thinking":
            out.thinking += block.thinking
        elif block.type == "tool_use":
            out.tool_calls.append((block.name, block.input))
            out.tool_call_ids.append(block.id)
    out.finish = FINISH_CATEGORY.get(message.stop_reason, "other") if message.stop_reason else None
    u = message.usage
    out.input_tokens = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    out.output_tokens = u.output_tokens
    return out


def read_gemini(url: str, model: str, stream: bool) -> Summary:
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=url, httpx_client=HTTP))
    if stream:
        chunks = list(client.models.generate_content_stream(model=model, contents=HELLO))
    else:
        chunks = [client.models.generate_content(model=model, contents=HELLO)]
    out = Summary(thinking="")
    finish = usage = None
    for chunk in chunks:
        usage = chunk.usage_metadata or usage
        for cand in chunk.candidates or []:
            if cand.index not in (None, 0):
                continue
            finish = cand.finish_reason or finish
            for part in (cand.content.parts if cand.content else None) or []:
                if part.function_call:
                    out.tool_calls.append((part.function_call.name, dict(part.function_call.args or {})))
                    out.tool_call_ids.append(part.function_call.id or "")
                elif part.text is not None:
                    if part.thought:
                        out.thinking += part.text
                    else:
                        out.text += part.text
    if finish is not None:
        word = finish.value if hasattr(finish, "value") else str(finish)
        category = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "filter", "RECITATION": "filter"}
        out.finish = "tool" if out.tool_calls and word == "STOP" else category.get(word, "other")
    if usage is not None:
        out.input_tokens = usage.prompt_token_count
        out.output_tokens = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
    return out


READERS = {
    "openai-chat": read_openai_chat,
    "openai-responses": read_openai_responses,
    "anthropic-messages": read_anthropic,
    "gemini": read_gemini,
}


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("source", "name"), SOURCES, ids=[n for _, n in SOURCES])
def test_sdk_streams_any_upstream(gateway, client, source, name):
    check(gateway, client, source, name, stream=True)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("source", "name"), WHOLE, ids=[n for _, n in WHOLE])
def test_sdk_whole_response_from_any_upstream(gateway, client, source, name):
    check(gateway, client, source, name, stream=False)


def check(gateway, client, source, name, stream):
    want = source_summary(source, name)
    got = READERS[client](gateway.url, name, stream)
    assert got.error is None
    assert got.text == want.text
    assert got.tool_calls == want.tool_calls
    if client in CARRIES_THINKING:
        assert got.thinking == want.thinking
    expected_finish = want.finish
    if client == "openai-responses" and expected_finish == "stop" and want.tool_calls:
        expected_finish = "tool"
    assert got.finish == expected_finish
    if want.input_tokens is not None:
        assert got.input_tokens == want.input_tokens
    if want.output_tokens is not None:
        assert got.output_tokens == want.output_tokens


# --------------------------------------------------------------------------- clients without an SDK


@pytest.mark.parametrize("client", ["llm-stream", "mmsp"])
@pytest.mark.parametrize(("source", "name"), SOURCES, ids=[n for _, n in SOURCES])
def test_standard_and_mmsp_clients_read_any_upstream(gateway, client, source, name):
    path = {"llm-stream": "/v1/stream", "mmsp": "/mmsp/v1/stream"}[client]
    headers = {"content-type": "application/llm-request+json"} if client == "llm-stream" else {}
    body = {"model": name, "messages": [{"role": "user", "content": HELLO}]}
    r = HTTP.post(gateway.url + path, json=body, headers=headers)
    assert r.status_code == 200
    events = decode_all(dialects.get(client).StreamDecoder(), r.content)
    got, want = expected(events), source_summary(source, name)
    assert got.error is None
    assert (got.text, got.thinking, got.tool_calls, got.finish) == (
        want.text,
        want.thinking,
        want.tool_calls,
        want.finish,
    )
    assert (got.input_tokens, got.output_tokens) == (want.input_tokens, want.output_tokens)


def test_upstream_error_event_relayed_and_translated(gateway):
    """openai-responses' response.failed: the SDK raises, relayed or translated."""
    name = "openai-error-insufficient-quota-failed"
    assert (CORPUS / "openai-responses" / f"{name}.sse").exists()
    with pytest.raises(openai.APIError):
        read_openai_responses(gateway.url, name, stream=True)
    with pytest.raises(anthropic.APIError):
        read_anthropic(gateway.url, name, stream=True)
