"""Which browser pages may open the WebSocket of a keyless gateway (sans-I/O).

A gateway without ``api_keys`` or ``master_key`` answers anyone who can reach it — usually a
local one, on ``127.0.0.1``. Browsers do not apply CORS to WebSockets: any web page the user
opens could connect to ``ws://127.0.0.1:8000/v1/stream`` and read the answers. So on a
keyless gateway an upgrade whose ``Origin`` is not the gateway's own (the ``Host`` it was
reached at) nor one of ``[gateway] allowed_origins`` is refused with 403. A request without
``Origin`` is no browser's (SDKs, curl, the llmbridge client) and is served. With keys the
key is the guard (a page of another site does not have it), so any origin may connect.

Limits: the own-host comparison trusts the ``Host`` header, so a DNS-rebinding page (a name
of the attacker's that resolves to 127.0.0.1) passes it; list the names in ``allowed_origins``
and put the gateway behind keys when that matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from .config import GatewayConfig

__all__ = ["allowed", "keyless"]

_DEFAULT_PORT = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def keyless(cfg: GatewayConfig) -> bool:
    """The gateway takes no client key: no ``api_keys``, no ``master_key``."""
    return not cfg.api_keys and cfg.teams.master_key is None


def allowed(headers: Mapping[str, str], scheme: str, cfg: GatewayConfig) -> bool:
    """Whether an upgrade with these request ``headers`` (on a ``scheme`` connection) may proceed."""
    origin = headers.get("origin")
    if origin is None or not keyless(cfg):
        return True
    o = origin.strip().rstrip("/").lower()
    if o in cfg.allowed_origins:
        return True
    try:
        page = urlsplit(o)
        own = urlsplit(f"//{headers.get('host', '')}")
        page_port = page.port or _DEFAULT_PORT.get(page.scheme)
        own_port = own.port or _DEFAULT_PORT.get(scheme)
    except ValueError:  # a malformed port or host
        return False
    if page.scheme not in ("http", "https") or not page.hostname or not own.hostname:
        return False  # "null" (a sandboxed frame, a file:// page) or no Host: not ours
    return (page.hostname, page_port) == (own.hostname.lower(), own_port)
