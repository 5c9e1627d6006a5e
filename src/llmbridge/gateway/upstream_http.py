"""Plain HTTP calls to an upstream for the endpoints that are not chat streams: images and
embeddings.

The chat data path (``upstream.py``/``streaming.py``) speaks a dialect's stream; these calls
are one JSON POST, or one SSE body read event by event, against URLs derived from the same
``[upstreams.NAME]`` table (base URL, key, extra headers, timeouts). One pooled
``httpx.AsyncClient`` serves every upstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from .. import dialects, hub
from ..dialects.base import json_decode, json_encode
from .config import UpstreamConfig
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
    """A pooled client; every failure comes out as :class:`UpstreamFailed` holding a hub error."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None), limits=httpx.Limits(max_connections=None, max_keepalive_connections=32)
        )

    def _timeout(self, cfg: UpstreamConfig) -> httpx.Timeout:
        t = cfg.timeouts
        return httpx.Timeout(connect=t.connect, read=t.idle, write=t.connect, pool=t.connect)

    async def post_json(self, cfg: UpstreamConfig, url: str, headers: dict[str, str], body: Any) -> Any:
        """POST ``body`` as JSON; the decoded JSON answer.

        Raises :class:`UpstreamFailed`: an HTTP error status (the upstream's error decoded by
        its dialect), a connect error or timeout, an answer over :data:`MAX_JSON_BYTES` or
        one that is not JSON.
        """
        try:
            async with asyncio.timeout(cfg.timeouts.total):
                response = await self._send(cfg, url, headers, body)
                try:
                    data = await _read(response, MAX_JSON_BYTES if response.status_code < 400 else MAX_ERROR_BYTES)
                finally:
                    await response.aclose()
        except UpstreamFailed:
            raise
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, cfg.name)) from exc
        if response.status_code >= 400:
            raise UpstreamFailed(decode_error(cfg, response.status_code, data))
        try:
            return json_decode(data)
        except Exception:
            raise UpstreamFailed(
                hub.Error(f"upstream {cfg.name!r} answered with a body that is not JSON", "protocol_error", status=502)
            ) from None

    async def open_stream(
        self, cfg: UpstreamConfig, url: str, headers: dict[str, str], body: Any
    ) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """POST and return the OK response with its body's chunks (close the response after).

        Raises :class:`UpstreamFailed` before any byte of an OK body: an error status, connect
        error or first-byte timeout.
        """
        try:
            async with asyncio.timeout(cfg.timeouts.first_byte):
                response = await self._send(cfg, url, headers, body)
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, cfg.name)) from exc
        if response.status_code >= 400:
            try:
                async with asyncio.timeout(cfg.timeouts.first_byte):
                    data = await _read(response, MAX_ERROR_BYTES)
            except Exception:
                data = b""
            finally:
                await response.aclose()
            raise UpstreamFailed(decode_error(cfg, response.status_code, data))
        return response, response.aiter_bytes()

    async def _send(self, cfg: UpstreamConfig, url: str, headers: dict[str, str], body: Any) -> httpx.Response:
        request = self.client.build_request(
            "POST", url, content=json_encode(body), headers=headers, timeout=self._timeout(cfg)
        )
        return await self.client.send(request, stream=True)

    async def aclose(self) -> None:
        await self.client.aclose()


def decode_error(cfg: UpstreamConfig, status: int, data: bytes) -> hub.Error:
    """An upstream's error body, read by its dialect's codec (OpenAI's shape for images and
    embeddings of an openai-* upstream, Google's for gemini)."""
    try:
        error = dialects.get(cfg.format).decode_error(status, data)
    except Exception:  # an error body the codec cannot read is still the upstream's error
        error = hub.Error(data.decode("utf-8", "replace")[:500] or f"HTTP {status}", hub.error_type_for_status(status))
    if error.status is None:
        error.status = status
    return error


async def _read(response: httpx.Response, limit: int) -> bytes:
    parts, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise UpstreamFailed(hub.Error(f"upstream answer exceeds {limit} bytes", "api_error", status=502))
        parts.append(chunk)
    return b"".join(parts)
