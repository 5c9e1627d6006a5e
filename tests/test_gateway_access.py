"""Access hardening outside the request pipeline (issue 21): the console's key and sessions,
throttled key guesses, hostile admin input, secrets only in headers on /admin, the
WebSocket's Origin on a keyless gateway, bounded strings in metrics and the ledger.

Real servers (uvicorn on 127.0.0.1) and the real SQLite ledger; clocks of the throttle and
the session table are advanced by hand, so nothing waits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from llmbridge import cli
from llmbridge.gateway import config, create_app
from llmbridge.gateway._teams._guesses import Guesses
from llmbridge.gateway._ui._sessions import Sessions
from tests.gateway_util import serving
from tests.test_ui import Scripted

HTTP = httpx.Client(timeout=30)
MASTER = "master-" + "m" * 24
ADMIN = {"authorization": f"Bearer {MASTER}"}
UI_KEY = "console-" + "u" * 24
STATIC = "static-" + "s" * 24
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _app(gateway: dict, tmp: Path | None = None):
    gw = dict(gateway)
    if "master_key" in gw:
        gw.setdefault("database_url", f"sqlite:///{tmp / 'ledger.db'}")
        gw.setdefault("ledger_flush_seconds", 0.05)
    raw = {
        "gateway": gw,
        "upstreams": {"script": {"format": "local"}},
        "models": [{"name": "scripted", "upstream": "script"}],
    }
    script = Scripted("script")
    app = create_app(config.parse(raw, env={}), upstreams={"script": script})
    return app


def _clocked(server) -> Clock:
    """Hand-driven clocks for the server's throttle and console sessions."""
    clock = Clock()
    gateway = server.app.state.gateway
    gateway.pipeline.guesses.clock = clock
    return clock


def _no_error_lines(caplog) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


# --------------------------------------------------------------------------- 1. console access


def test_console_is_off_with_master_key_and_no_ui_key(tmp_path):
    with serving(_app({"master_key": MASTER}, tmp_path)) as server:
        assert HTTP.get(server.url + "/ui").status_code == 404
        r = HTTP.get(server.url + "/ui/api/traffic")
        assert r.status_code == 404 and "ui_key" in r.json()["error"]["message"]
        r = HTTP.post(server.url + "/ui/api/playground", json={"model": "scripted", "prompt": "hi"})
        assert r.status_code == 404 and not server.app.state.gateway.traffic.recent()
        assert HTTP.get(server.url + "/ui/api/info", headers=ADMIN).status_code == 404  # the master key: no console
        # The client endpoints are unchanged: a key is needed.
        assert HTTP.post(server.url + "/v1/chat/completions", json=CHAT).status_code == 401


def test_traffic_needs_the_console_key_when_keys_are_set(tmp_path):
    with serving(_app({"master_key": MASTER, "ui_key": UI_KEY}, tmp_path)) as server:
        assert HTTP.post(server.url + "/v1/chat/completions", json=CHAT, headers=ADMIN).status_code == 200
        assert HTTP.get(server.url + "/ui/api/traffic").status_code == 401
        assert HTTP.get(server.url + "/ui/api/traffic", headers=ADMIN).status_code == 401  # master key: no
        r = HTTP.get(server.url + "/ui/api/traffic", headers={"authorization": f"Bearer {UI_KEY}"})
        assert r.status_code == 200 and r.json()["entries"]


def test_open_console_takes_posts_only_from_its_page():
    """Keyless: any site's form or no-cors fetch could POST to a local console (paid upstream
    calls); none can send the console's header."""
    with serving(_app({})) as server:
        body = json.dumps({"model": "scripted", "prompt": "hi"})
        r = HTTP.post(server.url + "/ui/api/playground", content=body, headers={"content-type": "text/plain"})
        assert r.status_code == 403 and "x-llmbridge-console" in r.json()["error"]["message"]
        assert HTTP.post(server.url + "/ui/api/translate", content=b"data: x\n\n").status_code == 403
        assert not HTTP.get(server.url + "/ui/api/traffic").json()["entries"]  # nothing went upstream
        r = HTTP.post(server.url + "/ui/api/playground", content=body, headers={"x-llmbridge-console": "1"})
        assert r.status_code == 200


@pytest.mark.parametrize(
    ("gateway", "match"),
    [
        ({"ui_key": "a"}, r"gateway\.ui_key: must be at least 16"),
        ({"ui_key": "short-key-15chr"}, r"gateway\.ui_key: must be at least 16"),
        ({"ui_key": STATIC, "api_keys": [STATIC]}, r"gateway\.ui_key: must differ"),
        ({"ui_key": MASTER, "master_key": MASTER}, r"gateway\.ui_key: must differ from master_key"),
        ({"ui_session_hours": 0}, r"gateway\.ui_session_hours"),
        ({"ui_session_hours": True}, r"gateway\.ui_session_hours"),
        ({"auth_failures_per_minute": -1}, r"gateway\.auth_failures_per_minute"),
        ({"allowed_origins": "https://x.example"}, r"gateway\.allowed_origins"),
        ({"allowed_origins": ["x.example"]}, r"gateway\.allowed_origins\[0\]"),
    ],
)
def test_weak_or_malformed_console_settings_are_config_errors(gateway, match):
    with pytest.raises(config.ConfigError, match=match):
        config.parse({"gateway": gateway}, env={})


def test_ui_key_from_the_environment_is_checked_too():
    with pytest.raises(config.ConfigError, match=r"gateway\.ui_key"):
        config.parse({"gateway": {"ui_key": "${UIK}"}}, {"UIK": "k"})
    cfg = config.parse({"gateway": {"ui_key": "${UIK}", "allowed_origins": ["HTTPS://App.Example/"]}}, {"UIK": UI_KEY})
    assert cfg.gateway.ui_key == UI_KEY and cfg.gateway.allowed_origins == ("https://app.example",)


# --------------------------------------------------------------------------- 2. sessions


def _login(client: httpx.Client, headers: dict | None = None) -> httpx.Response:
    r = client.post("/ui/login", data={"key": UI_KEY}, headers=headers or {})
    assert r.status_code == 303, r.text
    return r


def test_sessions_are_random_expire_and_end_at_logout():
    with serving(_app({"api_keys": [STATIC], "ui_key": UI_KEY})) as server:
        clock = Clock()
        console_sessions = _console(server).sessions
        console_sessions.clock = clock
        a = httpx.Client(base_url=server.url, timeout=30)
        b = httpx.Client(base_url=server.url, timeout=30)
        first = _login(a)
        _login(b)
        cookie = first.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert "max-age=43200" in cookie and "secure" not in cookie  # plain http: no Secure
        assert a.cookies["llmbridge_console"] != b.cookies["llmbridge_console"]  # random, not a function of the key
        assert UI_KEY not in first.headers["set-cookie"]
        assert a.get("/ui/api/info").status_code == 200 and b.get("/ui/api/info").status_code == 200
        # Logout ends that session on the server: the old cookie opens nothing, the other session lives.
        old = a.cookies["llmbridge_console"]
        assert a.post("/ui/logout").status_code == 303
        stale = httpx.Client(base_url=server.url, timeout=30, cookies={"llmbridge_console": old})
        assert stale.get("/ui/api/info").status_code == 401 and stale.get("/ui").status_code == 401
        assert b.get("/ui/api/info").status_code == 200
        # Sessions expire: 12 hours later the cookie is refused.
        clock.now += 12 * 3600 + 1
        assert b.get("/ui/api/info").status_code == 401
        assert len(console_sessions) == 0


def test_session_cookie_is_secure_over_tls():
    """uvicorn trusts X-Forwarded-Proto from loopback (FORWARDED_ALLOW_IPS): the scope's scheme is https."""
    with serving(_app({"ui_key": UI_KEY, "ui_session_hours": 1})) as server:
        client = httpx.Client(base_url=server.url, timeout=30)
        cookie = _login(client, {"x-forwarded-proto": "https"}).headers["set-cookie"].lower()
        assert "; secure" in cookie and "max-age=3600" in cookie


def test_session_table_is_bounded():
    async def run() -> None:
        clock = Clock()
        sessions = Sessions(ttl=60, max_sessions=100, clock=clock)
        tokens = [await sessions.start() for _ in range(250)]
        assert len(sessions) == 100 and len(set(tokens)) == 250
        assert not await sessions.valid(tokens[0]) and await sessions.valid(tokens[-1])
        assert not await sessions.valid("x" * 100_000) and not await sessions.valid("")
        clock.now += 61
        await sessions.start()
        assert len(sessions) == 1  # the expired ones are gone

    asyncio.run(run())


@pytest.fixture(params=["sqlite", "postgres"])
def shared_db(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    from tests.teams_util import postgres_server

    with postgres_server(tmp_path) as url:
        yield url


def test_with_master_key_sessions_live_in_the_database_shared_by_replicas(tmp_path, shared_db):
    """Two gateways on one database (two workers or replicas): a login on one holds on the other,
    a logout on either ends it on both; the table is bounded."""
    gateway = {"master_key": MASTER, "ui_key": UI_KEY, "database_url": shared_db}
    with serving(_app(gateway, tmp_path)) as a, serving(_app(gateway, tmp_path)) as b:
        on_a = httpx.Client(base_url=a.url, timeout=30)
        _login(on_a)
        token = on_a.cookies["llmbridge_console"]
        on_b = httpx.Client(base_url=b.url, timeout=30, cookies={"llmbridge_console": token})
        assert on_b.get("/ui/api/info").status_code == 200
        assert len(_console(a).sessions) == 0  # nothing in either process's memory
        assert on_b.post("/ui/logout").status_code == 303
        assert on_a.get("/ui/api/info").status_code == 401
        # Expiry is the database's row, read by any replica.
        _login(on_a)
        clock = Clock()
        clock.now = time.time() + 12 * 3600 + 1
        _console(b).sessions.clock = clock
        stale = httpx.Client(
            base_url=b.url, timeout=30, cookies={"llmbridge_console": on_a.cookies["llmbridge_console"]}
        )
        assert stale.get("/ui/api/info").status_code == 401
        # Bounded: past max_sessions the oldest end.
        _console(a).sessions.max_sessions = 5
        tokens = []
        for _ in range(8):
            client = httpx.Client(base_url=a.url, timeout=30)
            _login(client)
            tokens.append(client.cookies["llmbridge_console"])
        codes = [httpx.get(a.url + "/ui/api/info", cookies={"llmbridge_console": t}).status_code for t in tokens]
        assert codes == [401, 401, 401, 200, 200, 200, 200, 200]


def _console(server):
    for route in server.app.routes:
        if getattr(route, "path", "") == "/ui/api/info":
            return route.endpoint.__self__
    raise AssertionError("no console route")


# --------------------------------------------------------------------------- 3. guesses


def test_key_guesses_are_throttled_then_the_right_key_works():
    with serving(_app({"api_keys": [STATIC]})) as server:
        clock = _clocked(server)
        codes = [
            HTTP.get(server.url + "/v1/models", headers={"authorization": f"Bearer guess-{i}"}).status_code
            for i in range(300)
        ]
        assert codes.count(401) == 10 and codes.count(429) == 290
        r = HTTP.get(server.url + "/v1/models", headers={"authorization": f"Bearer {STATIC}"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1  # inside the window: the same answer
        assert r.json()["error"]["type"]
        # The same for every dialect's shape and for the WebSocket upgrade.
        with pytest.raises(InvalidStatus) as exc:
            connect(server.url.replace("http", "ws") + "/v1/stream", additional_headers={"authorization": "Bearer x"})
        assert exc.value.response.status_code == 429
        clock.now += 60  # the window has passed
        r = HTTP.get(server.url + "/v1/models", headers={"authorization": f"Bearer {STATIC}"})
        assert r.status_code == 200
        r = HTTP.post(server.url + "/v1/chat/completions", json=CHAT, headers={"x-api-key": STATIC})
        assert r.status_code == 200


def test_virtual_key_and_admin_guesses_are_throttled(tmp_path):
    with serving(_app({"master_key": MASTER}, tmp_path)) as server:
        clock = _clocked(server)
        codes = [
            HTTP.post(server.url + "/v1/chat/completions", json=CHAT,
                      headers={"authorization": f"Bearer sk-llmb-guess{i}"}).status_code
            for i in range(100)
        ]  # fmt: skip
        assert codes.count(401) == 10 and codes.count(429) == 90
        assert HTTP.get(server.url + "/admin/keys", headers=ADMIN).status_code == 429  # the master key waits too
        metrics = HTTP.get(server.url + "/metrics").text
        assert 'llmbridge_limit_rejections_total{reason="auth_throttled"} 91.0' in metrics
        clock.now += 60
        assert HTTP.get(server.url + "/admin/keys", headers=ADMIN).status_code == 200
        codes = [
            HTTP.get(server.url + "/admin/keys", headers={"authorization": f"Bearer wrong-{i}"}).status_code
            for i in range(50)
        ]
        assert codes.count(401) == 10 and codes.count(429) == 40
        clock.now += 60
        made = HTTP.post(server.url + "/admin/keys", json={"name": "dev"}, headers=ADMIN)
        assert made.status_code == 201
        r = HTTP.post(server.url + "/v1/chat/completions", json=CHAT,
                      headers={"authorization": f"Bearer {made.json()['key']}"})  # fmt: skip
        assert r.status_code == 200


def test_console_login_guesses_are_throttled():
    with serving(_app({"api_keys": [STATIC], "ui_key": UI_KEY})) as server:
        clock = _clocked(server)
        client = httpx.Client(base_url=server.url, timeout=30)
        codes = [client.post("/ui/login", data={"key": f"guess-{i}"}).status_code for i in range(300)]
        assert codes.count(401) == 10 and codes.count(429) == 290
        assert client.post("/ui/login", data={"key": UI_KEY}).status_code == 429
        bearer = client.get("/ui/api/info", headers={"authorization": f"Bearer {UI_KEY}"})
        assert bearer.status_code == 429 and "retry-after" in bearer.headers
        clock.now += 60
        _login(client)
        assert client.get("/ui/api/info").status_code == 200


def test_the_guess_table_is_bounded_and_forgets_full_buckets():
    clock = Clock()
    guesses = Guesses(per_minute=10, max_clients=1000, clock=clock)
    for i in range(20_000):
        guesses.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(guesses) == 1000
    for _ in range(10):
        guesses.failed("192.0.2.1")
    assert guesses.wait("192.0.2.1") == pytest.approx(6.0)
    assert guesses.wait("192.0.2.2") is None
    clock.now += 6
    assert guesses.wait("192.0.2.1") is None  # one more try a 6 s
    clock.now += 600
    guesses.failed("192.0.2.3")
    assert guesses.wait("192.0.2.1") is None and len(guesses) <= 1000
    off = Guesses(per_minute=0)
    for _ in range(100):
        off.failed("x")
    assert off.wait("x") is None and len(off) == 0


# --------------------------------------------------------------------------- 4. hostile admin input


@pytest.fixture
def team(tmp_path):
    with serving(_app({"master_key": MASTER, "auth_failures_per_minute": 0}, tmp_path)) as server:
        made = HTTP.post(server.url + "/admin/keys", json={"name": "dev"}, headers=ADMIN)
        assert made.status_code == 201
        server.virtual = {"authorization": f"Bearer {made.json()['key']}"}
        yield server


HOSTILE_SINCE = [
    "9" * 400 + "d", "9" * 10 + "h", "²d", "-5d", "1e9d", "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00", "\x00", "garbage", "d", " ",
]  # fmt: skip


@pytest.mark.parametrize("since", HOSTILE_SINCE)
def test_hostile_since_is_a_400_or_a_clamped_answer(team, since, caplog):
    caplog.set_level(logging.WARNING)
    for path, headers in (("/v1/key/usage", team.virtual), ("/admin/usage", ADMIN)):
        r = HTTP.get(team.url + path, params={"since": since}, headers=headers)
        assert r.status_code in (200, 400), (path, r.status_code, r.text)
        assert "Traceback" not in r.text and len(r.text) < 2000
        if r.status_code == 400:
            assert r.json()["error"]["message"].startswith("since:")
        else:
            assert r.json()["since"].endswith("Z")
    _no_error_lines(caplog)


def test_span_of_400_digits_is_a_clear_400(team, caplog):
    caplog.set_level(logging.WARNING)
    r = HTTP.get(team.url + "/v1/key/usage", params={"since": "9" * 400 + "d"}, headers=team.virtual)
    assert r.status_code == 400 and "9 digits" in r.json()["error"]["message"]
    _no_error_lines(caplog)


@pytest.mark.parametrize(
    ("params", "field"),
    [({"by": "x" * 10_000}, "by"), ({"key_id": "k" * 10_000}, "key_id"), ({"by": "\x00"}, "by")],
)
def test_hostile_usage_parameters_are_400(team, params, field, caplog):
    caplog.set_level(logging.WARNING)
    r = HTTP.get(team.url + "/admin/usage", params=params, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(field)
    assert len(r.text) < 1000
    _no_error_lines(caplog)


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "x", "budget_usd": 1' + b"0" * 400 + b"}",
        b'{"name": "x", "budget_usd": -1' + b"0" * 400 + b"}",
        b'{"name": "x", "rpm_limit": 1' + b"0" * 400 + b"}",
        b'{"name": "x", "expires_at": "9999-12-31T23:59:59-14:00"}',
        b'{"name": "x", "expires_at": "0001-01-01T00:00:00+14:00"}',
        b'{"name": "x", "expires_at": "' + b"2" * 5000 + b'"}',
        b'{"name": "x", "metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"name": "x", "budget_usd": 1e400}',
        b'{"name": "x", "models": ["' + b"m" * 5000 + b'"]}',
    ],
)
def test_hostile_admin_bodies_are_400_and_store_nothing(team, body, caplog):
    caplog.set_level(logging.WARNING)
    r = HTTP.post(team.url + "/admin/keys", content=body, headers={**ADMIN, "content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "Traceback" not in r.text and len(r.text) < 1000
    listing = HTTP.get(team.url + "/admin/keys", headers=ADMIN)
    assert listing.status_code == 200 and [k["name"] for k in listing.json()["data"]] == ["dev"]
    _no_error_lines(caplog)


def test_console_and_admin_path_parameters_are_bounded(team, caplog):
    caplog.set_level(logging.WARNING)
    with serving(_app({})) as server:  # a keyless gateway: the console is open
        r = HTTP.get(server.url + "/ui/api/traffic/" + "9" * 5000)  # Starlette's {id:int} raised past 4300 digits
        assert r.status_code == 404
        for after in ("9" * 5000, "-1", "x"):
            r = HTTP.get(server.url + "/ui/api/traffic", params={"after": after})
            assert r.status_code == 400 and r.json()["error"]["message"].startswith("after:")
        r = HTTP.post(server.url + "/ui/api/translate", params={"from": "x" * 5000}, content=b"data: x\n\n",
                      headers={"x-llmbridge-console": "1"})  # fmt: skip
        assert r.status_code == 400 and len(r.text) < 1000
    r = HTTP.get(team.url + "/admin/keys/" + "k" * 5000, headers=ADMIN)
    assert r.status_code == 404 and len(r.text) < 1000
    _no_error_lines(caplog)


def test_usage_cli_refuses_a_huge_span_as_bad_usage(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["usage", "--database-url", db, "--since", "9" * 400 + "d"]) == 2
    assert "9 digits" in capsys.readouterr().err
    assert cli.main(["usage", "--database-url", db, "--since", "²d"]) == 2
    assert cli.main(["usage", "--database-url", db, "--since", "0001-01-01T00:00:00+14:00"]) == 0  # clamped


# --------------------------------------------------------------------------- 5. secrets only in headers on /admin


def test_admin_and_self_service_take_secrets_from_headers_only(team):
    r = HTTP.get(team.url + "/admin/keys", params={"key": MASTER})
    assert r.status_code == 401 and "header" in r.json()["error"]["message"]
    assert HTTP.get(team.url + "/admin/keys", headers={"x-api-key": MASTER}).status_code == 200
    assert HTTP.get(team.url + "/admin/usage", params={"key": MASTER}).status_code == 401
    secret = team.virtual["authorization"].removeprefix("Bearer ")
    assert HTTP.get(team.url + "/v1/key", params={"key": secret}).status_code == 401
    assert HTTP.get(team.url + "/v1/key", headers=team.virtual).status_code == 200
    # Gemini's generation endpoints keep ?key= (google-genai and curl examples send it there).
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    r = HTTP.post(team.url + "/v1beta/models/scripted:generateContent", params={"key": secret}, json=body)
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- 6. WebSocket upgrade


def _ws(server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/stream"


def _turn(ws) -> list[dict]:
    ws.send(json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}))
    events = []
    while not events or events[-1]["type"] != "stream.end":
        events.append(json.loads(ws.recv(timeout=10)))
    return events


def test_keyless_websocket_refuses_other_sites_pages():
    with serving(_app({"allowed_origins": ["https://app.example"]})) as server:
        with pytest.raises(InvalidStatus) as exc:
            connect(_ws(server), origin="http://evil.example")
        assert exc.value.response.status_code == 403 and b"allowed_origins" in exc.value.response.body
        for origin in ("null", "http://127.0.0.1.evil.example", f"http://127.0.0.1:{server.port + 1}"):
            with pytest.raises(InvalidStatus):
                connect(_ws(server), origin=origin)
        with connect(_ws(server)) as ws:  # no Origin: not a browser
            assert _turn(ws)[-1]["type"] == "stream.end"
        with connect(_ws(server), origin=f"http://127.0.0.1:{server.port}") as ws:  # the gateway's own page
            assert _turn(ws)[-1]["type"] == "stream.end"
        with connect(_ws(server), origin="https://app.example") as ws:  # configured
            assert _turn(ws)[-1]["type"] == "stream.end"


def test_websocket_with_keys_takes_any_origin_and_logs_no_error(caplog):
    caplog.set_level(logging.DEBUG)
    with serving(_app({"api_keys": [STATIC]})) as server:
        for how in ({"additional_headers": {"authorization": "Bearer wrong-key-1"}}, {}):
            with pytest.raises(InvalidStatus) as exc:
                connect(_ws(server), origin="https://elsewhere.example", **how)
            assert exc.value.response.status_code == 401
        with pytest.raises(InvalidStatus):
            connect(_ws(server) + "?key=wrong-key-2")
        with connect(_ws(server), origin="https://elsewhere.example",
                     additional_headers={"authorization": f"Bearer {STATIC}"}) as ws:  # fmt: skip
            assert _turn(ws)[-1]["type"] == "stream.end"
    server_side = [r for r in caplog.records if not r.name.startswith("websockets.client")]
    assert not [r for r in server_side if r.levelno >= logging.ERROR]
    assert not [r for r in server_side if r.levelno >= logging.WARNING and "websocket" in r.getMessage().lower()]
    assert not [r for r in server_side if "wrong-key" in r.getMessage()]


# --------------------------------------------------------------------------- 7. bounded strings


def test_unknown_models_and_long_request_ids_stay_out_of_metrics_and_the_ledger(team, tmp_path):
    for i in range(5):  # embeddings admit before they look the model up (the pipeline's business)
        r = HTTP.post(team.url + "/v1/embeddings", json={"model": f"garbage-{i}-" + "z" * 2000, "input": "x"},
                      headers=team.virtual)  # fmt: skip
        assert 400 <= r.status_code < 500
    rid = "r" * 100_000
    body = dict(CHAT, metadata={"request_id": rid})
    r = HTTP.post(team.url + "/v1/chat/completions", json=body, headers=team.virtual)
    assert r.status_code == 200
    body = dict(CHAT, metadata={"request_id": "a\x00b\nc" * 10})
    assert HTTP.post(team.url + "/v1/chat/completions", json=body, headers=team.virtual).status_code == 200
    metrics = HTTP.get(team.url + "/metrics").text
    assert "zzzz" not in metrics and len(metrics) < 100_000
    HTTP.get(team.url + "/admin/usage", headers=ADMIN)  # flushes the ledger
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        rows = db.execute("SELECT model, request_id FROM llmb_usage").fetchall()
    assert rows and all(len(model) <= 64 and len(rid) <= 128 for model, rid in rows)
    assert all(r.isprintable() and " " not in r for _, r in rows)
    assert {model for model, _ in rows} <= {"scripted", "(unknown)"}


# --------------------------------------------------------------------------- a WebSocket turn is a request


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ("revoke", 401),
        ("rotate", 401),
        ("rescope", 403),
        ("budget", 403),
        ("expire", 401),
    ],
)
def test_an_open_websocket_stops_at_the_next_turn_when_its_key_changes(team, change, status):
    """The key is checked on every turn, not once at the upgrade: revoked, rotated, re-scoped
    to other models, given a spent budget or expired, the next turn on the same connection is
    refused with error + stream.end, and the connection stays open."""
    made = HTTP.post(team.url + "/admin/keys", json={"name": f"ws-{change}"}, headers=ADMIN).json()
    kid, secret = made["id"], made["key"]
    with connect(_ws(team), additional_headers={"authorization": f"Bearer {secret}"}) as ws:
        assert not [e for e in _turn(ws) if e["type"] == "error"]
        if change == "revoke":
            assert HTTP.delete(team.url + f"/admin/keys/{kid}", headers=ADMIN).status_code in (200, 204)
        elif change == "rotate":
            assert HTTP.post(team.url + f"/admin/keys/{kid}/rotate", headers=ADMIN).status_code == 200
        else:
            patch = {
                "rescope": {"models": ["another-model"]},
                "budget": {"budget_usd": 0},
                "expire": {"expires_at": "2000-01-01T00:00:00Z"},
            }[change]
            r = HTTP.patch(team.url + f"/admin/keys/{kid}", json=patch, headers=ADMIN)
            assert r.status_code == 200, r.text
        events = _turn(ws)
        errors = [e for e in events if e["type"] == "error"]
        assert errors and errors[0].get("llmbridge:status") == status, (change, events)
        assert events[-1]["type"] == "stream.end"
