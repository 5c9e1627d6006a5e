"""Images and embeddings for the client, sans-I/O: request bodies and URLs in, results out.

Images use OpenAI's Images API (``POST {root}/images/generations``), which the gateway serves
for every upstream; embeddings use OpenAI's ``/embeddings`` unless the client speaks Gemini,
then ``models/{m}:batchEmbedContents``. The sync and async clients share these functions and
differ only in how they move the bytes.
"""

from __future__ import annotations

import array
import base64
import sys
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .. import hub
from ..errors import ProtocolError, UpstreamError
from ..media import COMPLETED, ImageEvent

IMAGE_OPTIONS = (
    "n",
    "size",
    "quality",
    "output_format",
    "background",
    "partial_images",
    "moderation",
    "output_compression",
    "response_format",
    "user",
)


@dataclass
class Embeddings:
    """The answer of :meth:`Client.embed`: one vector per input, in input order."""

    vectors: list[list[float]]
    usage: hub.Usage = field(default_factory=hub.Usage)
    model: str | None = None


def openai_root(base_url: str, dialect: str) -> str:
    """The OpenAI API root for a client's base URL: an OpenAI dialect's base (already the
    ``/v1`` root) as it is; for the other dialects, ``/v1`` on the same server (the gateway)."""
    base = base_url.rstrip("/")
    if dialect in ("openai-chat", "openai-responses"):
        return base
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}/v1"


def auth_headers(dialect: str, api_key: str | None, extra: dict[str, str]) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if api_key:
        if dialect == "gemini":
            headers["x-goog-api-key"] = api_key
        else:
            headers["authorization"] = f"Bearer {api_key}"
    return {**headers, **extra}


def images_request(
    dialect: str, base_url: str, model: str, prompt: str, stream: bool, options: dict[str, Any]
) -> tuple[str, dict]:
    """URL and body of an Images generations call; ``options`` are OpenAI's fields
    (:data:`IMAGE_OPTIONS`); an unknown one raises :class:`TypeError` as a bad keyword would."""
    unknown = set(options) - set(IMAGE_OPTIONS)
    if unknown:
        raise TypeError(f"images() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    body = {"model": model, "prompt": prompt, **{k: v for k, v in options.items() if v is not None}}
    if stream:
        body["stream"] = True
    return openai_root(base_url, dialect) + "/images/generations", body


def images_from_body(data: Any) -> list[ImageEvent]:
    """A non-streamed ``ImagesResponse`` as completed :class:`ImageEvent` values (usage on the last)."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ProtocolError("images response without a 'data' list")
    fmt = data.get("output_format") or "png"
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProtocolError(f"images response data[{i}] is not an object")
        usage = data.get("usage") if i == len(items) - 1 else None
        out.append(
            ImageEvent(
                COMPLETED,
                item.get("b64_json"),
                i,
                fmt,
                data.get("size"),
                data.get("quality"),
                data.get("background"),
                usage,
                item.get("url"),
                item.get("revised_prompt"),
            )
        )
    return out


def raise_error(error: hub.Error) -> None:
    """An error event of an image stream, as the exception the client raises."""
    raise UpstreamError(error.message, status=error.status, body=error.body, type=error.type)


def embed_request(
    dialect: str, base_url: str, model: str, inputs: str | list[str], dimensions: int | None
) -> tuple[str, dict, int]:
    """URL, body and input count of an embeddings call in the client's dialect family."""
    texts = [inputs] if isinstance(inputs, str) else list(inputs)
    if dialect == "gemini":
        base = base_url.rstrip("/")
        if not base.rsplit("/", 1)[-1].startswith("v1"):
            base += "/v1beta"
        requests = []
        for text in texts:
            r: dict[str, Any] = {"model": f"models/{model}", "content": {"parts": [{"text": text}]}}
            if dimensions is not None:
                r["outputDimensionality"] = dimensions
            requests.append(r)
        return f"{base}/models/{model}:batchEmbedContents", {"requests": requests}, len(texts)
    body: dict[str, Any] = {"model": model, "input": texts, "encoding_format": "base64"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return openai_root(base_url, dialect) + "/embeddings", body, len(texts)


def read_embeddings(dialect: str, data: Any, count: int) -> Embeddings:
    """An embeddings answer (OpenAI's, float or base64, or Gemini's batch); raises
    :class:`ProtocolError` when it is malformed or has another number of vectors."""
    try:
        if dialect == "gemini":
            vectors = [list(e["values"]) for e in data["embeddings"]]
            meta = data.get("usageMetadata") or {}
            tokens = meta.get("promptTokenCount")
            model = None
        else:
            vectors = [[]] * len(data["data"])
            for n, item in enumerate(data["data"]):
                value = item["embedding"]
                vectors[item.get("index", n)] = _floats(value) if isinstance(value, str) else list(value)
            tokens = (data.get("usage") or {}).get("prompt_tokens")
            model = data.get("model")
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed embeddings response: {type(exc).__name__}: {exc}") from None
    if len(vectors) != count:
        raise ProtocolError(f"expected {count} embeddings, got {len(vectors)}")
    usage = hub.Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens) if tokens is not None else hub.Usage()
    return Embeddings(vectors, usage, model)


def _floats(text: str) -> list[float]:
    values = array.array("f", base64.b64decode(text))
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()
