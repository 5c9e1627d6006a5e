"""The llmbridge gateway: an ASGI server that speaks every dialect to clients and to upstreams."""

from __future__ import annotations

from ._app import create_app
from .config import Config, ConfigError, default_config, load

__all__ = ["Config", "ConfigError", "create_app", "default_config", "load", "serve"]


def serve(config_path: str | None = None, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Run the gateway with uvicorn until SIGINT/SIGTERM; with no config file it serves the
    embedded local model. ``workers`` processes share the port (see gateway/_server.py)."""
    from ._server import serve as _serve

    _serve(config_path, host, port, workers)
