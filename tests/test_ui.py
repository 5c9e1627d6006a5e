"""The /ui console's cores (sans-I/O) and its JSON API on a real uvicorn server.

The browser side is in tests/test_ui_browser.py; here: detection and translation of corpus
captures, bad pastes, the six-dialect fan-out, the traffic ring, access control.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

from llmbridge import dialects, errors, hub
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from llmbridge.gateway._ui import Fanout, TrafficLog, analyze, parse_request
from tests.conftest import CORPUS, corpus_files
from tests.gateway_util import serving, wait_for

HTTP = httpx.Client(timeout=60)
CONSOLE = {"x-llmbridge-console": "1"}


# --------------------------------------------------------------------------- translator core


def _expected(source: str, target: str, data: bytes) -> str:
    """What `llmbridge translate --from source --to target` writes for ``data``."""
    encoder = dialects.get(target).StreamEncoder()
    return b"".join(encoder.encode(e) for e in decode_all(dialects.get(source).StreamDecoder(), data)).decode()


SAMPLES = {  # one capture per source dialect: auto-detection must name that dialect
    "openai-chat": "openai-chat/alibaba-qwen3-max-tool-call.sse",
    "anthropic-messages": "anthropic-messages/claude-sonnet4-text-then-tool-use.sse",
    "gemini": "gemini/gemini20-function-call.sse",
    "openai-responses": "openai-responses/azure-responses-reasoning-tools-part1of4.sse",
    "cohere-v2": "other/cohere-v2-chat-tool-call.sse",
    "gemini-interactions": "other/gemini-interactions-api-tool-call.sse",
}


@pytest.mark.parametrize("dialect", sorted(SAMPLES))
def test_detects_and_translates_corpus_captures(dialect):
    data = (CORPUS / SAMPLES[dialect]).read_bytes()
    report = analyze(data, None, "llm-stream")
    assert report.fatal is None
    assert report.source == dialect and report.detected
    assert report.output == _expected(dialect, "llm-stream", data)
    assert report.events_total > 2 and report.frames_total > 0


@pytest.mark.parametrize("dialect", dialects.NAMES)
def test_detects_the_encoders_own_output(dialect):
    """A stream each of the six encoders wrote is recognised as that dialect."""
    data = (CORPUS / SAMPLES["anthropic-messages"]).read_bytes()
    ours = _expected("anthropic-messages", dialect, data).encode()
    report = analyze(ours, None, "openai-chat")
    assert (report.source, report.fatal) == (dialect, None)


@pytest.mark.parametrize("dialect", dialects.NAMES)
def test_detects_each_dialects_non_streaming_body(dialect):
    data = (CORPUS / SAMPLES["anthropic-messages"]).read_bytes()
    response = hub.assemble(decode_all(dialects.get("anthropic-messages").StreamDecoder(), data))
    body = json.dumps(dialects.get(dialect).encode_response(response)).encode()
    report = analyze(body, None, "openai-chat")
    assert (report.source, report.shape, report.fatal) == (dialect, "json", None)
    assert json.loads(report.output)["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_every_corpus_capture_is_detected_and_reported():
    for path in corpus_files():
        report = analyze(path.read_bytes(), None, "anthropic-messages")
        assert report.fatal is None, path
        if path.parent.name != "other":  # the folder names the dialect: auto-detection agrees
            assert report.source == path.parent.name, path
        json.dumps(report.to_dict())  # the API can send it


def test_problems_name_the_offending_event():
    data = (CORPUS / SAMPLES["anthropic-messages"]).read_bytes()
    cut = data[: len(data) // 2]
    report = analyze(cut, "anthropic-messages", "openai-chat")
    assert report.fatal is None
    rules = {p["rule"] for p in report.problems}
    assert "truncated" in rules
    assert any(e["event"] == "Error" and e["type"] == "incomplete_stream" for e in report.events)
    # A broken event in the middle: the decoder's violation points at that source event.
    lines = data.split(b"\n\n")
    lines[3] = b"event: content_block_delta\ndata: {not json"
    report = analyze(b"\n\n".join(lines), "anthropic-messages", "openai-chat")
    assert [p["event"] for p in report.problems if p["rule"] == "json"] == [3]


@pytest.mark.parametrize(
    "paste",
    [b"", b"   \n", b"<html><body>Bad gateway</body></html>", b"hello world", b"[1, 2, 3]", b"\xff\xfe\x00garbage"],
)
def test_not_a_stream_is_a_readable_report(paste):
    report = analyze(paste, None, "openai-chat")
    assert report.fatal and report.output == ""


def test_json_bodies_and_gemini_arrays():
    anthropic = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Hi <b>there</b>"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    report = analyze(json.dumps(anthropic).encode(), None, "openai-chat")
    assert (report.source, report.shape, report.fatal) == ("anthropic-messages", "json", None)
    assert json.loads(report.output)["choices"][0]["message"]["content"] == "Hi <b>there</b>"
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]},
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2},
        },
    ]
    report = analyze(json.dumps(chunks).encode(), None, "anthropic-messages")
    assert (report.source, report.shape, report.text) == ("gemini", "sse", "Hello")


def test_oversized_input_is_refused_readably():
    report = analyze(b"data: x\n\n" * (2 * 1024 * 1024), None, "openai-chat")
    assert report.fatal and "MB" in report.fatal and "llmbridge" in report.fatal


# --------------------------------------------------------------------------- fan-out core


def _turn() -> list[hub.Event]:
    return [
        hub.ResponseStart(id="r1", model="m"),
        hub.BlockStart(0, "text"),
        hub.Delta(0, "<script>alert(1)</script>"),
        hub.BlockStop(0),
        hub.BlockStart(1, "tool_call", id="call_1", name="get_weather"),
        hub.Delta(1, '{"city": "Paris"}'),
        hub.BlockStop(1),
        hub.Usage(5, 7),
        hub.Finish("tool_use"),
        hub.ResponseEnd(),
    ]


def test_fanout_writes_six_valid_streams():
    request = hub.Request(model="m", messages=[hub.Message("user", [hub.TextPart("hi")])], stream=True)
    fanout = Fanout(request)
    panes = {name: "" for name in dialects.NAMES}
    for event in _turn():
        for name, text in fanout.feed(event).items():
            panes[name] += text
    checks = fanout.check()
    assert set(checks) == set(dialects.NAMES)
    assert all(c["ok"] for c in checks.values()), checks
    for name, text in panes.items():  # what the page shows is exactly what decodes back
        response = hub.assemble(decode_all(dialects.get(name).StreamDecoder(), text.encode()))
        assert response.blocks[0].text == "<script>alert(1)</script>"


def test_parse_request_names_the_field():
    models = config.default_config().models
    ok = parse_request({"model": "local", "prompt": "hi", "system": "be brief", "max_tokens": 5}, models)
    assert [m.role for m in ok.messages] == ["system", "user"] and ok.max_tokens == 5
    for body, field in [
        ({"model": "nope", "prompt": "hi"}, "model"),
        ({"model": "local", "prompt": " "}, "prompt"),
        ({"model": "local", "prompt": "hi", "tools": [{}]}, "tools[0]"),
        ({"model": "local", "prompt": "hi", "tools": [{"name": "f"}], "tool_choice": "g"}, "tool_choice"),
        ({"model": "local", "prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ]:
        with pytest.raises(ValueError, match=field.replace("[", r"\[")):
            parse_request(body, models)


# --------------------------------------------------------------------------- traffic core


def test_traffic_ring_is_bounded_and_keeps_no_prompt_by_default():
    log = TrafficLog(3)
    request = hub.Request(model="m", messages=[hub.Message("user", [hub.TextPart("secret prompt")])])
    for _ in range(5):
        entry = log.begin("up", request, "openai-chat", started=0.0)
        entry.observe(b"x" * 10, [hub.ResponseStart()], now=0.1)
        entry.observe(b"y", [hub.BlockStart(0, "text"), hub.Delta(0, "a")], now=0.25)
        entry.observe(None, [hub.Usage(4, 10), hub.Finish("end_turn"), hub.ResponseEnd()], now=1.25)
        entry.end(now=1.25)
    rows = [e.summary() for e in log.recent()]
    assert [r["id"] for r in rows] == [5, 4, 3]
    assert rows[0]["ttft_ms"] == 250.0 and rows[0]["duration_ms"] == 1250.0 and rows[0]["tokens_per_s"] == 10.0
    assert rows[0]["status"] == "ok" and rows[0]["prompt"] is None and rows[0]["bytes"] == 11
    assert "secret" not in json.dumps(log.get(5).detail())
    assert log.totals() == [
        {"model": "m", "upstream": "up", "requests": 3, "errors": 0, "input_tokens": 12, "output_tokens": 30}
    ]
    kept = TrafficLog(3, keep_prompts=True).begin("up", request, "openai-chat")
    assert kept.prompt == "secret prompt"


# --------------------------------------------------------------------------- the API, served


class Scripted:
    """An in-process upstream answering with a fixed turn (optionally an error mid-stream)."""

    def __init__(self, name: str, mode: str = "ok"):
        self.name = name
        self.mode = mode
        self.timeouts = config.Timeouts(first_byte=5, idle=60, total=60)
        self.closed = False

    async def stream(self, request: hub.Request):
        if self.mode == "refuse":
            raise errors.UpstreamError("queue full", status=429, type="rate_limit")
        for event in _turn()[:4]:
            yield event
        if self.mode == "hang":
            try:
                await asyncio.sleep(30)
            finally:
                self.closed = True  # the console's Stop reached the upstream
        if self.mode == "break":
            yield hub.Error("upstream overloaded mid-stream", "overloaded", status=529)
            yield hub.ResponseEnd()
            return
        for event in _turn()[4:]:
            yield event


def _raw_config(gateway: dict | None = None) -> dict:
    return {
        "gateway": gateway or {},
        "upstreams": {
            "script": {"format": "local"},
            "broken": {"format": "local"},
            "busy": {"format": "local"},
            "hangs": {"format": "local"},
            "vendor": {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-SECRET-upstream"},
        },
        "models": [
            {"name": "scripted", "upstream": "script"},
            {"name": "breaks", "upstream": "broken"},
            {"name": "busy-then-ok", "upstreams": ["busy", "script"]},
            {"name": "hangs", "upstream": "hangs"},
        ],
    }


def _app(gateway: dict | None = None):
    fakes = {
        "script": Scripted("script"),
        "broken": Scripted("broken", "break"),
        "busy": Scripted("busy", "refuse"),
        "hangs": Scripted("hangs", "hang"),
    }
    app = create_app(config.parse(_raw_config(gateway)), upstreams=fakes)
    app.state.gateway.upstreams["vendor"] = type("V", (), {"name": "vendor", "format": "openai-chat"})()
    return app


@pytest.fixture(scope="module")
def open_gw():
    with serving(_app()) as server:
        yield server


def _ndjson(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def test_page_and_assets_are_served_with_a_strict_csp(open_gw):
    page = HTTP.get(open_gw.url + "/ui")
    assert page.status_code == 200 and 'data-test="prompt"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name in ("app.js", "app.css", "favicon.svg"):
        assert HTTP.get(f"{open_gw.url}/ui/static/{name}").status_code == 200
    assert HTTP.get(open_gw.url + "/ui/static/../app.py").status_code == 404
    script = HTTP.get(open_gw.url + "/ui/static/app.js").text
    assert not re.search(r"\.(inner|outer)HTML\s*=|insertAdjacentHTML|document\.write", script)  # text only


def test_info_never_shows_upstream_secrets(open_gw):
    text = HTTP.get(open_gw.url + "/ui/api/info").text
    info = json.loads(text)
    assert info["models"] == ["scripted", "breaks", "busy-then-ok", "hangs"]
    assert info["dialects"] == list(dialects.NAMES)
    assert "SECRET" not in text and "127.0.0.1:9" not in text


def test_playground_streams_every_dialect(open_gw):
    body = {"model": "scripted", "prompt": "hi", "max_tokens": 16}
    lines = _ndjson(HTTP.post(open_gw.url + "/ui/api/playground", json=body, headers=CONSOLE))
    assert lines[0]["kind"] == "start" and lines[-1]["kind"] == "end"
    events = [line for line in lines if line["kind"] == "event"]
    assert [e["hub"]["event"] for e in events] == [type(e).__name__ for e in _turn()]
    assert all(set(e["out"]) == set(dialects.NAMES) for e in events)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    end = lines[-1]
    assert all(c["ok"] for c in end["checks"].values())
    assert end["usage"]["output_tokens"] == 7 and end["finish"] == "tool_use" and end["ttft_ms"] is not None


def test_playground_error_mid_stream_and_fallback(open_gw):
    url = open_gw.url + "/ui/api/playground"
    lines = _ndjson(HTTP.post(url, json={"model": "breaks", "prompt": "hi"}, headers=CONSOLE))
    assert lines[-1]["error"]["type"] == "overloaded"
    assert all(c["ok"] for c in lines[-1]["checks"].values())  # each dialect's error event + terminal event
    lines = _ndjson(HTTP.post(url, json={"model": "busy-then-ok", "prompt": "hi"}, headers=CONSOLE))
    assert [line["kind"] for line in lines[:3]] == ["start", "fallback", "start"]
    assert lines[-1]["error"] is None and lines[-1]["finish"] == "tool_use"


def test_playground_stop_cancels_the_upstream(open_gw):
    body = {"model": "hangs", "prompt": "hi"}
    with HTTP.stream("POST", open_gw.url + "/ui/api/playground", json=body, headers=CONSOLE) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines))["kind"] == "start"
        assert json.loads(next(lines))["hub"]["event"] == "ResponseStart"
    # The page's Stop is this: the connection closes. The upstream hears it, Traffic says so.
    gateway = open_gw.app.state.gateway
    assert wait_for(lambda: gateway.upstreams["hangs"].inner.closed, timeout=10)
    assert wait_for(
        lambda: (
            [
                e["status"]
                for e in HTTP.get(open_gw.url + "/ui/api/traffic").json()["entries"]
                if e["upstream"] == "hangs"
            ]
            == ["cancelled"]
        ),
        timeout=10,
    )


def test_playground_bad_requests_are_4xx(open_gw):
    for body, status in ((b"{", 400), (b"[]", 400), (json.dumps({"model": "nope", "prompt": "x"}).encode(), 404)):
        r = HTTP.post(open_gw.url + "/ui/api/playground", content=body, headers=CONSOLE)
        assert r.status_code == status and r.json()["error"]["message"]


def test_translate_api(open_gw):
    data = (CORPUS / SAMPLES["openai-chat"]).read_bytes()
    url = open_gw.url + "/ui/api/translate"
    r = HTTP.post(url, params={"from": "auto", "to": "gemini"}, content=data, headers=CONSOLE)
    report = r.json()
    assert r.status_code == 200 and report["source"] == "openai-chat" and report["ok"]
    assert report["output"] == _expected("openai-chat", "gemini", data)
    r = HTTP.post(open_gw.url + "/ui/api/translate", params={"to": "klingon"}, content=data, headers=CONSOLE)
    assert r.status_code == 400 and "klingon" in r.json()["error"]["message"]
    r = HTTP.post(open_gw.url + "/ui/api/translate", content=b"<html>nope</html>", headers=CONSOLE)
    assert r.status_code == 200 and r.json()["fatal"].startswith("This is not an SSE stream")


def test_traffic_records_gateway_requests(open_gw):
    body = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "a private question"}]}
    r = HTTP.post(open_gw.url + "/v1/chat/completions", json=body)
    assert r.status_code == 200
    HTTP.post(open_gw.url + "/v1/messages", json=dict(body, model="busy-then-ok", max_tokens=5))
    listing = HTTP.get(open_gw.url + "/ui/api/traffic").json()
    rows = [e for e in listing["entries"] if e["dialect"] != "console"]
    chat = next(e for e in rows if e["dialect"] == "openai-chat")
    assert chat["status"] == "ok" and chat["output_tokens"] == 7 and chat["ttft_ms"] is not None
    assert chat["duration_ms"] >= chat["ttft_ms"] and chat["finish"] == "tool_use" and chat["prompt"] is None
    refused = next(e for e in rows if e["upstream"] == "busy")
    assert refused["status"] == "error" and refused["error"]["status"] == 429
    assert "private" not in json.dumps(listing)
    detail = HTTP.get(f"{open_gw.url}/ui/api/traffic/{chat['id']}").json()
    assert detail["timeline"] and detail["timeline"][0]["t_ms"] >= 0
    assert HTTP.get(open_gw.url + "/ui/api/traffic/999999").status_code == 404


# --------------------------------------------------------------------------- access


def test_console_is_off_with_api_keys_and_no_ui_key():
    with serving(_app({"api_keys": ["client-key"]})) as server:
        assert HTTP.get(server.url + "/ui").status_code == 404
        r = HTTP.get(server.url + "/ui/api/info", headers={"authorization": "Bearer client-key"})
        assert r.status_code == 404 and "ui_key" in r.json()["error"]["message"]


def test_console_needs_the_admin_key(tmp_path: Path):
    with serving(_app({"api_keys": ["client-key"], "ui_key": "admin-key-0123456789"})) as server:
        client = httpx.Client(base_url=server.url, timeout=30)
        assert client.get("/ui").status_code == 401  # the login form
        assert client.get("/ui/api/info").status_code == 401
        assert client.get("/ui/api/info", headers={"authorization": "Bearer client-key"}).status_code == 401
        assert client.get("/ui/api/info", headers={"authorization": "Bearer admin-key-0123456789"}).status_code == 200
        assert client.post("/ui/login", data={"key": "wrong"}).status_code == 401
        r = client.post("/ui/login", data={"key": "admin-key-0123456789"})
        assert r.status_code == 303 and "admin-key-0123456789" not in r.headers["set-cookie"]
        assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
        assert client.get("/ui").status_code == 200 and client.get("/ui/api/traffic").status_code == 200
        # With the cookie alone, a POST must come from the page (the header a cross-site form cannot send).
        assert client.post("/ui/api/translate", content=b"data: x\n\n").status_code == 403
        assert client.post("/ui/api/translate", content=b"data: x\n\n", headers=CONSOLE).status_code == 200
        # The gateway's own endpoints still want a client key, not the console's.
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=body).status_code == 401


def test_ui_config_keys_are_checked():
    with pytest.raises(config.ConfigError, match=r"gateway\.ui_traffic"):
        config.parse({"gateway": {"ui_traffic": -1}})
    with pytest.raises(config.ConfigError, match=r"gateway\.ui:"):
        config.parse({"gateway": {"ui": "yes"}})
    cfg = config.parse({"gateway": {"ui_key": "${UIK}"}}, {"UIK": "k" * 16})
    assert cfg.gateway.ui_key == "k" * 16


def test_traffic_counts_events_and_bytes_past_the_timeline_limit():
    from llmbridge.gateway import _traffic

    log = TrafficLog(2)
    entry = log.begin("up", hub.Request(model="m"), "openai-chat", started=10.0)
    hook = entry.hook
    hook((b"", []))  # a batch without events (no complete event yet)
    hook((b"abc", [hub.Error("boom", "overloaded", status=529)]))  # before the first token: kept
    hook((b"de", [hub.BlockStart(0, "text"), hub.Delta(0, "a"), hub.Delta(0, "b")]))
    for _ in range(_traffic.TIMELINE_LIMIT + 5):
        hook((b"xy", [hub.Delta(0, "c")]))
    hook((None, [hub.Usage(1, 2), hub.Finish("stop")]))
    entry.end(now=12.0)
    row = entry.summary()
    assert row["events"] == 1 + 3 + _traffic.TIMELINE_LIMIT + 5 + 2
    assert row["bytes"] == 3 + 2 + 2 * (_traffic.TIMELINE_LIMIT + 5)
    assert row["error"] == {"type": "overloaded", "message": "boom", "status": 529} and row["status"] == "error"
    assert row["duration_ms"] == 2000.0 and row["ttft_ms"] is not None
    detail = entry.detail()
    assert len(detail["timeline"]) == _traffic.TIMELINE_LIMIT and detail["timeline_dropped"] == 9
    first = detail["timeline"][:3]
    assert [r["what"] for r in first] == ["end of body", "Error", "BlockStart, Delta x2"]
    assert [r["bytes"] for r in first] == [0, 3, 2]
    assert all(r["t_ms"] >= 0 for r in detail["timeline"])


def test_traffic_entry_ends_from_an_exchange_or_a_failure():
    from llmbridge.gateway._failures import UpstreamFailed

    log = TrafficLog(3)
    request = hub.Request(model="m")

    class Over:  # what Entry.end reads off an Exchange
        relay, ended, error = True, True, None
        usage, finish = hub.Usage(3, 4), hub.Finish("stop")

    done = []
    entry = log.begin("up", request, "openai-chat", started=0.0)
    entry.then(done.append)(Over)
    assert done == [Over]
    row = entry.summary()
    assert (row["status"], row["relay"], row["finish"], row["output_tokens"]) == ("ok", True, "stop", 4)
    cancelled = log.begin("up", request, "openai-chat")
    cancelled.fail(asyncio.CancelledError())
    assert cancelled.summary()["status"] == "cancelled" and cancelled.summary()["relay"] is False
    refused = log.begin("up", request, "openai-chat")
    refused.fail(UpstreamFailed(hub.Error("busy", "rate_limit", status=429)))
    assert refused.summary()["status"] == "error" and refused.summary()["error"]["status"] == 429
