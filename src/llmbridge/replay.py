"""``llmbridge replay DIR``: an upstream of every dialect that serves captured stream bodies.

A request for model ``NAME`` on any gateway endpoint gets the body of ``NAME.sse`` found
anywhere under DIR (the corpus layout ``DIR/<dialect>/<NAME>.sse``: the folder names the
dialect and so the content type), cut into chunks at random byte boundaries (inside UTF-8
characters too) from a seeded generator, optionally paced.  A non-streaming request gets the
captured stream assembled into that dialect's response body.

Fault injection through suffixes of the model name, combinable (``NAME@truncate=300@stall=2``):

``@truncate=N``  send only the first N bytes, then end the body (a truncated stream)
``@stall=S``     after the first chunk, send nothing for S seconds, then go on
``@status=C``    answer HTTP status C with the dialect's error body (429, 500, 503 ...)
``@delay-ms=D``  sleep D milliseconds before each chunk
``@chunk=N``     chunks of at most N bytes (default 256)

Images and embeddings (``tests/data``): ``POST /v1/images/generations`` serves
``openai-images/NAME.sse`` (OpenAI's Images stream; not streaming, its completed images as an
``ImagesResponse``); ``POST /v1/embeddings`` serves ``openai-embeddings/NAME.json`` and
Gemini's ``:embedContent`` / ``:batchEmbedContents`` serve ``gemini-embeddings/NAME.json``,
as they are (the faults above apply to these too, except ``@stall`` and ``@chunk``).

``stats`` on the app records what happened (requests, completed and cancelled streams), so
tests can see a client disconnect arrive here.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import dialects, hub
from .dialects.base import decode_all, json_decode
from .gateway import _replies as replies
from .gateway._app import ENDPOINTS, GEMINI, GEMINI_VERSIONS
from .gateway._response import StreamResponse

__all__ = [
    "DEFAULT_CHUNK",
    "Faults",
    "Replay",
    "Stats",
    "chunks",
    "create_app",
    "index",
    "parse_model",
    "serve",
]

DEFAULT_CHUNK = 256
EMBEDDING_FOLDERS = ("openai-embeddings", "gemini-embeddings")


@dataclass
class Stats:
    requests: list[str] = field(default_factory=list)  # model names as requested, faults included
    completed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)  # the client went away mid-body
    active: int = 0


@dataclass
class Faults:
    truncate: int | None = None
    stall: float = 0.0
    status: int | None = None
    delay_ms: float = 0.0
    chunk: int = DEFAULT_CHUNK


def parse_model(model: str) -> tuple[str, Faults]:
    """``'name@truncate=10@stall=1'`` -> ``('name', Faults(truncate=10, stall=1.0))``."""
    name, *suffixes = model.split("@")
    faults = Faults()
    for suffix in suffixes:
        key, _, value = suffix.partition("=")
        try:
            if key == "truncate":
                faults.truncate = int(value)
            elif key == "stall":
                faults.stall = float(value)
            elif key == "status":
                faults.status = int(value)
            elif key == "delay-ms":
                faults.delay_ms = float(value)
            elif key == "chunk":
                faults.chunk = max(1, int(value))
            else:
                raise ValueError(key)
        except ValueError:
            raise ValueError(f"bad fault suffix {suffix!r} in model {model!r}") from None
    return name, faults


def index(directory: str | Path, dialect: str | None = None) -> dict[str, list[tuple[str | None, Path]]]:
    """Every ``*.sse`` under ``directory``: name -> [(dialect or None, path)]."""
    found: dict[str, list[tuple[str | None, Path]]] = {}
    for path in sorted(Path(directory).rglob("*.sse")):
        folder = dialect or (path.parent.name if path.parent.name in dialects.NAMES else None)
        found.setdefault(path.stem, []).append((folder, path))
    return found


def chunks(data: bytes, rng: random.Random, largest: int) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, largest)
        out.append(data[i : i + n])
        i += n
    return out


class Replay:
    def __init__(self, directory: str | Path, seed: int = 0, dialect: str | None = None, delay_ms: float = 0.0):
        self.files = index(directory, dialect)
        # name -> path of JSON answers, per shape ("openai-embeddings", "gemini-embeddings")
        self.answers: dict[str, dict[str, Path]] = {}
        for path in sorted(Path(directory).rglob("*.json")):
            if path.parent.name in EMBEDDING_FOLDERS:
                self.answers.setdefault(path.parent.name, {})[path.stem] = path
        self.seed = seed
        self.delay_ms = delay_ms
        self.stats = Stats()

    def find(self, name: str, endpoint: str) -> tuple[str | None, Path] | None:
        candidates = self.files.get(name)
        if not candidates:
            return None
        return next((c for c in candidates if c[0] == endpoint), candidates[0])

    async def models(self, request: Request) -> Response:
        names = sorted(self.files)
        path = request.url.path
        if path.startswith(("/v1beta", "/v1alpha")) or "x-goog-api-key" in request.headers:
            dialect = "gemini"
        elif path.startswith("/mmsp"):
            dialect = "mmsp"
        elif "anthropic-version" in request.headers:
            dialect = "anthropic-messages"
        else:
            dialect = "openai-chat"
        return replies.json_response(dialects.served(dialect).models(names))

    async def generate(self, request: Request) -> Response:
        endpoint = ENDPOINTS[request.url.path]
        return await self.serve_request(request, endpoint, None, None)

    async def gemini(self, request: Request) -> Response:
        model, _, action = request.path_params["target"].rpartition(":")
        if action in ("embedContent", "batchEmbedContents"):
            return await self.answer(request, GEMINI, "gemini-embeddings", model.removeprefix("models/"))
        if action not in ("generateContent", "streamGenerateContent"):
            return replies.error(GEMINI, f"unknown method {action!r}", "not_found")
        return await self.serve_request(request, GEMINI, model.removeprefix("models/"), action != "generateContent")

    async def admit(
        self, request: Request, dialect: str, model: str | None
    ) -> Response | tuple[dict[str, Any], str, str, Faults]:
        """What every endpoint does first: the JSON body, the model (``model`` when the URL
        names it, else the body's), and the faults the model name asks for.

        Returns ``(body, model, name, faults)``, or the refusal to send as it is: a 400 in
        ``dialect``'s shape for a bad body or model name, or the injected status.  Counts the
        request in ``stats.requests`` once its model is known.
        """
        try:
            body = json_decode(await request.body())
        except Exception:
            return replies.error(dialect, "request body is not valid JSON", "invalid_request")
        if not isinstance(body, dict):
            return replies.error(dialect, "request body must be a JSON object", "invalid_request")
        model = model or body.get("model")
        if not isinstance(model, str):
            return replies.error(dialect, "no model in the request", "invalid_request")
        self.stats.requests.append(model)
        try:
            name, faults = parse_model(model)
        except ValueError as exc:
            return replies.error(dialect, str(exc), "invalid_request")
        if faults.status is not None:
            error = hub.Error(
                f"injected status {faults.status}", hub.error_type_for_status(faults.status), status=faults.status
            )
            # The statuses a real provider sends Retry-After with, so clients' retry logic is exercised.
            headers = {"retry-after": "1"} if faults.status in (429, 503, 529) else None
            return replies.error_response(dialect, error, headers)
        return body, model, name, faults

    async def serve_request(self, request: Request, endpoint: str, model: str | None, stream: bool | None) -> Response:
        admitted = await self.admit(request, endpoint, model)
        if isinstance(admitted, Response):
            return admitted
        body, model, name, faults = admitted
        if stream is None:
            stream = bool(body.get("stream", endpoint in ("llm-stream", "mmsp")))
        found = self.find(name, endpoint)
        if found is None:
            return replies.error(endpoint, f"model {name!r} not found (no {name}.sse)", "not_found")
        dialect, path = found
        data = path.read_bytes()
        if faults.truncate is not None:
            data = data[: faults.truncate]
        if not stream:
            return self.assembled(dialect or endpoint, data)
        codec = dialects.get(dialect) if dialect else None
        media = getattr(codec, "STREAM_CONTENT_TYPE", "text/event-stream")
        rng = random.Random(f"{self.seed}:{model}")
        pieces = chunks(data, rng, faults.chunk)
        return StreamResponse(self.paced(model, pieces, faults), media_type=media)

    async def paced(self, model: str, pieces: list[bytes], faults: Faults):
        delay = (faults.delay_ms or self.delay_ms) / 1000
        self.stats.active += 1
        done = False
        try:
            for n, piece in enumerate(pieces):
                if delay:
                    await asyncio.sleep(delay)
                yield piece
                if n == 0 and faults.stall:
                    await asyncio.sleep(faults.stall)
            done = True
        finally:
            self.stats.active -= 1
            (self.stats.completed if done else self.stats.cancelled).append(model)

    async def embeddings(self, request: Request) -> Response:
        return await self.answer(request, "openai-chat", "openai-embeddings", None)

    async def answer(self, request: Request, dialect: str, folder: str, model: str | None) -> Response:
        """A captured JSON answer (embeddings), after the model name's faults."""
        admitted = await self.admit(request, dialect, model)
        if isinstance(admitted, Response):
            return admitted
        _, model, name, faults = admitted
        path = self.answers.get(folder, {}).get(name)
        if path is None:
            return replies.error(dialect, f"model {name!r} not found (no {folder}/{name}.json)", "not_found")
        data = path.read_bytes()
        if faults.truncate is not None:
            data = data[: faults.truncate]
        if faults.delay_ms:
            await asyncio.sleep(faults.delay_ms / 1000)
        self.stats.completed.append(model)
        return Response(data, media_type="application/json")

    async def images(self, request: Request) -> Response:
        """OpenAI's Images API from ``openai-images/NAME.sse``."""
        from . import media
        from .gateway import _images as images

        dialect = "openai-chat"
        admitted = await self.admit(request, dialect, None)
        if isinstance(admitted, Response):
            return admitted
        body, model, name, faults = admitted
        found = next((p for folder, p in self.files.get(name, []) if p.parent.name == "openai-images"), None)
        if found is None:
            return replies.error(dialect, f"model {name!r} not found (no openai-images/{name}.sse)", "not_found")
        data = found.read_bytes()
        if faults.truncate is not None:
            data = data[: faults.truncate]
        if not body.get("stream"):
            reader = media.ImageStreamDecoder(name)
            items = [*reader.feed(data), *reader.close()]
            error = next((i for i in items if isinstance(i, hub.Error)), None)
            if error is not None:
                return replies.error_response(dialect, error)
            finals = [i for i in items if i.type == media.COMPLETED]
            request_ = images.ImageRequest(name, "replay")
            return replies.json_response(images.response_body(finals, request_, 0))
        rng = random.Random(f"{self.seed}:{model}")
        pieces = chunks(data, rng, faults.chunk)
        return StreamResponse(self.paced(model, pieces, faults), media_type="text/event-stream")

    def assembled(self, dialect: str, data: bytes) -> Response:
        codec = dialects.get(dialect)
        response = hub.assemble(decode_all(codec.StreamDecoder(), data))
        if response.error is not None:
            return replies.error_response(dialect, response.error)
        return replies.json_response(codec.encode_response(response))


def create_app(directory: str | Path, seed: int = 0, dialect: str | None = None, delay_ms: float = 0.0) -> Starlette:
    """The replay server as an ASGI app; ``app.state.replay.stats`` records what it served."""
    replay = Replay(directory, seed, dialect, delay_ms)
    routes = [Route(path, replay.generate, methods=["POST"]) for path in ENDPOINTS]
    routes += [
        *(Route(f"/{v}/models/{{target:path}}", replay.gemini, methods=["POST"]) for v in GEMINI_VERSIONS),
        Route("/v1/models", replay.models, methods=["GET"]),
        Route("/v1beta/models", replay.models, methods=["GET"]),
        Route("/mmsp/v1/models", replay.models, methods=["GET"]),
        Route("/v1/images/generations", replay.images, methods=["POST"]),
        Route("/v1/embeddings", replay.embeddings, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.replay = replay
    return app


def serve(
    directory: str,
    host: str = "127.0.0.1",
    port: int = 8001,
    seed: int = 0,
    dialect: str | None = None,
    delay_ms: float = 0.0,
) -> None:
    import uvicorn

    if not Path(directory).is_dir():
        raise SystemExit(f"llmbridge replay: {directory} is not a directory")
    app = create_app(directory, seed, dialect, delay_ms)
    if not app.state.replay.files:
        raise SystemExit(f"llmbridge replay: no *.sse files under {directory}")
    uvicorn.run(app, host=host, port=port, log_level="info")
