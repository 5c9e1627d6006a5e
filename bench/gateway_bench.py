"""Gateway cost: CPU per stream, and time to first byte / first token added over the direct path.

The replay server (the upstream stand-in) and the gateway run as separate processes, so the
gateway's CPU is read from /proc alone. Per case, sequential streaming requests:

- direct: client -> replay
- relay: anthropic client -> gateway -> anthropic upstream (same dialect, bytes untouched)
- translate: anthropic client -> gateway -> openai-chat upstream, and the reverse

Then a paced run (the upstream sleeps 10 ms per chunk of ~1 event) with 8 concurrent streams,
direct vs through the gateway. ``python -m bench gateway``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from llmbridge import dialects
from llmbridge.dialects.base import decode_all

from .common import CORPUS, table

CASES = [  # (label, client dialect, upstream dialect, capture)
    ("relay  chat->chat", "openai-chat", "openai-chat", "deepseek-reasoner-reasoning-content"),
    ("relay  anthropic->anthropic", "anthropic-messages", "anthropic-messages", "claude-code-execution-20250825"),
    ("chat -> anthropic", "anthropic-messages", "openai-chat", "deepseek-reasoner-reasoning-content"),
    ("anthropic -> chat", "openai-chat", "anthropic-messages", "claude-code-execution-20250825"),
]
PATH = {"openai-chat": "/v1/chat/completions", "anthropic-messages": "/v1/messages"}
BASE = {"openai-chat": "/v1", "anthropic-messages": ""}
N = int(os.environ.get("GATEWAY_BENCH_N", "40"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(code: str, url: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server at {url} did not start")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _body(dialect: str, model: str) -> dict:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    if dialect == "anthropic-messages":
        body["max_tokens"] = 1024
    return body


def _stream(client: httpx.Client, url: str, body: dict, dialect: str | None = None) -> tuple[float, float]:
    """(time to first token, total time); the first token is the first hub Delta the client's
    dialect decoder sees (or the first byte when ``dialect`` is None)."""
    decoder = dialects.get(dialect).StreamDecoder() if dialect else None
    start = time.perf_counter()
    first = None
    with client.stream("POST", url, json=body) as r:
        for chunk in r.iter_raw():
            if first is None and (decoder is None or any(type(e).__name__ == "Delta" for e in decoder.feed(chunk))):
                first = time.perf_counter() - start
    return first or 0.0, time.perf_counter() - start


def run() -> str:
    tmp = Path(tempfile.mkdtemp())
    rport, gport = _port(), _port()
    rurl, gurl = f"http://127.0.0.1:{rport}", f"http://127.0.0.1:{gport}"
    lines = ["[gateway]", "keepalive_seconds = 15"]
    for dialect in PATH:
        lines += [f'[upstreams."{dialect}"]', f'format = "{dialect}"', f'base_url = "{rurl}{BASE[dialect]}"']
    for upstream, capture in dict.fromkeys((u, c) for _, _, u, c in CASES):
        for suffix in ("@chunk=100000", "@chunk=200@delay-ms=10"):
            name = f"{upstream}:{capture}{suffix}"
            lines += [
                "[[models]]",
                f'name = "{name}"',
                f'upstream = "{upstream}"',
                f'upstream_model = "{capture}{suffix}"',
            ]
    (tmp / "gw.toml").write_text("\n".join(lines) + "\n")
    quiet = "import logging; logging.disable(logging.CRITICAL);"
    replay = _start(
        f"{quiet}from llmbridge import replay; replay.create_app; import uvicorn;"
        f"uvicorn.run(replay.create_app({str(CORPUS)!r}, seed=1), port={rport}, log_level='error')",
        rurl + "/v1/models",
    )
    gateway = _start(
        f"{quiet}from llmbridge.gateway import create_app; import uvicorn;"
        f"uvicorn.run(create_app({str(tmp / 'gw.toml')!r}), port={gport}, log_level='error')",
        gurl + "/healthz",
    )
    rows = []
    try:
        with httpx.Client(timeout=60) as client:
            for label, client_dialect, upstream, capture in CASES:
                events = len(
                    decode_all(
                        dialects.get(upstream).StreamDecoder(), (CORPUS / upstream / f"{capture}.sse").read_bytes()
                    )
                )
                model = f"{upstream}:{capture}@chunk=100000"
                direct_url = rurl + BASE[upstream] + PATH[upstream].removeprefix("/v1" if BASE[upstream] else "")
                direct = [_stream(client, direct_url, _body(upstream, capture + "@chunk=100000")) for _ in range(N)]
                _stream(client, gurl + PATH[client_dialect], _body(client_dialect, model))  # warm up
                cpu = _cpu_seconds(gateway.pid)
                via = [_stream(client, gurl + PATH[client_dialect], _body(client_dialect, model)) for _ in range(N)]
                cpu = (_cpu_seconds(gateway.pid) - cpu) / N
                med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
                rows.append(
                    [
                        label,
                        events,
                        cpu * 1000,
                        cpu * 1e6 / events,
                        med([f for f, _ in via]) * 1000 - med([f for f, _ in direct]) * 1000,
                        med([t for _, t in via]) * 1000,
                        med([t for _, t in direct]) * 1000,
                    ]
                )
            ttft = []
            for label, client_dialect, upstream, capture in CASES:
                model = f"{upstream}:{capture}@chunk=200@delay-ms=10"
                direct_url = rurl + BASE[upstream] + PATH[upstream].removeprefix("/v1" if BASE[upstream] else "")
                direct_body = _body(upstream, capture + "@chunk=200@delay-ms=10")
                direct = [_stream(client, direct_url, direct_body, upstream)[0] for _ in range(5)]
                via = [
                    _stream(client, gurl + PATH[client_dialect], _body(client_dialect, model), client_dialect)[0]
                    for _ in range(5)
                ]
                ttft.append(
                    [
                        label,
                        sorted(direct)[2] * 1000,
                        sorted(via)[2] * 1000,
                        (sorted(via)[2] - sorted(direct)[2]) * 1000,
                    ]
                )
            paced = []
            for label, client_dialect, upstream, capture in CASES[1:3]:
                model = f"{upstream}:{capture}@chunk=200@delay-ms=10"
                direct_url = rurl + BASE[upstream] + PATH[upstream].removeprefix("/v1" if BASE[upstream] else "")
                for target, url, body in (
                    ("direct", direct_url, _body(upstream, capture + "@chunk=200@delay-ms=10")),
                    ("gateway", gurl + PATH[client_dialect], _body(client_dialect, model)),
                ):
                    times: list[float] = []

                    def worker(url=url, body=body, times=times) -> None:
                        with httpx.Client(timeout=120) as c:
                            for _ in range(3):
                                times.append(_stream(c, url, body)[1])

                    start = time.perf_counter()
                    threads = [threading.Thread(target=worker) for _ in range(8)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    wall = time.perf_counter() - start
                    paced.append([f"{label} ({target})", len(times) / wall, sorted(times)[len(times) // 2] * 1000])
    finally:
        for proc in (gateway, replay):
            proc.terminate()
            proc.wait(5)
    out = table(
        [
            "unpaced, sequential",
            "events",
            "gw CPU ms/stream",
            "gw CPU ms/1k events",
            "first byte added ms",
            "total ms (gw)",
            "total ms (direct)",
        ],
        rows,
    )
    out += "\n\n" + table(["paced 10 ms/chunk, first token", "direct ms", "gateway ms", "added ms"], ttft)
    out += "\n\n" + table(["paced 10 ms/chunk, 8 concurrent", "streams/s", "median stream ms"], paced)
    return out


if __name__ == "__main__":
    print(run())
