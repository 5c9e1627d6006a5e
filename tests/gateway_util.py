"""Real servers for gateway tests: uvicorn on 127.0.0.1, a free port, a background thread."""

from __future__ import annotations

import asyncio
import logging
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


class StalledHead:
    """``app``, with the response head of a request that asks (``x-test-stall-head: 1``) held
    back ``seconds``: what a full socket buffer does to the first write. ``stalled`` counts
    the heads held back, so a test can tell the stall happened."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app, self.seconds, self.stalled = app, seconds, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (b"x-test-stall-head", b"1") not in scope["headers"]:
            return await self.app(scope, receive, send)

        async def stalled_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.stalled += 1
                await asyncio.sleep(self.seconds)
            await send(message)

        return await self.app(scope, receive, stalled_send)


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


# --------------------------------------------------------------------------- slow upstreams

TEXT_CAPTURES = {  # a plain text answer captured from each vendor dialect
    "openai-chat": "hf-novita-text",
    "openai-responses": "openai-text",
    "anthropic-messages": "claude-text-simple",
    "gemini": "gemini20-text",
}


def capture_text(dialect: str) -> str:
    """The text of ``dialect``'s capture in TEXT_CAPTURES, as our decoder reads it."""
    from llmbridge import dialects, hub
    from llmbridge.dialects.base import decode_all
    from tests.conftest import CORPUS

    body = (CORPUS / dialect / f"{TEXT_CAPTURES[dialect]}.sse").read_bytes()
    response = hub.assemble(decode_all(dialects.get(dialect).StreamDecoder(), body))
    return "".join(b.text for b in response.blocks if b.kind == "text")


@contextmanager
def slow_gateway(keepalive: float, stall: float, idle: float) -> Iterator[Server]:
    """A gateway whose models ``slow-<dialect>`` replay TEXT_CAPTURES, silent for ``stall``
    seconds after the first chunk (keep-alives every ``keepalive`` seconds meanwhile)."""
    from llmbridge import replay
    from llmbridge.gateway import config, create_app
    from tests.conftest import CORPUS

    with serving(replay.create_app(CORPUS, seed=1)) as up:
        models = {f"slow-{d}": (d, f"{name}@stall={stall}") for d, name in TEXT_CAPTURES.items()}
        raw = replay_config(up.url, models, gateway={"keepalive_seconds": keepalive}, timeouts={"idle": idle})
        with serving(create_app(config.parse(raw))) as server:
            yield server


def served_access_logger(stream: Any, *, colors: bool = False) -> logging.Logger:
    """uvicorn's access logger as ``llmbridge serve`` configures it (server.log_config),
    standalone, writing to ``stream``."""
    from llmbridge.gateway._accesslog import UVICORN_ACCESS_FORMAT, BatchedStreamHandler, PlainAccessFormatter
    from llmbridge.gateway._server import RedactSecrets
    from llmbridge.gateway._teams.redact import RedactKeys

    logger = logging.Logger("uvicorn.access", logging.INFO)
    logger.propagate = False
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(PlainAccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=colors))
    handler.addFilter(RedactSecrets())
    logger.addHandler(handler)
    logger.addFilter(RedactKeys())  # what the team features add (teams/redact.py)
    return logger


class RecordingTransport:
    """A fake asyncio transport for a server protocol, recording in ``events`` what was done
    to it, in order: each write (bytes), ``"close"`` (once), ``"pause"`` / ``"resume"`` of
    reading, ``("protocol", name)`` when a protocol takes it over. Peer 127.0.0.1:5000."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.closed = False
        self.protocol: Any = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.events.append(bytes(data))

    def on_the_wire(self) -> list[Any]:
        """:attr:`events` as the client receives them: the bytes of writes in a row joined,
        empty writes and writes after ``"close"`` (they go nowhere) dropped. The gateway's
        cycle writes a response head with the body's first chunk, uvicorn's in two writes:
        the same bytes on the wire."""
        out: list[Any] = []
        for event in self.events:
            if isinstance(event, bytes):
                if not event or "close" in out:
                    continue
                if out and isinstance(out[-1], bytes):
                    out[-1] += event
                    continue
            out.append(event)
        return out

    def close(self) -> None:
        if not self.closed:
            self.events.append("close")
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.events.append("pause")

    def resume_reading(self) -> None:
        self.events.append("resume")

    def set_protocol(self, protocol: Any) -> None:
        self.events.append(("protocol", type(protocol).__name__))
        self.protocol = protocol

    def get_protocol(self) -> Any:
        return self.protocol
