"""``llmbridge serve`` as a real process on a loopback port: no credential in any log line
(the real uvicorn access log, captured), client timeouts and the connection cap over raw
sockets, ``--workers N``, and a clean exit on SIGTERM."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from llmbridge import replay
from llmbridge.gateway._server import raise_open_files_limit, redact
from tests.conftest import CORPUS
from tests.gateway_util import serving, wait_for

GATEWAY_KEY = "sk-gw-SECRET-0001"
UPSTREAM_KEY = "up-SECRET-0002"
WAIT = 10.0  # the bound on every wait for the server to act (the timeouts under test are 1 s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(upstream_url: str, gateway: dict) -> str:
    lines = ["[gateway]"]
    for key, value in gateway.items():
        lines.append(f"{key} = {value!r}".replace("'", '"'))
    lines += [
        "[upstreams.chat]",
        'format = "openai-chat"',
        f'base_url = "{upstream_url}/v1"',
        f'api_key = "{UPSTREAM_KEY}"',
        "[[models]]",
        'name = "m"',
        'upstream = "chat"',
        'upstream_model = "hf-novita-text"',
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def served(tmp_path: Path, gateway: dict, workers: int = 1) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """``llmbridge serve`` in a subprocess over a replay upstream; (url, process, log file).
    Stopped with SIGTERM on exit; the log holds its whole stdout and stderr."""
    with serving(replay.create_app(CORPUS, seed=2)) as upstream:
        cfg = tmp_path / f"gateway-{workers}.toml"
        cfg.write_text(_toml(upstream.url, gateway))
        port = _free_port()
        log = tmp_path / f"serve-{port}.log"
        command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(cfg), "--port", str(port)]
        if workers > 1:
            command += ["--workers", str(workers)]
        with log.open("wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_for(lambda: _up(url) or proc.poll() is not None, timeout=60, interval=0.1) or proc.poll():
                raise RuntimeError(f"llmbridge serve did not start:\n{log.read_text()}")
            yield url, proc, log
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (reads EOF) within WAIT seconds."""
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _get(sock: socket.socket, path: str = "/healthz") -> int:
    """One keep-alive GET on ``sock``; its status (the body is read and dropped)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += sock.recv(4096)
    return int(head.split(b" ", 2)[1])


# --------------------------------------------------------------------------- 5: no secrets in logs


def test_no_credential_reaches_any_log_line(tmp_path):
    gateway = {"api_keys": [GATEWAY_KEY]}
    with served(tmp_path, gateway) as (url, proc, log):
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        gemini = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        with httpx.Client(base_url=url, timeout=WAIT) as http:
            assert http.get(f"/v1beta/models?key={GATEWAY_KEY}").status_code == 200
            assert http.get("/v1beta/models?key=wrong-SECRET-0003").status_code == 401
            path = f"/v1beta/models/m:streamGenerateContent?alt=sse&key={GATEWAY_KEY}"
            assert http.post(path, json=gemini).status_code == 200
            headers = {"authorization": f"Bearer {GATEWAY_KEY}"}
            assert http.post("/v1/chat/completions", json=chat, headers=headers).status_code == 200
            assert http.post("/v1/messages", json=chat, headers={"x-api-key": "wrong-SECRET-0004"}).status_code == 401
            assert http.get("/healthz?access_token=tok-SECRET-0005&x=1").status_code == 200
    text = log.read_text()
    assert _stopped_cleanly(proc.returncode, text)
    assert "SECRET" not in text, text
    # the access log was there to leak it: each request has its line, with the value masked
    assert '"GET /v1beta/models?key=*** HTTP/1.1" 200' in text, text
    assert '"GET /healthz?access_token=***&x=1 HTTP/1.1" 200' in text, text
    assert "alt=sse&key=***" in text


def test_redact_masks_what_credentials_look_like():
    assert redact("GET /x?key=abc&alt=sse") == "GET /x?key=***&alt=sse"
    assert redact("GET /x?api_key=abc") == "GET /x?api_key=***"
    assert redact("Authorization: Bearer sk-abc.def") == "Authorization: ***"
    assert redact("bearer sk-abc") == "bearer ***"
    assert redact("x-goog-api-key=abc other") == "x-goog-api-key=*** other"
    assert redact("GET /v1/models?alt=sse 200") == "GET /v1/models?alt=sse 200"


# --------------------------------------------------------------------------- 6: client timeouts, connection cap


def test_silent_and_half_sent_connections_are_closed(tmp_path):
    gateway = {"header_timeout": 1, "idle_timeout": 1}
    with served(tmp_path, gateway) as (url, _, _log):
        silent = [_connect(url) for _ in range(5)]
        half = [_connect(url) for _ in range(5)]
        for sock in half:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        idle = _connect(url)
        assert _get(idle) == 200  # a served keep-alive connection then idles out
        try:
            assert all(_closed_by_server(s) for s in silent), "a silent connection stayed open"
            assert all(_closed_by_server(s) for s in half), "a half-sent request head stayed open"
            assert _closed_by_server(idle), "an idle keep-alive connection stayed open"
        finally:
            for sock in [*silent, *half, idle]:
                sock.close()
        assert _up(url)  # and the server serves on


def test_a_stalled_request_body_is_closed_without_a_traceback(tmp_path):
    gateway = {"header_timeout": 30, "idle_timeout": 1}
    with served(tmp_path, gateway) as (url, _, log):
        with _connect(url) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                b'content-length: 500\r\n\r\n{"model": "m", "mess'
            )
            assert _closed_by_server(sock), "a stalled request body kept its connection"
        with _connect(url) as sock:  # a slow body that keeps coming is served
            body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % len(body)
            )
            for i in range(0, len(body), 16):
                sock.sendall(body[i : i + 16])
                time.sleep(0.05)
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
    assert "Traceback" not in log.read_text()


def test_connections_past_the_cap_get_503(tmp_path):
    gateway = {"max_connections": 3, "header_timeout": 30, "idle_timeout": 30}
    with served(tmp_path, gateway) as (url, _, _log):
        held = [_connect(url) for _ in range(3)]
        try:
            assert [_get(s) for s in held] == [200, 200, 200]
            extra = _connect(url)
            assert _get(extra) == 503
            extra.close()
            held.pop().close()  # room for one again, once the server sees the close

            def one_more() -> bool:
                with _connect(url) as sock:
                    return _get(sock) == 200

            assert wait_for(one_more, timeout=WAIT, interval=0.05)
        finally:
            for sock in held:
                sock.close()


def test_open_files_soft_limit_is_raised():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, 256) if hard == resource.RLIM_INFINITY else min(soft, hard, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
    try:
        now_soft, now_hard = raise_open_files_limit()
        assert now_hard == hard
        assert now_soft == hard if hard != resource.RLIM_INFINITY else now_soft > lower
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --------------------------------------------------------------------------- serve --workers N


def test_workers_share_the_port_and_stop_on_sigterm(tmp_path):
    with served(tmp_path, {}, workers=2) as (url, proc, log):
        pids: set[int] = set()
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            # a new connection each time, so the kernel hands it to whichever worker accepts
            with httpx.Client(timeout=WAIT) as http:
                pids.add(http.get(url + "/healthz", headers={"connection": "close"}).json()["worker"])
        assert len(pids) == 2 and proc.pid not in pids, (pids, log.read_text())
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(4):  # real requests through the upstream, whichever worker takes them
            response = httpx.post(url + "/v1/chat/completions", json=chat, timeout=WAIT)
            assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
        proc.send_signal(signal.SIGTERM)
        assert _stopped_cleanly(proc.wait(30), log.read_text())
    for pid in pids:  # the workers are gone too
        assert wait_for(lambda pid=pid: not _alive(pid), timeout=WAIT), f"worker {pid} outlived SIGTERM"
    text = log.read_text()
    assert "Traceback" not in text, text


def _stopped_cleanly(returncode: int, log: str) -> bool:
    """uvicorn shuts down gracefully on SIGTERM, then re-raises the signal to exit by it."""
    assert returncode in (0, -signal.SIGTERM), (returncode, log)
    assert "Finished server process" in log and "Traceback" not in log, log
    return True


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone, only not yet reaped


@pytest.mark.parametrize("bad", [{"max_connections": 0}, {"header_timeout": "x"}, {"extensions": "yes"}])
def test_serve_options_are_checked(bad):
    from llmbridge.gateway import config

    key = next(iter(bad))
    with pytest.raises(config.ConfigError, match=rf"gateway\.{key}"):
        config.parse({"gateway": bad})


def test_redact_leaves_token_counts_alone():
    line = "rep/m -> openai-chat: 12 events, tokens in=5 out=7, max_tokens: must be an integer"
    assert redact(line) == line
