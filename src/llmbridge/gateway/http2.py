"""``llmbridge serve --http2``: the gateway over HTTP/2 (h2c and h2 over TLS) as well as HTTP/1.1.

Served by Hypercorn (chosen by measurement against Granian, see
docs/llm-stream-bindings.md "Measured"): one asyncio process, like the uvicorn default,
so every endpoint, the WebSocket binding, disconnect handling and the lifespan behave
the same.  Plain TCP speaks HTTP/1.1, h2c by prior knowledge and h2c by upgrade; TLS
negotiates ``h2`` or ``http/1.1`` by ALPN.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["hypercorn_config", "serve", "serve_app"]


def hypercorn_config(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    sockets: Any = None,
) -> Any:
    """A Hypercorn ``Config`` for the gateway (quiet access log, a short graceful shutdown)."""
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.certfile = certfile
    config.keyfile = keyfile
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 30
    config.h2_max_concurrent_streams = 1000  # many streams per connection is the point of h2 here
    return config


async def serve_app(app: Any, config: Any, shutdown_trigger: Callable[..., Awaitable[None]] | None = None) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns (or forever)."""
    from hypercorn.asyncio import serve as hypercorn_serve

    await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger)  # type: ignore[arg-type]


def serve(
    config_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Run the gateway with Hypercorn; exits with a one-line message on a bad config or a missing extra."""
    try:
        import hypercorn  # noqa: F401
    except ImportError:
        raise SystemExit("llmbridge serve --http2: install hypercorn (pip install 'llmbridge[http2]')") from None
    from . import ConfigError, create_app, default_config, load

    if (certfile is None) != (keyfile is None):
        raise SystemExit("llmbridge serve: --certfile and --keyfile go together")
    try:
        app = create_app(load(config_path) if config_path else default_config())
    except (ConfigError, RuntimeError) as exc:
        raise SystemExit(f"llmbridge serve: {exc}") from None
    config = hypercorn_config(host, port, certfile=certfile, keyfile=keyfile)
    try:
        import uvloop

        runner: Callable[[Any], Any] = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve_app(app, config))
