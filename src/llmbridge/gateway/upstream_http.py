"""HTTP calls to an upstream for the endpoints that are not chat streams: images and embeddings.

The chat data path (``upstream.py``/``streaming.py``) speaks a dialect's stream; these calls
are one JSON POST, or one SSE body read as it arrives, against URLs derived from the same
``[upstreams.NAME]`` table (base URL, key, extra headers, timeouts). They run on the chat
path's own machinery: the pooled httptools client of ``_http`` (keep-alive per origin, TLS,
one retry on a stale pooled connection, header-injection refusal), bodies delivered to an
:class:`~._http.Inbox` with flow control, and the connect/first-byte/idle/total clocks of
``streaming.Deadlines`` (lazy timers that raise an alarm in the inbox, no task per read).
Why not httpx: see ``_http``'s docstring; for a 1 MB image event the httpx chain costs a
coroutine chain per 64 KiB read (bench/README.md, "Embeddings and images").
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import dialects, hub
from ..dialects.base import json_decode, json_encode
from . import _http
from .config import UpstreamConfig
from .streaming import Deadlines
from .upstream import UpstreamFailed, as_hub_error

__all__ = [
    "MAX_ERROR_BYTES",
    "MAX_JSON_BYTES",
    "OPENAI_FORMATS",
    "UpstreamHTTP",
    "decode_error",
    "gemini_url",
    "openai_url",
]

MAX_JSON_BYTES = 256 * 1024 * 1024  # an answer larger than this is refused (n=10 4K images fit)
MAX_ERROR_BYTES = 1 << 20
OPENAI_FORMATS = ("openai-chat", "openai-responses")


def openai_url(cfg: UpstreamConfig, path: str) -> tuple[str, dict[str, str]]:
    """``{base_url}/{path}`` with the Bearer key of an OpenAI-shaped upstream."""
    headers = {"content-type": "application/json"}
    if cfg.api_key:
        headers["authorization"] = f"Bearer {cfg.api_key}"
    return f"{(cfg.base_url or '').rstrip('/')}/{path}", {**headers, **cfg.headers}


def gemini_url(cfg: UpstreamConfig, model: str, method: str) -> tuple[str, dict[str, str]]:
    """``{base}/v1beta/models/{model}:{method}`` (``/v1beta`` added unless the base names a
    version, as the gemini dialect's own endpoint does), with the ``x-goog-api-key``."""
    base = (cfg.base_url or "").rstrip("/")
    if not base.rsplit("/", 1)[-1].startswith("v1"):
        base += "/v1beta"
    headers = {"content-type": "application/json"}
    if cfg.api_key:
        headers["x-goog-api-key"] = cfg.api_key
    return f"{base}/models/{model.removeprefix('models/')}:{method}", {**headers, **cfg.headers}


class UpstreamHTTP:
    """A pooled client for JSON calls and streamed bodies; every failure before the body comes
    out as :class:`UpstreamFailed` holding a hub error (never a credential in its message)."""

    def __init__(self, client: _http.HTTPClient | None = None) -> None:
        self.client = client or _http.HTTPClient()

    async def post_json(self, cfg: UpstreamConfig, url: str, headers: dict[str, str], body: Any) -> Any:
        """POST ``body`` as JSON; the decoded JSON answer.

        Raises :class:`UpstreamFailed`: an HTTP error status (the upstream's error decoded by
        its dialect), a connect error, a missed deadline (first byte, idle, total: the
        upstream's ``timeouts``), an answer over :data:`MAX_JSON_BYTES`, or one that is not JSON.
        """
        started = asyncio.get_running_loop().time()
        response = await self.open(cfg, url, headers, body)
        try:
            data = await read_body(response, cfg, started, MAX_JSON_BYTES)
        finally:
            response.close()
        try:
            return json_decode(data)
        except Exception:
            raise UpstreamFailed(
                hub.Error(f"upstream {cfg.name!r} answered with a body that is not JSON", "protocol_error", status=502)
            ) from None

    async def open(self, cfg: UpstreamConfig, url: str, headers: dict[str, str], body: Any) -> _http.Response:
        """POST ``body`` as JSON; the OK response once its head is in (its body arrives in
        ``response.inbox``; :meth:`~._http.Response.close` it after).

        Raises :class:`UpstreamFailed` before any byte of an OK body: an error status (its
        body read and decoded by the upstream's dialect), a connect error, no head within the
        first-byte timeout.
        """
        t = cfg.timeouts
        try:
            response = await self.client.request(
                "POST", url, headers, json_encode(body), connect_timeout=t.connect, head_timeout=t.first_byte
            )
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, cfg.name)) from None
        if response.status >= 400:
            try:
                async with asyncio.timeout(t.first_byte):
                    data = await response.read(MAX_ERROR_BYTES)
            except Exception:
                data = b""
            finally:
                response.close()
            raise UpstreamFailed(decode_error(cfg, response.status, data))
        return response

    async def aclose(self) -> None:
        await self.client.aclose()


async def read_body(response: _http.Response, cfg: UpstreamConfig, started: float, limit: int) -> bytes:
    """The whole body of ``response`` under the upstream's idle and total deadlines (the clock
    started at ``started``, loop time); raises :class:`UpstreamFailed` when a deadline passes,
    the body breaks off or exceeds ``limit`` bytes. Does not close the response."""
    inbox = response.inbox
    deadlines = Deadlines(inbox, cfg.timeouts, cfg.name, started)
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            await inbox.wait()
            items: list[bytes] = inbox.take()
            if items and not deadlines.got_data:
                deadlines.data_arrived()
            for chunk in items:
                size += len(chunk)
                parts.append(chunk)
            if size > limit:
                raise UpstreamFailed(hub.Error(f"upstream answer exceeds {limit} bytes", "api_error", status=502))
            if "deadline" in inbox.alarms and deadlines.missed is not None:
                raise UpstreamFailed(deadlines.missed)
            if inbox.eof and not inbox.items:
                if inbox.error is not None:
                    raise UpstreamFailed(as_hub_error(inbox.error, cfg.name))
                return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        deadlines.cancel()


def decode_error(cfg: UpstreamConfig, status: int, data: bytes) -> hub.Error:
    """An upstream's error body, read by its dialect's codec (OpenAI's shape for images and
    embeddings of an openai-* upstream, Google's for gemini)."""
    try:
        error: hub.Error = dialects.get(cfg.format).decode_error(status, data)
    except Exception:  # an error body the codec cannot read is still the upstream's error
        error = hub.Error(data.decode("utf-8", "replace")[:500] or f"HTTP {status}", hub.error_type_for_status(status))
    if error.status is None:
        error.status = status
    return error
