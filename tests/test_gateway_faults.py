"""The gateway under bad input and upstream faults, over real HTTP.

Every request error is answered in the client's dialect (its error shape, the right status);
after a stream has started, every upstream fault is an error event plus the dialect's terminal
event; disconnects cancel the upstream; stalls hit the idle timeout; keep-alives flow while an
upstream is silent; fallback happens before the first byte and never after.
"""

from __future__ import annotations

import json
import re
import socket
import time

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from llmbridge import dialects, hub, replay
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from llmbridge.gateway._extensions import HEADER, VENDOR_DIALECTS
from tests.conftest import CORPUS
from tests.gateway_util import UPSTREAM_OF, replay_config, serving, wait_for
from tests.readers import expected

ALL = list(dialects.NAMES)
TEXT = {
    d: n
    for d, n in [
        ("anthropic-messages", "claude-text-simple"),
        ("openai-chat", "hf-novita-text"),
        ("openai-responses", "openai-text"),
        ("gemini", "gemini20-text"),
    ]
}
LONG = ("openai-chat", "openai-gpt4o-tool-call-long-arguments")  # 22 kB, many events
KEEPALIVE, IDLE = 0.2, 1.0
HI = [{"role": "user", "content": "hi"}]
# One client for the module: a new httpx client per call builds an SSL context, which is slow.
HTTP = httpx.Client(timeout=10)
HTTP2 = httpx2.Client(timeout=10)  # the anthropic SDK's own httpx


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def _truncate_at(dialect: str, name: str, fraction: float = 0.6) -> int:
    return int(len((CORPUS / dialect / f"{name}.sse").read_bytes()) * fraction)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    record_dir = tmp_path_factory.mktemp("recordings")
    with serving(replay.create_app(CORPUS, seed=3)) as up:
        models = {}
        for dialect, name in TEXT.items():
            models[name] = (dialect, name)
            models[f"{name}@trunc"] = (dialect, f"{name}@truncate={_truncate_at(dialect, name)}")
            models[f"{name}@stall"] = (dialect, f"{name}@stall=3")
        models["slow"] = (LONG[0], f"{LONG[1]}@delay-ms=40@chunk=64")
        models["slow-anthropic"] = ("anthropic-messages", "claude-thinking-then-tool-use@delay-ms=40@chunk=64")
        models["tool"] = ("anthropic-messages", "claude-sonnet4-text-then-tool-use")
        models["openrouter-web-search-annotations"] = ("openai-chat", "openrouter-web-search-annotations")
        models["error-after-text"] = ("openai-chat", "groq-gpt-oss-error-event-after-text")
        models["failing"] = ("anthropic-messages", "claude-text-simple@status=500")
        models["rate-limited"] = ("gemini", "gemini20-text@status=429")
        models["dead"] = (["dead"], "x")
        models["fallback-status"] = (
            ["rep-chat", "rep-anthropic"],
            {"rep-chat": "hf-novita-text@status=503", "rep-anthropic": "claude-text-simple"},
        )
        models["fallback-dead"] = (["dead", "rep-gemini"], {"rep-gemini": "gemini20-text"})
        models["fallback-429"] = (
            ["rep-gemini", "rep-chat"],
            {"rep-gemini": "gemini20-text@status=429", "rep-chat": "hf-novita-text"},
        )
        models["no-fallback-400"] = (
            ["rep-gemini", "rep-chat"],
            {"rep-gemini": "gemini20-text@status=400", "rep-chat": "hf-novita-text"},
        )
        trunc = f"claude-text-simple@truncate={_truncate_at('anthropic-messages', 'claude-text-simple')}"
        models["fallback-after-first-byte"] = (
            ["rep-anthropic", "rep-chat"],
            {"rep-anthropic": trunc, "rep-chat": "hf-novita-text@fallback"},
        )
        raw = replay_config(
            up.url,
            {},
            gateway={"keepalive_seconds": KEEPALIVE, "max_body_bytes": 4096, "record_dir": str(record_dir)},
            timeouts={"idle": IDLE, "connect": 1},
            extra_upstreams={"dead": {"format": "openai-chat", "base_url": f"http://127.0.0.1:{_dead_port()}/v1"}},
        )
        for name, (dialect, target) in models.items():
            if isinstance(dialect, list):
                raw["models"].append({"name": name, "upstreams": dialect, "upstream_model": target})
            else:
                raw["models"].append({"name": name, "upstream": UPSTREAM_OF[dialect], "upstream_model": target})
        with serving(create_app(config.parse(raw))) as gw:
            yield gw, up, record_dir


@pytest.fixture
def gw(servers):
    return servers[0]


@pytest.fixture
def stats(servers):
    return servers[1].app.state.replay.stats


# --------------------------------------------------------------------------- helpers: one request per dialect


def request_for(dialect: str, model: str, stream: bool = True) -> tuple[str, dict, dict]:
    """(path, body, headers) of a minimal request in ``dialect``."""
    user = [{"role": "user", "content": "hi"}]
    if dialect == "openai-chat":
        body = {"model": model, "messages": user, "stream": stream}
        if stream:  # the upstream's usage chunk (choices: []) is relayed as it is only to a client that asks
            body["stream_options"] = {"include_usage": True}
        return "/v1/chat/completions", body, {}
    if dialect == "openai-responses":
        return "/v1/responses", {"model": model, "input": "hi", "stream": stream}, {}
    if dialect == "anthropic-messages":
        return "/v1/messages", {"model": model, "max_tokens": 64, "messages": user, "stream": stream}, {}
    if dialect == "gemini":
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1beta/models/{model}:{method}", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, {}
    if dialect == "llm-stream":
        return (
            "/v1/stream",
            {"model": model, "messages": user, "stream": stream},
            {"content-type": "application/llm-request+json"},
        )
    if dialect == "mmsp":
        return "/mmsp/v1/stream", {"model": model, "messages": user}, {}
    raise AssertionError(dialect)


def post(gw, dialect: str, model: str, stream: bool = True, headers: dict | None = None) -> httpx.Response:
    path, body, base_headers = request_for(dialect, model, stream)
    return HTTP.post(gw.url + path, json=body, headers={**base_headers, **(headers or {})}, timeout=10)


def client_events(dialect: str, body: bytes) -> list[hub.Event]:
    return decode_all(dialects.get(dialect).StreamDecoder(), body)


# Our client's header: answers carry the hub's own error type (incomplete_stream, request_too_large
# ...) under "llmbridge", which vendor error shapes have no word for; others get none of it.
ASK = {HEADER: "1"}


def assert_error_shape(dialect: str, response: httpx.Response, status: int, type: str) -> None:
    """The status, no traceback, and a body the client dialect's own codec reads as ``type``."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    assert response.headers["content-type"].startswith("application/json")
    error = dialects.get(dialect).decode_error(status, response.content)
    assert error.type == type, (error, response.text)
    assert response.headers.get("x-request-id")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("dialect", ALL)
def test_malformed_json(gw, dialect):
    path, _, headers = request_for(dialect, "claude-text-simple")
    r = HTTP.post(gw.url + path, content=b'{"model": "x", "messages": [', headers=headers)
    assert_error_shape(dialect, r, 400, "invalid_request")
    r = HTTP.post(gw.url + path, content=b"[1, 2]", headers=headers)
    assert_error_shape(dialect, r, 400, "invalid_request")


@pytest.mark.parametrize("dialect", ALL)
def test_wrong_types(gw, dialect):
    path, body, headers = request_for(dialect, "claude-text-simple")
    for key in ("messages", "input", "contents"):
        if key in body:
            body[key] = 42
    r = HTTP.post(gw.url + path, json=body, headers=headers)
    assert_error_shape(dialect, r, 400, "invalid_request")


@pytest.mark.parametrize("dialect", ALL)
def test_missing_fields(gw, dialect):
    path, _, headers = request_for(dialect, "claude-text-simple")
    r = HTTP.post(gw.url + path, json={}, headers=headers)
    assert_error_shape(dialect, r, 400, "invalid_request")


@pytest.mark.parametrize("dialect", ALL)
def test_unknown_model(gw, dialect):
    assert_error_shape(dialect, post(gw, dialect, "no-such-model"), 404, "not_found")


@pytest.mark.parametrize("dialect", ALL)
def test_body_too_large(gw, dialect):
    path, body, headers = request_for(dialect, "claude-text-simple")
    body["padding"] = "x" * 5000
    r = HTTP.post(gw.url + path, json=body, headers={**headers, **ASK})
    assert_error_shape(dialect, r, 413, "request_too_large")
    r = HTTP.post(gw.url + path, json=body, headers=headers)
    assert r.status_code == 413 and b"llmbridge" not in r.content  # our hub error type only for clients that ask


@pytest.mark.parametrize("dialect", [d for d in ALL if d != "llm-stream"])
def test_unsupported_media_type(gw, dialect):
    path, body, _ = request_for(dialect, "claude-text-simple")
    r = HTTP.post(gw.url + path, content=json.dumps(body), headers={"content-type": "text/plain", **ASK})
    assert_error_shape(dialect, r, 415, "unsupported_media_type")
    r = HTTP.post(gw.url + path, content=json.dumps(body), headers={"content-type": "text/plain"})
    assert r.status_code == 415 and b"llmbridge" not in r.content


@pytest.mark.parametrize("dialect", ALL)
def test_upstream_failure(gw, dialect):
    # the upstream answers 500 with its error body; a dead upstream is a 502
    assert_error_shape(dialect, post(gw, dialect, "failing"), 500, "api_error")
    r = post(gw, dialect, "dead")
    assert r.status_code == 502 and "Traceback" not in r.text
    assert dialects.get(dialect).decode_error(502, r.content).status in (None, 502)


@pytest.fixture(scope="module")
def locked_gw(servers):
    raw = replay_config(
        servers[1].url,
        {"m": ("anthropic-messages", "claude-text-simple")},
        # (these tests send ~20 wrong keys from one address: past 10 a minute they would get 429)
        gateway={"api_keys": ["${LLMBRIDGE_TEST_KEY:-sekrit}", "other"], "auth_failures_per_minute": 1000},
    )
    with serving(create_app(config.parse(raw, env={}))) as gw:
        yield gw


@pytest.mark.parametrize("dialect", ALL)
def test_wrong_key_is_401_in_dialect(dialect, locked_gw):
    gw = locked_gw
    assert_error_shape(dialect, post(gw, dialect, "m"), 401, "authentication")
    assert_error_shape(dialect, post(gw, dialect, "m", headers={"authorization": "Bearer nope"}), 401, "authentication")
    for headers, params in [
        ({"authorization": "Bearer sekrit"}, None),
        ({"x-api-key": "sekrit"}, None),
        ({"x-goog-api-key": "sekrit"}, None),
        ({}, {"key": "sekrit"}),
    ]:
        path, body, h = request_for(dialect, "m")
        r = HTTP.post(gw.url + path, json=body, headers={**h, **headers}, params=params)
        assert r.status_code == 200, r.text
    assert HTTP.get(gw.url + "/v1/models").status_code == 401
    assert HTTP.get(gw.url + "/v1/models", headers={"x-api-key": "sekrit"}).status_code == 200
    assert HTTP.get(gw.url + "/healthz").status_code == 200


# --------------------------------------------------------------------------- faults after the stream started


@pytest.mark.parametrize("client", ALL)
@pytest.mark.parametrize("source", list(TEXT))
def test_truncated_upstream_is_never_a_clean_finish(gw, client, source):
    plain = post(gw, client, TEXT[source] + "@trunc")  # what a vendor SDK gets: its own error, no data of ours
    assert plain.status_code == 200 and hub.assemble(client_events(client, plain.content)).error is not None
    if client in VENDOR_DIALECTS:
        assert b"llmbridge" not in plain.content
    r = post(gw, client, TEXT[source] + "@trunc", headers=ASK)  # the hub error type rides under "llmbridge"
    assert r.status_code == 200  # the answer had started
    events = client_events(client, r.content)
    assert hub.validate(events) == []
    response = hub.assemble(events)
    assert not response.complete
    assert response.error is not None and response.error.type in ("incomplete_stream", "protocol_error")
    # what arrived before the cut is there
    want = expected(client_events(source, (CORPUS / source / f"{TEXT[source]}.sse").read_bytes())).text
    got = "".join(b.text for b in response.blocks if b.kind == "text")
    assert want.startswith(got)
    # whole-response clients get an error status, not a short answer (MMSP only streams)
    if client != "mmsp":
        r = post(gw, client, TEXT[source] + "@trunc", stream=False)
        assert r.status_code == 502, r.text


def test_truncated_upstream_raises_in_the_sdks(gw):
    model = "claude-text-simple@trunc"
    messages = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0, http_client=HTTP2).messages
    with pytest.raises(anthropic.APIError), messages.stream(model=model, max_tokens=10, messages=HI) as s:
        s.get_final_message()
    with pytest.raises(openai.APIError):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
        with client.responses.stream(model=model, input="hi") as s:
            s.get_final_response()


def test_midstream_upstream_error_is_the_sdk_exception(gw):
    model = "error-after-text"  # Groq: text, then an error event
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=HTTP)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], stream=True):
            pass
    messages = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0, http_client=HTTP2).messages
    with pytest.raises(anthropic.APIError), messages.stream(model=model, max_tokens=10, messages=HI) as s:
        s.get_final_message()
    with pytest.raises(openai.APIError), client.responses.stream(model=model, input="hi") as s:
        s.get_final_response()
    gclient = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=gw.url, httpx_client=HTTP))
    with pytest.raises(genai_errors.APIError):
        list(gclient.models.generate_content_stream(model=model, contents="hi"))


@pytest.mark.parametrize(
    ("client", "model"),
    [("anthropic-messages", "slow-anthropic"), ("gemini", "slow"), ("openai-chat", "slow")],
    ids=["relay", "translate", "relay-chat"],
)
def test_client_disconnect_cancels_the_upstream(gw, stats, client, model):
    target = dict(
        slow="openai-gpt4o-tool-call-long-arguments@delay-ms=40@chunk=64",
        **{"slow-anthropic": "claude-thinking-then-tool-use@delay-ms=40@chunk=64"},
    )[model]
    before = stats.cancelled.count(target)
    path, body, headers = request_for(client, model)
    with HTTP.stream("POST", gw.url + path, json=body, headers=headers, timeout=10) as r:
        assert r.status_code == 200
        next(r.iter_bytes())  # the answer is flowing
        started = time.monotonic()
    assert wait_for(lambda: stats.cancelled.count(target) > before, timeout=3)
    assert time.monotonic() - started < 1.5  # at once, not after the (minutes long) paced body


@pytest.mark.parametrize("client", ["anthropic-messages", "openai-responses", "llm-stream"])
@pytest.mark.usefixtures("no_collector_pause")
def test_stall_hits_the_idle_timeout_with_keepalives(gw, client):
    started = time.monotonic()
    r = post(gw, client, "claude-text-simple@stall")  # upstream silent for 3 s after its first chunk
    elapsed = time.monotonic() - started
    assert r.status_code in (200, 504)
    assert IDLE <= elapsed < IDLE + 1.5
    if r.status_code == 200:
        # every KEEPALIVE seconds while silent: the head at one interval, then keep-alives (it
        # failed twice in whole-suite runs with none at all, the collector's pause; see
        # no_collector_pause)
        assert r.content.count(b": keep-alive") >= 2, (elapsed, r.content)
        response = hub.assemble(client_events(client, r.content))
        assert response.error is not None and response.error.type == "timeout"
        assert not response.complete
        if client == "openai-responses":  # failed before its start, it still opens as every Responses stream
            kinds = re.findall(rb"^event: (\S+)", r.content, re.M)
            assert kinds == [b"response.created", b"response.in_progress", b"error", b"response.failed"]
    else:
        assert_error_shape(client, r, 504, "timeout")


@pytest.mark.usefixtures("no_collector_pause")
def test_keepalives_flow_while_upstream_is_silent(gw):
    with HTTP.stream(
        "POST", gw.url + "/v1/messages", json=request_for("anthropic-messages", "gemini20-text@stall")[1], timeout=10
    ) as r:
        seen = b""
        started = time.monotonic()
        for chunk in r.iter_bytes():
            seen += chunk
            if seen.count(b": keep-alive\n\n") >= 3:
                break
        assert time.monotonic() - started < IDLE + 0.5
    assert seen.count(b": keep-alive\n\n") >= 3


# --------------------------------------------------------------------------- fallback


@pytest.mark.parametrize("model", ["fallback-status", "fallback-dead", "fallback-429"])
@pytest.mark.parametrize("client", ["anthropic-messages", "openai-chat", "gemini"])
def test_fallback_before_first_byte(gw, client, model):
    r = post(gw, client, model)
    assert r.status_code == 200, r.text
    response = hub.assemble(client_events(client, r.content))
    assert response.complete and response.error is None
    assert "".join(b.text for b in response.blocks if b.kind == "text")


def test_no_fallback_on_client_errors(gw):
    assert_error_shape("openai-chat", post(gw, "openai-chat", "no-fallback-400"), 400, "invalid_request")


def test_never_fallback_after_first_byte(gw, stats):
    r = post(gw, "openai-chat", "fallback-after-first-byte")
    assert r.status_code == 200
    response = hub.assemble(client_events("openai-chat", r.content))
    assert response.error is not None and not response.complete
    assert "hf-novita-text@fallback" not in stats.requests


# --------------------------------------------------------------------------- the rest of the contract


@pytest.mark.parametrize("dialect", list(TEXT))
def test_relay_is_byte_exact(gw, dialect):
    # CRLF framing (Gemini), OpenRouter-style comments, [DONE] terminators: all relayed as they came
    body = (CORPUS / dialect / f"{TEXT[dialect]}.sse").read_bytes()
    r = post(gw, dialect, TEXT[dialect])
    assert r.content == body


def test_relayed_chat_usage_chunk_keeps_one_choice_for_a_client_that_did_not_ask(gw):
    # The gateway spec: "Without [include_usage], the chunk keeps one choice with an empty delta."
    model = TEXT["openai-chat"]
    body = (CORPUS / "openai-chat" / f"{model}.sse").read_bytes()
    assert b'"choices":[]' in body
    r = HTTP.post(
        gw.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True},
        timeout=10,
    )
    assert b'"choices":[]' not in r.content
    chunks = [json.loads(line[6:]) for line in r.content.split(b"\n") if line.startswith(b"data: {")]
    assert all(len(c["choices"]) == 1 for c in chunks)
    assert chunks[-1]["usage"] and chunks[-1]["choices"] == [{"index": 0, "delta": {}, "finish_reason": None}]
    assert r.content.endswith(b"data: [DONE]\n\n")
    # Every other byte as the upstream sent it.
    original = [line for line in body.split(b"\n") if b'"choices":[]' not in line]
    assert [line for line in r.content.split(b"\n") if b'"usage"' not in line] == [
        line for line in original if b'"usage"' not in line
    ]


def test_relay_keeps_comment_lines(gw):
    body = (CORPUS / "openai-chat" / "openrouter-web-search-annotations.sse").read_bytes()
    assert b"\n: " in body or body.startswith(b": ")
    assert post(gw, "openai-chat", "openrouter-web-search-annotations").content == body


def test_request_id_header_and_llm_stream_echo(gw):
    r = post(gw, "openai-chat", "claude-text-simple", headers={"x-request-id": "my-id-1"})
    assert r.headers["x-request-id"] == "my-id-1"
    assert post(gw, "openai-chat", "claude-text-simple").headers["x-request-id"].startswith("req_")
    for source in ("anthropic-messages", "openai-chat"):
        path, body, headers = request_for("llm-stream", TEXT[source])
        body["metadata"] = {"request_id": "rid-42"}
        r = HTTP.post(gw.url + path, json=body, headers=headers)
        events = client_events("llm-stream", r.content)
        assert events[0].request_id == "rid-42" and events[-1].request_id == "rid-42"
        lines = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        assert lines[0]["type"] == "stream.start" and lines[0]["request_id"] == "rid-42"
        assert lines[-1]["type"] == "stream.end" and lines[-1]["request_id"] == "rid-42"


def test_standard_stream_is_negotiated_on_any_endpoint(gw):
    accept = {"accept": 'text/event-stream; profile="llm-stream-1.0"'}
    for dialect in ("openai-chat", "anthropic-messages", "gemini", "openai-responses"):
        r = post(gw, dialect, "claude-text-simple", headers=accept)
        assert r.status_code == 200
        assert r.text.startswith("event: stream.start")
        assert hub.assemble(client_events("llm-stream", r.content)).complete
    # a standard request on a vendor endpoint
    body = {"model": "claude-text-simple", "messages": [{"role": "user", "content": "hi"}]}
    r = HTTP.post(gw.url + "/v1/messages", json=body, headers={"content-type": "application/llm-request+json"})
    assert r.status_code == 200 and r.text.startswith("event: stream.start")


def test_gemini_json_array_stream(gw):
    r = HTTP.post(
        gw.url + "/v1beta/models/claude-text-simple:streamGenerateContent", json=request_for("gemini", "x")[1]
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    chunks = json.loads(r.content)
    text = "".join(
        p.get("text", "")
        for c in chunks
        for cand in c.get("candidates", [])
        for p in cand.get("content", {}).get("parts", [])
    )
    want = expected(
        client_events("anthropic-messages", (CORPUS / "anthropic-messages" / "claude-text-simple.sse").read_bytes())
    )
    assert text == want.text


def test_record_dir(servers):
    gw, _, record_dir = servers
    assert post(gw, "openai-chat", "hf-novita-text").status_code == 200

    def recordings() -> list:
        return sorted(p for p in record_dir.iterdir() if "hf-novita-text" in p.name and p.suffix == ".sse")

    def written() -> bool:
        try:
            return bool(json.loads(recordings()[-1].with_suffix(".json").read_text()))
        except (IndexError, OSError, ValueError):
            return False

    # The recording is written as the exchange closes, after the answer's last bytes went out:
    # the client can be back before it is on disk.
    assert wait_for(written)
    recorded = recordings()
    assert recorded[-1].read_bytes() == (CORPUS / "openai-chat" / "hf-novita-text.sse").read_bytes()
    meta = json.loads(recorded[-1].with_suffix(".json").read_text())
    assert meta["dialect"] == "openai-chat" and meta["model"] == "hf-novita-text" and meta["complete"]


def test_model_lists(gw):
    openai_list = HTTP.get(gw.url + "/v1/models").json()
    names = {m["id"] for m in openai_list["data"]}
    assert "claude-text-simple" in names and openai_list["object"] == "list"
    anthropic_list = HTTP.get(gw.url + "/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert {m["id"] for m in anthropic_list["data"]} == names and anthropic_list["has_more"] is False
    gemini_list = HTTP.get(gw.url + "/v1beta/models").json()
    assert {m["name"] for m in gemini_list["models"]} == {f"models/{n}" for n in names}
    assert {m["id"] for m in HTTP.get(gw.url + "/mmsp/v1/models").json()["data"]} == names
    assert HTTP.get(gw.url + "/healthz").json()["status"] == "ok"
    # the SDKs read them
    assert "claude-text-simple" in {
        m.id for m in openai.OpenAI(base_url=gw.url + "/v1", api_key="k", http_client=HTTP).models.list()
    }
    assert "claude-text-simple" in {
        m.id for m in anthropic.Anthropic(base_url=gw.url, api_key="k", http_client=HTTP2).models.list()
    }


def test_unknown_route_and_method_answer_in_a_dialect(gw):
    r = HTTP.post(gw.url + "/v1/audio/speech", json={})  # (/v1/embeddings is served now: issue 15)
    assert_error_shape("openai-chat", r, 404, "not_found")
    r = HTTP.get(gw.url + "/v1/messages", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 405 and dialects.get("anthropic-messages").decode_error(405, r.content).message
    r = HTTP.post(gw.url + "/v1beta/models/gemini20-text:generateAnswer", json={})  # (:countTokens is served)
    assert_error_shape("gemini", r, 404, "not_found")


def test_model_retrieval_in_each_shape(gw):
    assert openai.OpenAI(base_url=gw.url + "/v1", api_key="k", http_client=HTTP).models.retrieve("tool").id == "tool"
    ant = anthropic.Anthropic(base_url=gw.url, api_key="k", http_client=HTTP2)
    assert ant.models.retrieve("tool").id == "tool"
    gclient = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=gw.url, httpx_client=HTTP))
    assert "models/tool" in [m.name for m in gclient.models.list()]
    assert gclient.models.get(model="tool").name == "models/tool"
    assert_error_shape("openai-chat", HTTP.get(gw.url + "/v1/models/nope"), 404, "not_found")


def test_disconnect_before_the_answer_starts_cancels_the_upstream(servers):
    """The upstream is silent and keep-alives are far apart: the client leaves, the upstream goes."""
    up = servers[1]
    target = "claude-text-simple@delay-ms=4000"
    raw = replay_config(up.url, {"slow-start": ("anthropic-messages", target)}, gateway={"keepalive_seconds": 30})
    stats = up.app.state.replay.stats
    with serving(create_app(config.parse(raw))) as gw:
        with pytest.raises(httpx.ReadTimeout):
            post_stream = request_for("anthropic-messages", "slow-start")
            HTTP.post(gw.url + post_stream[0], json=post_stream[1], timeout=0.5)
        left = time.monotonic()
        assert wait_for(lambda: target in stats.cancelled, timeout=3)
        assert time.monotonic() - left < 2


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic-messages"])
def test_upstream_429_keeps_its_retry_after(gw, dialect):
    r = post(gw, dialect, "rate-limited")
    assert_error_shape(dialect, r, 429, "rate_limit")
    assert r.headers["retry-after"] == "1"
