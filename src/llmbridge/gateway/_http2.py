"""``llmbridge serve --http2``: the gateway over HTTP/2 (h2c, and h2 over TLS) as well as HTTP/1.1.

Served by Granian (chosen by measurement against Hypercorn: less gateway CPU per stream over
both HTTP/1.1 and HTTP/2, see docs/llm-stream-bindings.md §6): a Rust HTTP stack driving the
same ASGI app in one worker process.  Plain TCP speaks HTTP/1.1 and h2c with prior knowledge;
with a certificate, TLS negotiates ``h2`` or ``http/1.1`` by ALPN.  WebSockets (the
WebSocket binding) and the lifespan (upstream clients closed at shutdown) work as under
uvicorn.

Granian imports the app in its worker process, so the app comes from a factory,
:func:`app_from_env`, that reads the config path from ``LLMBRIDGE_SERVE_CONFIG``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["app_from_env", "serve"]

CONFIG_ENV = "LLMBRIDGE_SERVE_CONFIG"


def app_from_env() -> Starlette:
    """The gateway app for the config named by ``LLMBRIDGE_SERVE_CONFIG`` (empty: the local model)."""
    from . import create_app, default_config, load

    path = os.environ.get(CONFIG_ENV) or None
    return create_app(load(path) if path else default_config())


def serve(
    config_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Run the gateway with Granian until SIGINT/SIGTERM.

    Exits with a one-line message (no traceback) on a bad config, a lone certificate or key,
    or when Granian is not installed.
    """
    try:
        from granian import Granian
        from granian.constants import HTTPModes, Interfaces
    except ImportError:
        raise SystemExit("llmbridge serve --http2: install granian (pip install 'llmbridge[http2]')") from None
    from . import ConfigError, default_config, load

    if (certfile is None) != (keyfile is None):
        raise SystemExit("llmbridge serve: --certfile and --keyfile go together")
    for path in (certfile, keyfile):
        if path is not None and not Path(path).is_file():
            raise SystemExit(f"llmbridge serve: no such file {path!r}")
    try:  # fail here, in one line, rather than in the worker
        load(config_path) if config_path else default_config()
    except (ConfigError, RuntimeError) as exc:
        raise SystemExit(f"llmbridge serve: {exc}") from None
    os.environ[CONFIG_ENV] = str(Path(config_path).resolve()) if config_path else ""
    Granian(
        "llmbridge.gateway._http2:app_from_env",
        factory=True,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        http=HTTPModes.auto,
        websockets=True,
        workers=1,
        ssl_cert=Path(certfile) if certfile else None,
        ssl_key=Path(keyfile) if keyfile else None,
    ).serve()
