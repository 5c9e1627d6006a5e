"""``POST /v1/images`` and ``/v1/images/generations``: OpenAI's Images generations API.

The request is OpenAI's (``prompt``, ``n``, ``size``, ``quality``, ``output_format``,
``background``, ``stream``, ``partial_images`` …), routed by model like every endpoint.
A streamed answer is the gateway spec's (the gateway spec, Images)::

    event: image_generation.partial_image   (0..partial_images per image, as it forms)
    event: image_generation.completed       (the final image, with usage)
    data: [DONE]

and an ``error`` event can replace either (then ``data: [DONE]``). Not streaming, the
answer is OpenAI's ``ImagesResponse`` (``created``, ``data[].b64_json``, ``usage`` …).

Upstreams, with no new upstream formats:

* ``openai-chat`` / ``openai-responses``: ``{base_url}/images/generations`` (its stream is
  checked event by event and relayed; not streaming, its body is checked and passed on);
* ``gemini`` (and any other HTTP dialect): a generation request with image response
  modalities through the dialect's own codec; every ``inlineData`` image part (a hub
  ``data`` block) becomes one ``image_generation.completed`` (Gemini sends no partials);
* ``local``: no image model, a 400.

Every image an upstream sends is checked (base64, the bytes' magic against the declared
format) before the client sees it: a broken one ends the stream with an ``error`` event.
The functions that read requests and write events are pure; :class:`Images` is the
I/O shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .. import hub, sse
from ..dialects.base import json_encode
from ..errors import RequestError
from ..media import (
    COMPLETED,
    MAX_IMAGE_BYTES,
    OUTPUT_FORMATS,
    PARTIAL,
    ImageEvent,
    ImageStreamDecoder,
    image_problem,
    sniff,
)
from . import _http
from . import _replies as replies
from . import _routing as routing
from ._failures import UpstreamFailed, as_hub_error
from ._http import HIGH_WATER, Inbox
from ._metering import Meter, Outcome
from ._pipeline import Pipeline, unless_disconnected
from ._response import StreamResponse
from ._routing import Attempt
from ._timers import Deadlines, LazyTimer
from ._upstream import OPENAI_FORMATS, Upstream
from .config import LOCAL, ModelConfig, Timeouts, UpstreamConfig

__all__ = [
    "BACKGROUNDS",
    "DONE",
    "HTTPImages",
    "HubImages",
    "ImageRequest",
    "ImageSource",
    "Images",
    "MAX_N",
    "MAX_PARTIAL_IMAGES",
    "MAX_PROMPT",
    "OPENAI",
    "PASSTHROUGH",
    "PumpedImages",
    "QUALITIES",
    "RESPONSE_FORMATS",
    "SIZES",
    "encode_error",
    "encode_event",
    "event_json",
    "hub_request",
    "openai_upstream_body",
    "parse_request",
    "response_body",
]

log = logging.getLogger("llmbridge.gateway")

OPENAI = "openai-chat"  # the error shape of the Images API is OpenAI's
SIZES = ("auto", "256x256", "512x512", "1024x1024", "1536x1024", "1024x1536", "1792x1024", "1024x1792")
QUALITIES = ("auto", "low", "medium", "high", "standard", "hd")
BACKGROUNDS = ("auto", "transparent", "opaque")
RESPONSE_FORMATS = ("b64_json", "url")
MAX_N = 10
MAX_PARTIAL_IMAGES = 3
MAX_PROMPT = 32000  # characters (gpt-image-1's limit)
# OpenAI fields passed to an OpenAI upstream as they are (checked by it, not by us).
PASSTHROUGH = ("moderation", "output_compression", "style", "user")
DONE = b"data: [DONE]\n\n"
_ASPECT = {
    "1024x1024": "1:1",
    "256x256": "1:1",
    "512x512": "1:1",
    "1536x1024": "3:2",
    "1024x1536": "2:3",
    "1792x1024": "16:9",
    "1024x1792": "9:16",
}


@dataclass
class ImageRequest:
    model: str
    prompt: str
    n: int = 1
    size: str = "auto"
    quality: str = "auto"
    output_format: str = "png"
    background: str = "auto"
    stream: bool = False
    partial_images: int = 0
    response_format: str | None = None  # dall-e's "url"|"b64_json"; gpt-image always returns b64_json
    extra: dict[str, Any] = field(default_factory=dict)  # PASSTHROUGH fields present in the request


# --------------------------------------------------------------------------- the request


def parse_request(body: dict[str, Any]) -> ImageRequest:
    """OpenAI's ``images.generate`` body; raises :class:`RequestError` naming the bad field."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("required, a model name", "model")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise RequestError("required, a non-empty string", "prompt")
    if len(prompt) > MAX_PROMPT:
        raise RequestError(f"at most {MAX_PROMPT} characters, not {len(prompt)}", "prompt")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if type(n) is not int or not 1 <= n <= MAX_N:
        raise RequestError(f"must be an integer from 1 to {MAX_N}, not {n!r}", "n")
    req = ImageRequest(model, prompt, n)
    for key, allowed in (
        ("size", SIZES),
        ("quality", QUALITIES),
        ("output_format", OUTPUT_FORMATS),
        ("background", BACKGROUNDS),
    ):
        value = body.get(key)
        if value is None:
            continue
        if value not in allowed:
            raise RequestError(f"unknown value {value!r}; one of {', '.join(allowed)}", key)
        setattr(req, key, value)
    if req.background == "transparent" and req.output_format == "jpeg":
        raise RequestError("a transparent background needs png or webp", "background")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise RequestError("must be true or false", "stream")
    req.stream = bool(stream)
    partial = body.get("partial_images", 0)
    if partial is None:
        partial = 0
    if type(partial) is not int or not 0 <= partial <= MAX_PARTIAL_IMAGES:
        raise RequestError(f"must be an integer from 0 to {MAX_PARTIAL_IMAGES}", "partial_images")
    req.partial_images = partial
    rf = body.get("response_format")
    if rf is not None:
        if rf not in RESPONSE_FORMATS:
            raise RequestError(f"must be 'b64_json' or 'url', not {rf!r}", "response_format")
        if req.stream and rf == "url":
            raise RequestError("a streamed answer carries b64_json only", "response_format")
        req.response_format = rf
    req.extra = {k: body[k] for k in PASSTHROUGH if body.get(k) is not None}
    return req


def openai_upstream_body(req: ImageRequest, upstream_model: str) -> dict[str, Any]:
    """The request for an OpenAI ``/images/generations`` upstream: only what the client set."""
    body: dict[str, Any] = {"model": upstream_model, "prompt": req.prompt}
    if req.n != 1:
        body["n"] = req.n
    for key, default in (("size", "auto"), ("quality", "auto"), ("background", "auto"), ("output_format", "png")):
        value = getattr(req, key)
        if value != default:
            body[key] = value
    if req.response_format:
        body["response_format"] = req.response_format
    if req.stream:
        body["stream"] = True
        if req.partial_images:
            body["partial_images"] = req.partial_images
    body.update(req.extra)
    return body


def hub_request(req: ImageRequest, upstream: UpstreamConfig, upstream_model: str) -> hub.Request:
    """A generation request asking a chat-dialect upstream (Gemini) for an image."""
    hreq = hub.Request(model=upstream_model, stream=True, messages=[hub.Message("user", [hub.TextPart(req.prompt)])])
    if upstream.format == "gemini":
        gen: dict[str, Any] = {"responseModalities": ["TEXT", "IMAGE"]}
        if req.size in _ASPECT:
            gen["imageConfig"] = {"aspectRatio": _ASPECT[req.size]}
        hreq.extensions["gemini:generationConfig"] = gen
    return hreq


# --------------------------------------------------------------------------- the answer


def event_json(ev: ImageEvent, created_at: int, image: bool = True) -> dict[str, Any]:
    """One Images stream event's data object (without ``type`` and ``b64_json`` unless ``image``)."""
    out: dict[str, Any] = {"type": ev.type, "b64_json": ev.b64_json} if image else {}
    out["created_at"] = created_at
    for key in ("size", "quality", "background"):
        value = getattr(ev, key)
        # issue 22: required in both events; "auto" (the request's default) when never said
        out[key] = value if value is not None else "auto"
    out["output_format"] = ev.output_format
    if ev.type == PARTIAL:
        out["partial_image_index"] = ev.index
    elif ev.usage is not None:
        out["usage"] = ev.usage
    return out


def encode_event(ev: ImageEvent, created_at: int) -> bytes:
    """The SSE bytes of one image event (the upstream's own, when it was relayed).

    The base64 (checked: nothing in it needs a JSON escape) is not run through the JSON
    encoder: the small rest of the object is encoded, and the pieces joined once, so a 1 MB
    image costs one copy here (two when it was a ``str``)."""
    if ev.raw is not None:
        return ev.raw
    b64 = ev.b64_bytes
    if b64 is None and ev.b64_json is not None:
        b64 = ev.b64_json.encode("ascii")
    if b64 is None or ev.type not in (PARTIAL, COMPLETED):
        return b"event: " + ev.type.encode() + b"\ndata: " + json_encode(event_json(ev, created_at)) + b"\n\n"
    kind = ev.type.encode()
    rest = json_encode(event_json(ev, created_at, image=False))  # never empty: created_at is always there
    return b"".join((b"event: ", kind, b'\ndata: {"type":"', kind, b'","b64_json":"', b64, b'",', rest[1:], b"\n\n"))


def encode_error(error: hub.Error) -> bytes:
    """An ``error`` event (OpenAI's error object, as its API writes it), then the ``[DONE]``
    that ends the stream."""
    _, body = replies.error_body(OPENAI, error)  # issue 22: no extension data unless asked
    return b"event: error\ndata: " + json_encode({"type": "error", **body}) + b"\n\n" + DONE  # type: ignore[dict-item]


def response_body(events: list[ImageEvent], req: ImageRequest, created: int) -> dict[str, Any]:
    """OpenAI's ``ImagesResponse`` from the final images (usage summed over them)."""
    data = []
    usage: dict[str, Any] | None = None
    for ev in events:
        item: dict[str, Any] = {"url": ev.url} if ev.url else {"b64_json": ev.b64_json}
        if ev.revised_prompt:
            item["revised_prompt"] = ev.revised_prompt
        data.append(item)
        if ev.usage:
            usage = _add_usage(usage, ev.usage)
    body: dict[str, Any] = {"created": created, "data": data}
    last = events[-1] if events else None
    if last is not None:
        for key in ("background", "quality", "size"):
            if getattr(last, key) is not None:
                body[key] = getattr(last, key)
        body["output_format"] = last.output_format
    if usage is not None:
        body["usage"] = usage
    return body


def _add_usage(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return b
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, int) and isinstance(out.get(key), int):
            out[key] += value
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _add_usage(out[key], value)
    return out


# --------------------------------------------------------------------------- reading upstreams


class HubImages:
    """Sans-I/O: hub events of a chat-dialect answer (Gemini's ``inlineData`` parts) in,
    one completed :class:`ImageEvent` per image block out, with the stream's usage on the last.

    Text the model wrote alongside is kept as the ``revised_prompt`` of the next image, and
    quoted in the error when no image came (a refusal usually explains itself in text).
    """

    def __init__(self, upstream: str, req: ImageRequest, first_index: int = 0) -> None:
        self.upstream = upstream
        self.req = req
        self.index = first_index
        self._blocks: dict[int, tuple[str, list[str]]] = {}
        self._texts: set[int] = set()  # the open text blocks (not thinking, not tool calls)
        self._text: list[str] = []
        self._pending: ImageEvent | None = None  # the last image waits for the usage
        self.usage: hub.Usage | None = None
        self.images = 0

    def feed(self, event: hub.Event) -> list[ImageEvent | hub.Error]:
        out: list[ImageEvent | hub.Error] = []
        if isinstance(event, hub.BlockStart):
            if event.kind == "data" and (event.mime_type or "image/").startswith("image/"):
                self._blocks[event.index] = (event.mime_type or "", [])
            elif event.kind == "text":
                self._texts.add(event.index)
        elif isinstance(event, hub.Delta):
            block = self._blocks.get(event.index)
            if block is not None:
                block[1].append(event.text)
            elif event.index in self._texts:
                self._text.append(event.text)
        elif isinstance(event, hub.BlockStop):
            block = self._blocks.pop(event.index, None)
            if block is not None:
                done = self._image(*block)
                if isinstance(done, hub.Error):
                    return [done]
                if self._pending is not None:
                    out.append(self._pending)
                self._pending = done
        elif isinstance(event, hub.Usage):
            self.usage = hub.merge_usage(self.usage, event)
        elif isinstance(event, hub.Error):
            return [event]
        elif isinstance(event, hub.ResponseEnd):
            if self._pending is not None:
                self._pending.usage = self._usage()
                out.append(self._pending)
                self._pending = None
            elif not self.images:
                said = "".join(self._text).strip()
                message = f"upstream {self.upstream!r} returned no image" + (f": {said[:500]}" if said else "")
                out.append(hub.Error(message, "api_error", "no_image", 502))
        return out

    def _image(self, mime: str, parts: list[str]) -> ImageEvent | hub.Error:
        try:  # one copy, kept for the client's event (encode_event writes these bytes as they are)
            b64 = "".join(parts).encode("ascii")
        except UnicodeEncodeError:
            b64 = b"!"  # not base64, whatever else it is
        problem = image_problem(b64, mime or None, MAX_IMAGE_BYTES)
        if problem:
            return hub.Error(
                f"upstream {self.upstream!r} sent a broken image ({problem})",
                "protocol_error",
                "bad_upstream_image",
                502,
            )
        actual = mime or sniff(_head(b64)) or "image/png"
        fmt = actual.split("/", 1)[1] if actual.split("/", 1)[1] in OUTPUT_FORMATS else "png"
        said = "".join(self._text).strip() or None
        self._text.clear()
        ev = ImageEvent(
            COMPLETED,
            None,
            self.index,
            fmt,
            self.req.size if self.req.size != "auto" else None,
            self.req.quality if self.req.quality != "auto" else None,
            None,
            revised_prompt=said,
            b64_bytes=b64,
        )
        self.index += 1
        self.images += 1
        return ev

    def _usage(self) -> dict[str, Any] | None:
        u = self.usage
        if u is None:
            return None
        i, o = u.input_tokens or 0, u.output_tokens or 0
        return {
            "total_tokens": u.total_tokens or i + o,
            "input_tokens": i,
            "output_tokens": o,
            "input_tokens_details": {"text_tokens": i, "image_tokens": 0},
        }


def _head(b64: bytes) -> bytes:
    import base64

    return base64.b64decode(b64[:32] + b"=" * (-len(b64[:32]) % 4))


# --------------------------------------------------------------------------- reading an answer

Item = ImageEvent | hub.Error


class ImageSource:
    """One upstream's images as they arrive: an :class:`Inbox` to wait on, and :meth:`read`,
    which takes what the inbox holds and returns the checked images (or the error that ends
    them). ``done`` once the answer is over; :meth:`aclose` stops reading it."""

    inbox: Inbox
    done: bool = False

    def read(self) -> list[Item]:  # pragma: no cover - every source overrides it
        raise NotImplementedError

    async def aclose(self) -> None:  # pragma: no cover
        raise NotImplementedError


class HTTPImages(ImageSource):
    """An OpenAI Images SSE body on the gateway's own HTTP client: each socket read lands in
    the response's inbox (in C, no task), and :meth:`read` hands every piece to the
    :class:`ImageStreamDecoder` as it is (no join per wake-up: the decoder joins the pieces
    of one event once). The upstream's first-byte, idle and total clocks apply, and one event
    over ``max_event_bytes`` ends the stream (so a stream holds at most about that much)."""

    def __init__(
        self, response: _http.Response, cfg: UpstreamConfig, started: float, max_event_bytes: int | None = None
    ) -> None:
        self.response = response
        self.inbox = response.inbox
        self.name = cfg.name
        self.decoder = ImageStreamDecoder(cfg.name, max_event_bytes)  # the gateway's max_event_bytes
        self.deadlines = Deadlines(self.inbox, cfg.timeouts, cfg.name, started)

    def read(self) -> list[Item]:
        inbox = self.inbox
        items: list[bytes] = inbox.take()
        if self.done:
            return []
        if items and not self.deadlines.got_data:
            self.deadlines.data_arrived()
        out: list[Item] = []
        decoder = self.decoder
        for chunk in items:
            out += decoder.feed(chunk)
            if decoder.finished:
                self._stop()
                return out
        if "deadline" in inbox.alarms and self.deadlines.missed is not None:
            out.append(self.deadlines.missed)
            self._stop()
        elif inbox.eof and not inbox.items:
            if inbox.error is not None:
                out.append(as_hub_error(inbox.error, self.name))
            else:
                out += decoder.close()
            self._stop()
        return out

    def _stop(self) -> None:
        self.done = True
        self.deadlines.cancel()
        self.response.close()

    async def aclose(self) -> None:
        self._stop()


class PumpedImages(ImageSource):
    """Images made in process (from a chat-dialect upstream's hub events, or a JSON answer),
    moved into an inbox by one task, with back-pressure: at most two images wait for a slow
    client before the task waits too. With ``timeouts``, the upstream's first-byte (here: the
    first image), idle and total clocks apply, as on the chat path's in-process sources."""

    def __init__(self, items: AsyncIterator[Item], name: str, timeouts: Timeouts | None = None) -> None:
        self._room = asyncio.Event()
        self._room.set()
        self.inbox = Inbox(self._room.clear, self._room.set)
        self.name = name
        self._items = items
        loop = asyncio.get_running_loop()
        self.deadlines = Deadlines(self.inbox, timeouts, name, loop.time()) if timeouts is not None else None
        self._task = loop.create_task(self._pump())

    async def _pump(self) -> None:
        inbox, room = self.inbox, self._room
        try:
            async for item in self._items:
                inbox.put(item, _weight(item))
                if isinstance(item, hub.Error):
                    break
                if not room.is_set():
                    await room.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the upstream broke mid-answer: an error item, never a traceback
            inbox.put(as_hub_error(exc, self.name))
        finally:
            inbox.finish()
            aclose = getattr(self._items, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def read(self) -> list[Item]:
        items: list[Item] = self.inbox.take()
        deadlines = self.deadlines
        if deadlines is not None:
            if items and not deadlines.got_data:
                deadlines.data_arrived()
            if "deadline" in self.inbox.alarms and deadlines.missed is not None and not self.done:
                items.append(deadlines.missed)
                self.done = True
                self._task.cancel()
                return items
        if self.inbox.eof and not self.inbox.items:
            self.done = True
        return items

    async def aclose(self) -> None:
        self.done = True
        if self.deadlines is not None:
            self.deadlines.cancel()
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(BaseException):  # cancelled on purpose; its errors were items
            await self._task


def _weight(item: Item) -> int:
    # Two images over the inbox's high-water mark pauses the pump (flow control counts bytes).
    return HIGH_WATER // 2 + 1 if isinstance(item, ImageEvent) else 0


def _usage(usage: dict[str, Any] | None) -> hub.Usage | None:
    """The Images API's usage object as the hub's (for the ledger and the limits)."""
    if not usage:
        return None
    i, o, t = usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens")
    return hub.Usage(
        input_tokens=i if type(i) is int else None,
        output_tokens=o if type(o) is int else None,
        total_tokens=t if type(t) is int else None,
    )


class _Tally:
    """What the client got so far: for the meter (usage of the completed images, the error)."""

    __slots__ = ("ended", "error", "first_byte_at", "settled", "usage")

    def __init__(self) -> None:
        self.usage: dict[str, Any] | None = None
        self.error: hub.Error | None = None
        self.first_byte_at: float | None = None
        self.ended = False  # the client got the stream's terminal event
        self.settled = False

    def note(self, item: ImageEvent) -> None:
        if item.type == COMPLETED and item.usage:
            self.usage = _add_usage(self.usage, item.usage)

    def outcome(self, ended: bool) -> Outcome:
        return Outcome(_usage(self.usage), self.error, None, ended, True, self.first_byte_at)


def _settler(
    source: ImageSource, meter: Meter, upstream: str, upstream_model: str, tally: _Tally
) -> Callable[[], Awaitable[None]]:
    """Close the upstream and settle the meter with what the client got, once (the stream's
    end and the response's close both call it)."""

    async def settle() -> None:
        if tally.settled:
            return
        tally.settled = True
        await source.aclose()
        meter.ended(upstream, upstream_model, tally.outcome(tally.ended))

    return settle


# --------------------------------------------------------------------------- the service


class Images:
    """Endpoints, routing and upstream calls for images, on the gateway's pipeline."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    async def generate(self, request: Request) -> Response | StreamResponse:
        """``POST /v1/images`` and ``/v1/images/generations``."""
        return await self.pipeline.answer(OPENAI, self._steps(request))

    async def _steps(self, request: Request) -> Response | StreamResponse:
        p = self.pipeline
        who = await p.authenticate(request)
        body, size = await p.read_object(request)
        req = parse_request(body)
        model = p.model(req.model)
        hreq = hub.Request(
            model=req.model, stream=req.stream, messages=[hub.Message("user", [hub.TextPart(req.prompt)])]
        )
        ledger_id = str(request.scope.get("state", {}).get("request_id", ""))
        meter = await p.admit(who, hreq, size, OPENAI, OPENAI, ledger_id, "image_generation")
        try:
            response = await unless_disconnected(request, self._route(model, req, meter))
        except BaseException:
            meter.cancelled()
            raise
        meter.responded(response)
        return response

    async def _route(self, model: ModelConfig, req: ImageRequest, meter: Meter) -> Response | StreamResponse:
        tried: list[Attempt] = []

        async def attempt(deployment: Attempt) -> ImageSource:
            tried.append(deployment)
            return await self._open(deployment.upstream, deployment.model, req)

        try:
            source, deployment = await self.pipeline.route(model, attempt, body_bytes=len(req.prompt.encode()))
        except UpstreamFailed as exc:
            last = tried[-1] if tried else None
            upstream, upstream_model = (last.upstream, last.model) if last else (None, None)
            meter.ended(upstream, upstream_model, Outcome(error=exc.error))
            return routing.named(replies.error_response(OPENAI, exc.error, exc.headers), exc.deployment)
        meter.also(deployment.on_end)  # the router hears how the answer ended
        response: Response | StreamResponse
        if req.stream:
            tally = _Tally()
            settle = _settler(source, meter, deployment.upstream, deployment.model, tally)
            body = self._stream(source, tally, settle)
            # settle on close too: a client gone before the body started leaves it unrun
            response = StreamResponse(body, media_type="text/event-stream", on_close=settle)
        else:
            response = await self._collect(source, req, meter, deployment.upstream, deployment.model)
        return routing.named(response, deployment)

    async def _open(self, upstream: str, upstream_model: str, req: ImageRequest) -> ImageSource:
        """The image events of one upstream; :class:`UpstreamFailed` when it cannot start."""
        up = self.pipeline.upstreams.get(upstream)
        if up is None:
            raise UpstreamFailed(hub.Error(f"upstream {upstream!r} is not available", "api_error", status=502))
        if up.format == LOCAL:
            error = hub.Error("the local model has no image model", "invalid_request", "no_image_model", 400)
            raise UpstreamFailed(error)
        if up.format in OPENAI_FORMATS:
            body = openai_upstream_body(req, upstream_model)
            if not req.stream:
                data = await up.post_json("images/generations", body)
                return PumpedImages(_once(_read_openai_body(data, upstream, req)), upstream)
            started = asyncio.get_running_loop().time()
            response = await up.open_json("images/generations", body)
            return HTTPImages(response, up.config, started, self.pipeline.config.gateway.max_event_bytes)
        return PumpedImages(await _hub_events(up, upstream_model, req), upstream, up.timeouts)

    async def _stream(
        self, source: ImageSource, tally: _Tally, settle: Callable[[], Awaitable[None]]
    ) -> AsyncIterator[bytes]:
        """The client's SSE body, one write per image (a 1 MB event is never joined with
        another); a keep-alive comment while the upstream is silent (an image takes tens of
        seconds to form), as a lazy timer on the inbox."""
        created = int(time.time())
        loop = asyncio.get_running_loop()
        inbox = source.inbox
        keepalive = self.pipeline.config.gateway.keepalive_seconds
        last_write = [loop.time()]
        timer = LazyTimer(lambda: last_write[0] + keepalive, lambda: inbox.alarm("keepalive"))
        try:
            while True:
                await inbox.wait()
                wrote = False
                for item in source.read():
                    if isinstance(item, hub.Error):
                        tally.error = item
                        tally.ended = True
                        yield encode_error(item)
                        return
                    tally.note(item)
                    if tally.first_byte_at is None:
                        tally.first_byte_at = loop.time()
                    wrote = True
                    yield encode_event(item, created)
                if source.done:
                    tally.ended = True
                    yield DONE
                    return
                if wrote:
                    last_write[0] = loop.time()
                if "keepalive" in inbox.alarms:
                    inbox.alarms.discard("keepalive")
                    if not wrote:
                        yield sse.encode_comment("keep-alive")
                        last_write[0] = loop.time()
                    timer.rearm()
        finally:
            timer.cancel()
            await settle()

    async def _collect(
        self, source: ImageSource, req: ImageRequest, meter: Meter, upstream: str, upstream_model: str
    ) -> Response:
        finals: list[ImageEvent] = []
        tally = _Tally()
        try:
            while not source.done:
                await source.inbox.wait()
                source.inbox.alarms.discard("keepalive")
                for item in source.read():
                    if isinstance(item, hub.Error):
                        tally.error = item
                        meter.ended(upstream, upstream_model, tally.outcome(False))
                        return replies.error_response(OPENAI, item)
                    tally.note(item)
                    if item.type == COMPLETED:
                        finals.append(item)
        finally:
            await source.aclose()
        meter.ended(upstream, upstream_model, tally.outcome(True))
        return replies.json_response(response_body(finals, req, int(time.time())))


async def _once(items: list[Item]) -> AsyncIterator[Item]:
    for item in items:
        yield item


def _read_openai_body(data: Any, upstream: str, req: ImageRequest) -> list[Item]:
    """An upstream ``ImagesResponse``: each image checked, or one error."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(items, list) or not items:
        return [hub.Error(f"upstream {upstream!r} sent no images", "protocol_error", status=502)]
    fmt = data.get("output_format") if data.get("output_format") in OUTPUT_FORMATS else req.output_format
    out: list[Item] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return [hub.Error(f"upstream {upstream!r} sent a malformed image entry", "protocol_error", status=502)]
        b64, url = item.get("b64_json"), item.get("url")
        if isinstance(b64, str):
            problem = image_problem(b64, f"image/{fmt}", MAX_IMAGE_BYTES)
            if problem:
                return [
                    hub.Error(
                        f"upstream {upstream!r} sent a broken image ({problem})",
                        "protocol_error",
                        "bad_upstream_image",
                        502,
                    )
                ]
        elif not isinstance(url, str):
            return [
                hub.Error(
                    f"upstream {upstream!r} sent an image with neither b64_json nor url", "protocol_error", status=502
                )
            ]
        usage = data.get("usage") if i == len(items) - 1 and isinstance(data.get("usage"), dict) else None
        out.append(
            ImageEvent(
                COMPLETED,
                b64 if isinstance(b64, str) else None,
                i,
                str(fmt),
                data.get("size"),
                data.get("quality"),
                data.get("background"),
                usage,
                url=url if isinstance(url, str) else None,
                revised_prompt=item.get("revised_prompt"),
            )
        )
    return out


async def _hub_events(upstream: Upstream, upstream_model: str, req: ImageRequest) -> AsyncIterator[Item]:
    """Images from a chat-dialect upstream: ``n`` generation requests, one after another (Gemini
    image models make one image per call). The first request is opened here, so that a failure
    to start raises :class:`UpstreamFailed` and the next route can be tried."""
    cfg = upstream.config
    hreq = hub_request(req, cfg, upstream_model)
    first = upstream.stream(hreq)
    head: hub.Event | None
    try:
        head = await anext(first)
    except StopAsyncIteration:
        head = None
    except UpstreamFailed:
        raise
    except Exception as exc:
        raise UpstreamFailed(as_hub_error(exc, cfg.name)) from exc

    async def events() -> AsyncIterator[Item]:
        made = 0
        stream = first
        pending = [head] if head is not None else []
        for call in range(req.n):
            if call:
                stream = upstream.stream(hreq)
                pending = []
            reader = HubImages(cfg.name, req, made)
            try:
                for event in pending:
                    for item in reader.feed(event):
                        yield item
                        if isinstance(item, hub.Error):
                            return
                async for event in stream:
                    for item in reader.feed(event):
                        yield item
                        if isinstance(item, hub.Error):
                            return
            except Exception as exc:
                yield as_hub_error(exc, cfg.name)
                return
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
            made = reader.index

    return events()
