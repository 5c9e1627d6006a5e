"""Gateway config validation, negotiation rules and the small pure helpers of the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmbridge.gateway import _negotiation as negotiation
from llmbridge.gateway import config as cfg
from llmbridge.gateway._record import confined, safe_name
from llmbridge.gateway._streaming import JSONArrayFraming
from llmbridge.replay import parse_model
from llmbridge.sse import EventBoundaries

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gateway.toml"

GOOD = """
[gateway]
keepalive_seconds = 5
api_keys = ["${GW_KEY}", "literal"]

[upstreams.openai]
format = "openai-chat"
base_url = "https://api.openai.com/v1/"
api_key = "${OPENAI_KEY}"
timeouts = { connect = 3, idle = 30, total = 0 }

[upstreams.claude]
format = "anthropic-messages"
base_url = "https://api.anthropic.com"
api_key = "${ANTHROPIC_KEY:-none}"

[[models]]
name = "gpt"
upstream = "openai"
upstream_model = "gpt-4o"

[[models]]
name = "smart"
upstreams = ["claude", "openai"]
upstream_model = { claude = "claude-sonnet-4", openai = "gpt-4o" }
"""


def test_good_config_parses_with_env_expansion():
    c = cfg.loads(GOOD, env={"GW_KEY": "k1", "OPENAI_KEY": "sk-x"})
    assert c.gateway.keepalive_seconds == 5
    assert c.gateway.api_keys == ("k1", "literal")
    assert c.gateway.max_body_bytes == 10 * 1024 * 1024 and c.gateway.record_dir is None
    openai = c.upstreams["openai"]
    assert openai.base_url == "https://api.openai.com/v1" and openai.api_key == "sk-x"
    assert openai.timeouts == cfg.Timeouts(connect=3.0, first_byte=120.0, idle=30.0, total=None)
    assert c.upstreams["claude"].api_key == "none"
    assert c.models["gpt"].routes == (cfg.Route("openai", "gpt-4o"),)
    assert c.models["smart"].routes == (cfg.Route("claude", "claude-sonnet-4"), cfg.Route("openai", "gpt-4o"))


def test_example_config_is_valid():
    c = cfg.loads(EXAMPLE.read_text(), env={})
    assert c.models and c.upstreams


def test_default_config_serves_the_local_model():
    c = cfg.default_config()
    assert c.upstreams["local"].format == "local"
    assert c.models["local"].routes == (cfg.Route("local", "local"),)


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ('[upstreams.a]\nformat = "openai-chatt"\nbase_url = "http://x"', "upstreams.a.format", "unknown format"),
        ('[upstreams.a]\nbase_url = "http://x"', "upstreams.a.format", "missing"),
        ('[upstreams.a]\nformat = "gemini"\nbase_url = "ftp://x"', "upstreams.a.base_url", "http"),
        (
            '[upstreams.a]\nformat = "gemini"\nbase_url = "http://x"\napi_key = "${NOPE_NOT_SET}"',
            "upstreams.a.api_key",
            "NOPE_NOT_SET",
        ),
        (
            '[upstreams.a]\nformat = "gemini"\nbase_url = "http://x"\ntimeouts = { idle = "5" }',
            "upstreams.a.timeouts.idle",
            "positive number",
        ),
        ('[upstreams.a]\nformat = "gemini"\nbase_url = "http://x"\ntimeout = 3', "upstreams.a.timeout", "unknown key"),
        ('[[models]]\nname = "m"\nupstream = "ghost"', "models[0].upstream", "unknown upstream 'ghost'"),
        ('[[models]]\nupstream = "ghost"', "models[0].name", "missing"),
        ("[gateway]\nkeepalive_seconds = -1", "gateway.keepalive_seconds", "positive"),
        ('[gateway]\nmax_body_bytes = "big"', "gateway.max_body_bytes", "integer"),
        ('[gateway]\napi_keys = "k"', "gateway.api_keys", "array"),
        ("[gateway]\nrecord_dir = 3", "gateway.record_dir", "string"),
        ("models = 3", "models", "array of tables"),
        ("[upstreams]\na = 3", "upstreams.a", "table"),
        ("[gateway\n", "<toml>", ""),
    ],
)
def test_bad_config_names_the_key(text, key, words):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.loads(text, env={})
    assert info.value.key == key
    assert words in str(info.value)
    assert str(info.value).startswith(key)


def test_model_defined_twice():
    text = '[upstreams.a]\nformat = "gemini"\nbase_url = "http://x"\n' + '[[models]]\nname = "m"\nupstream = "a"\n' * 2
    with pytest.raises(cfg.ConfigError, match=r"models\[1\].name"):
        cfg.loads(text, env={})


def test_missing_file():
    with pytest.raises(cfg.ConfigError, match="cannot read"):
        cfg.load("/nonexistent/gateway.toml")


def test_a_config_built_in_code_with_an_http_upstream_but_no_base_url_is_refused_at_start():
    # Found by mypy strict: UpstreamConfig.base_url defaults to None, which only the TOML parser
    # refuses; a Config built in code got as far as the first request, a 500 with a traceback.
    from llmbridge.gateway import create_app

    config = cfg.Config(
        upstreams={"x": cfg.UpstreamConfig("x", "openai-chat")},
        models={"m": cfg.ModelConfig("m", (cfg.Route("x", "m"),))},
    )
    with pytest.raises(cfg.ConfigError, match=r"^upstreams\.x\.base_url: must be an http:// or https:// URL"):
        create_app(config)


# --------------------------------------------------------------------------- negotiation


def test_negotiation():
    assert negotiation.request_dialect(None, "openai-chat") == "openai-chat"
    assert negotiation.request_dialect("application/json; charset=utf-8", "gemini") == "gemini"
    assert negotiation.request_dialect("application/llm-request+json", "anthropic-messages") == "llm-stream"
    with pytest.raises(negotiation.UnsupportedMediaType):
        negotiation.request_dialect("text/plain", "openai-chat")
    with pytest.raises(negotiation.UnsupportedMediaType):
        negotiation.request_dialect("multipart/form-data; boundary=x", "openai-chat")
    accept = 'application/json, text/event-stream; profile="llm-stream-1.0"'
    assert negotiation.wants_standard_stream(accept)
    assert not negotiation.wants_standard_stream("text/event-stream")
    assert not negotiation.wants_standard_stream('text/event-stream; profile="llm-stream-2.0"')
    assert negotiation.response_dialect("openai-chat", "openai-chat", accept) == "llm-stream"
    assert negotiation.response_dialect("openai-chat", "llm-stream", None) == "llm-stream"
    assert negotiation.response_dialect("gemini", "gemini", "*/*") == "gemini"


# --------------------------------------------------------------------------- helpers


def test_safe_names_stay_inside_the_directory(tmp_path):
    for evil in ("../../etc/passwd", "/abs/path", "..", ".hidden", "a/b\\c", "x" * 500, "", "\x00nul"):
        path = confined(tmp_path, safe_name(evil))
        assert path.parent == tmp_path.resolve()
        assert not path.name.startswith(".")
        assert len(path.name) <= 150


def test_event_boundaries_in_one_read():
    def last_end(data: bytes) -> int:
        return EventBoundaries(1 << 20).feed(data)

    assert last_end(b"data: a\n\ndata: b") == 9
    assert last_end(b"data: a\r\n\r\ndata: b\r\n") == 11
    assert last_end(b"data: a\n") == -1
    assert last_end(b"data: a\r\rdata: b\n\n") == 18


def test_event_boundaries_split_at_every_position_and_the_cap():
    body = b"data: one\r\n\r\ndata: two\n\ndata: three\r\r"
    ends = {13, 24, len(body)}
    for cut in range(len(body) + 1):
        scan = EventBoundaries(1 << 20)
        first, second = scan.feed(body[:cut]), scan.feed(body[cut:])
        found = ([first] if first >= 0 else []) + ([cut + second] if second >= 0 else [])
        assert max(found) == len(body), cut
        assert all(f in ends for f in found), cut
        assert scan.pending == 0
    scan = EventBoundaries(10)
    scan.feed(b"data: 12345")
    assert scan.over and scan.pending == 11
    scan = EventBoundaries(10)
    scan.feed(b"data: 1\n\ndata: ")
    assert not scan.over and scan.pending == 6


def test_json_array_framing_any_split():
    body = b'data: {"a":1}\r\n\r\ndata: {"b":"\xc3\xa9"}\r\n\r\n'
    expected = b'[{"a":1},\r\n{"b":"\xc3\xa9"}]'
    for cut in range(len(body) + 1):
        framing = JSONArrayFraming()
        assert framing.feed(body[:cut]) + framing.feed(body[cut:]) + framing.close() == expected
    empty = JSONArrayFraming()
    assert empty.close() == b"[]"


def test_replay_fault_suffixes():
    name, faults = parse_model("claude-text-simple@truncate=100@stall=1.5@delay-ms=2@chunk=7")
    assert name == "claude-text-simple"
    assert (faults.truncate, faults.stall, faults.delay_ms, faults.chunk, faults.status) == (100, 1.5, 2.0, 7, None)
    assert parse_model("x@status=429")[1].status == 429
    with pytest.raises(ValueError, match="bad fault suffix"):
        parse_model("x@explode=1")


def test_serve_refuses_a_bad_config_without_traceback(tmp_path):
    from llmbridge.gateway import serve

    bad = tmp_path / "gw.toml"
    bad.write_text('[[models]]\nname = "m"\nupstream = "nowhere"\n')
    with pytest.raises(SystemExit, match=r"models\[0\]\.upstream: unknown upstream 'nowhere'"):
        serve(str(bad), "127.0.0.1", 0)
