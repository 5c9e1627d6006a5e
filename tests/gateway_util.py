"""Real servers for gateway tests: uvicorn on 127.0.0.1, a free port, a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


class Server:
    """An ASGI app served by uvicorn in a daemon thread; ``url`` is its base URL."""

    def __init__(self, app: Any):
        self.app = app
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on sockets whose proto says TCP,
        # and without it Nagle + delayed ACK add ~40 ms to every small write.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="auto", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()


@contextmanager
def serving(app: Any) -> Iterator[Server]:
    server = Server(app).start()
    try:
        yield server
    finally:
        server.stop()


def wait_for(predicate: Any, timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return bool(value)
        time.sleep(interval)


UPSTREAM_OF = {  # dialect -> the upstream name used in test configs
    "openai-chat": "rep-chat",
    "openai-responses": "rep-responses",
    "anthropic-messages": "rep-anthropic",
    "gemini": "rep-gemini",
    "llm-stream": "rep-llm-stream",
    "mmsp": "rep-mmsp",
}

# What each dialect's endpoint() expects after the server root (OpenAI's base URLs end in /v1;
# MMSP's own wire path /v1/stream is served by the replay under /mmsp, /v1/stream being llm-stream's).
BASE_PATH = {"openai-chat": "/v1", "openai-responses": "/v1", "mmsp": "/mmsp"}


def replay_config(
    replay_url: str,
    models: dict[str, tuple[str, str]],
    *,
    gateway: dict | None = None,
    timeouts: dict | None = None,
    extra_upstreams: dict | None = None,
) -> dict:
    """A raw gateway config: one upstream per dialect, all pointing at a replay server.

    ``models`` maps a gateway model name to ``(dialect, upstream model)``; a dialect may also be
    a list of upstream names, for fallback.
    """
    upstreams = {
        name: {"format": dialect, "base_url": replay_url + BASE_PATH.get(dialect, ""), "timeouts": dict(timeouts or {})}
        for dialect, name in UPSTREAM_OF.items()
    }
    upstreams.update(extra_upstreams or {})
    entries = []
    for name, (dialect, target) in models.items():
        if isinstance(dialect, list):
            entries.append({"name": name, "upstreams": dialect, "upstream_model": target})
        else:
            entries.append({"name": name, "upstream": UPSTREAM_OF[dialect], "upstream_model": target})
    return {"gateway": dict(gateway or {}), "upstreams": upstreams, "models": entries}
