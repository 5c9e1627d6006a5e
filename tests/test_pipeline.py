"""One pipeline for every entry point: the same hostile and refused requests, sent to every
way into the gateway — the six chat endpoints, images, the three embeddings shapes, a
WebSocket turn and a console turn — get the same class of answer, in that entry point's
own error shape, with nothing in the log above INFO."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from llmbridge import dialects, replay
from llmbridge.gateway import config, create_app
from tests.conftest import CORPUS
from tests.gateway_util import replay_config, serving

KEY = "k-" + "p" * 30
UI_KEY = "ui-" + "q" * 30
LIMIT = 64 * 1024
HTTP = httpx.Client(timeout=20)


def _chat(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    if model is not None:
        body["model"] = model
    return body


def _responses(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"input": "hi", "max_output_tokens": 16}
    if model is not None:
        body["model"] = model
    return body


def _gemini(model: str | None) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def _standard(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    if model is not None:
        body["model"] = model
    return body


def _mmsp(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content_items": [{"type": "text", "text": "hi"}]}]}
    if model is not None:
        body["model"] = model
    return body


def _images(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": "a cat"}
    if model is not None:
        body["model"] = model
    return body


def _embeddings(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"input": "hi"}
    if model is not None:
        body["model"] = model
    return body


def _gemini_embed(model: str | None) -> dict[str, Any]:
    return {"content": {"parts": [{"text": "hi"}]}}


def _gemini_batch(model: str | None) -> dict[str, Any]:
    return {"requests": [{"content": {"parts": [{"text": "hi"}]}}]}


def _console(model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": "hi"}
    if model is not None:
        body["model"] = model
    return body


@dataclass(frozen=True)
class Entry:
    name: str
    path: Callable[[str], str]  # model -> path (Gemini's carry it)
    body: Callable[[str | None], dict[str, Any]]
    shape: str  # the dialect whose error body it answers with ("console": the console's own)
    model_in_body: bool = True
    headers: tuple[tuple[str, str], ...] = ()


ENTRIES = [
    Entry("chat-completions", lambda m: "/v1/chat/completions", _chat, "openai-chat"),
    Entry("responses", lambda m: "/v1/responses", _responses, "openai-responses"),
    Entry(
        "messages",
        lambda m: "/v1/messages",
        _chat,
        "anthropic-messages",
        headers=(("anthropic-version", "2023-06-01"),),
    ),
    Entry("gemini", lambda m: f"/v1beta/models/{m}:streamGenerateContent", _gemini, "gemini", model_in_body=False),
    Entry("llm-stream", lambda m: "/v1/stream", _standard, "llm-stream"),
    Entry("mmsp", lambda m: "/mmsp/v1/stream", _mmsp, "mmsp"),
    Entry("images", lambda m: "/v1/images/generations", _images, "openai-chat"),
    Entry("embeddings", lambda m: "/v1/embeddings", _embeddings, "openai-chat"),
    Entry("gemini-embed", lambda m: f"/v1beta/models/{m}:embedContent", _gemini_embed, "gemini", model_in_body=False),
    Entry(
        "gemini-batch", lambda m: f"/v1beta/models/{m}:batchEmbedContents", _gemini_batch, "gemini", model_in_body=False
    ),
    Entry("console", lambda m: "/ui/api/playground", _console, "console"),
]


@pytest.fixture(scope="module")
def gw():
    with serving(replay.create_app(CORPUS, seed=3)) as up:
        raw = replay_config(
            up.url,
            {"text": ("anthropic-messages", "claude-text-simple")},
            gateway={"api_keys": [KEY], "ui_key": UI_KEY, "max_body_bytes": LIMIT, "auth_failures_per_minute": 1000},
        )
        with serving(create_app(config.parse(raw, env={}))) as server:
            yield server


def _auth(entry: Entry) -> dict[str, str]:
    key = UI_KEY if entry.shape == "console" else KEY
    return {"authorization": f"Bearer {key}", **dict(entry.headers)}


def _error_of(entry: Entry, r: httpx.Response) -> tuple[int, str]:
    """The status and the error's message, read the way the entry point's clients read it."""
    if entry.shape == "console":
        body = r.json()
        return body["error"]["status"], body["error"]["message"]
    error = dialects.get(entry.shape).decode_error(r.status_code, r.content)
    return r.status_code, error.message


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# (case, body maker, expected status): each is refused before anything goes upstream
def _cases(entry: Entry) -> list[tuple[str, Callable[[], bytes], int]]:
    good = entry.body("text")
    cases: list[tuple[str, Callable[[], bytes], int]] = [
        ("not JSON", lambda: b"{nope", 400),
        ("not an object", lambda: b"[1, 2]", 400),
        ("too deep", lambda: json.dumps({**good, "deep": _nested(200)}).encode(), 400),
        ("too large", lambda: json.dumps({**good, "pad": "x" * (LIMIT + 10)}).encode(), 413),
    ]
    if entry.model_in_body:
        cases.append(("no model", lambda: json.dumps(entry.body(None)).encode(), 400))
        cases.append(("unknown model", lambda: json.dumps(entry.body("m" * 5000)).encode(), 404))
    return cases


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_every_entry_point_refuses_alike(gw, entry, caplog):
    caplog.set_level(logging.INFO)
    for case, make, status in _cases(entry):
        r = HTTP.post(
            gw.url + entry.path("text"), content=make(), headers={**_auth(entry), "content-type": "application/json"}
        )
        got, message = _error_of(entry, r)
        assert (r.status_code, got) == (status, status), (entry.name, case, r.text[:300])
        assert message and len(message) < 1000, (entry.name, case)
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING], entry.name


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_every_entry_point_needs_the_key(gw, entry):
    headers = {k: v for k, v in _auth(entry).items() if k != "authorization"}
    r = HTTP.post(gw.url + entry.path("text"), json=entry.body("text"), headers=headers)
    assert r.status_code == 401, (entry.name, r.text[:200])
    assert _error_of(entry, r)[0] == 401


def test_an_unknown_model_in_the_url_is_404_for_generation_and_embeddings(gw):
    for entry in ENTRIES:
        if entry.model_in_body:
            continue
        r = HTTP.post(gw.url + entry.path("nope"), json=entry.body(None), headers=_auth(entry))
        assert r.status_code == 404, (entry.name, r.text[:200])


def _ws_url(gw) -> str:
    return gw.url.replace("http://", "ws://") + "/v1/stream"


def _ws_turn(ws, message: str | bytes) -> list[dict]:
    ws.send(message)
    out = []
    while True:
        out.append(json.loads(ws.recv(timeout=20)))
        if out[-1]["type"] == "stream.end":
            return out


def test_a_websocket_turn_is_refused_like_an_http_request(gw):
    """The turn's body goes through the same checks: depth, model, request id."""
    with connect(_ws_url(gw), additional_headers={"authorization": f"Bearer {KEY}"}) as ws:
        cases = [
            ({**_standard("text"), "deep": _nested(200)}, 400),
            (_standard(None), 400),
            (_standard("m" * 5000), 404),
        ]
        for body, status in cases:
            envelopes = _ws_turn(ws, json.dumps(body))
            errors = [e for e in envelopes if e["type"] == "error"]
            assert errors and errors[0]["llmbridge:status"] == status, (status, envelopes[:2])
        good = _ws_turn(ws, json.dumps(_standard("text")))  # and the connection still serves
        assert not [e for e in good if e["type"] == "error"]


def test_a_request_id_in_the_body_is_echoed_only_when_bounded_like_the_header(gw):
    """A body's metadata.request_id is echoed in llm-stream's stream.start only when it is
    1-128 printable ASCII characters (as the header's); a longer one is not refused."""
    for rid, echoed in (("r" * 10_000, False), ("req-1", True)):
        body = _standard("text") | {"metadata": {"request_id": rid}}
        r = HTTP.post(gw.url + "/v1/stream", json=body, headers=_auth(ENTRIES[4]))
        assert r.status_code == 200
        start = json.loads(r.text.split("data: ", 1)[1].split("\n", 1)[0])
        assert (start.get("request_id") == rid) is echoed and len(r.text) < 20_000


class _Anonymous:
    """An in-process upstream whose answer names no model (as Bedrock's and Cohere's streams do)."""

    name = "anon"

    async def stream(self, request):
        from llmbridge import hub

        for event in (
            hub.ResponseStart(id="r1"),
            hub.BlockStart(0, "text"),
            hub.Delta(0, "hi"),
            hub.BlockStop(0),
            hub.Finish("end_turn"),
            hub.ResponseEnd(),
        ):
            yield event


def test_an_answer_whose_upstream_named_no_model_names_the_model_it_was_sent_to():
    """Every vendor's answer names its model (Anthropic's Message.model is required and
    non-empty): the gateway names the upstream model it asked when the upstream said none."""
    raw = {
        "upstreams": {"anon": {"format": "local"}},
        "models": [{"name": "m", "upstream": "anon", "upstream_model": "anon-model-1"}],
    }
    with serving(create_app(config.parse(raw, env={}), upstreams={"anon": _Anonymous()})) as server:
        headers = {"anthropic-version": "2023-06-01"}
        body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        whole = HTTP.post(server.url + "/v1/messages", json=body, headers=headers).json()
        assert whole["model"] == "anon-model-1" and whole["content"][0]["text"] == "hi"
        streamed = HTTP.post(server.url + "/v1/messages", json=body | {"stream": True}, headers=headers).text
        assert '"model":"anon-model-1"' in streamed.replace(" ", "")
