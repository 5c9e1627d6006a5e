"""The llmbridge gateway: an ASGI server that speaks every dialect to clients and to upstreams."""

from __future__ import annotations

from .app import create_app
from .config import Config, ConfigError, default_config, load

__all__ = ["Config", "ConfigError", "create_app", "default_config", "load", "serve"]


def serve(config_path: str | None = None, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the gateway with uvicorn; with no config file it serves the embedded local model."""
    import uvicorn

    try:
        app = create_app(load(config_path) if config_path else default_config())
    except (ConfigError, RuntimeError) as exc:  # a bad config or a missing extra: say so, no traceback
        raise SystemExit(f"llmbridge serve: {exc}") from None
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_keep_alive=30)
