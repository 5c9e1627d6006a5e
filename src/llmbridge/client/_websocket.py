"""What both WebSocket transports share (docs/llm-stream-bindings.md §3): the URL, the
headers, and the test for a turn's last message.

The transports themselves are ``_websocket_async.py`` (the source) and ``_websocket_sync.py``
(generated from it by ``scripts/unasync.py``, like ``_sync.py`` from ``_async.py``).
"""

from __future__ import annotations

__all__ = ["is_end", "ws_headers", "ws_url"]

_END = '"stream.end"'


def ws_url(base_url: str) -> str:
    """``http(s)://host[/v1]`` -> ``ws(s)://host/v1/stream``."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    if base.startswith("http"):
        base = "ws" + base[4:]
    return base + "/v1/stream"


def is_end(text: str) -> bool:
    """Whether ``text`` is the turn's last message: an envelope whose type is ``stream.end``."""
    # A substring test first: every other message of a turn is rejected without parsing it.
    if _END not in text:
        return False
    import msgspec

    try:
        obj = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    return type(obj) is dict and obj.get("type") == "stream.end"


def ws_headers(api_key: str | None, headers: dict[str, str]) -> dict[str, str]:
    """The client's headers for the upgrade request: its key as a Bearer token; no body headers."""
    out = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "accept")}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    return out
