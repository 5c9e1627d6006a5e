"""``LocalUpstream``: the embedded model as an upstream that yields hub events."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from .. import hub
from ..errors import UpstreamError
from .chat import ARGUMENTS_PREFIX, CALL_PREFIX, ChatTemplate
from .engine import Engine, Job

__all__ = ["DEFAULT_REPEAT_PENALTY", "LocalUpstream"]


def _invalid(message: str, code: str | None = None) -> UpstreamError:
    return UpstreamError(
        message, status=400, type="invalid_request", body={"message": message, "type": "invalid_request", "code": code}
    )


class LocalUpstream:
    """SmolLM2-135M-Instruct (or any chat GGUF) in this process, through llama-cpp-python.

    The model loads lazily, on a thread, at the first request (about a second), so
    constructing this object is free; ``await upstream.load()`` loads it ahead of time.
    One generation runs at a time on a worker thread; up to ``max_queue`` more wait
    in FIFO order, and beyond that :meth:`stream` raises a 429 ``UpstreamError``.
    """

    name: str = "local"

    def __init__(
        self,
        model_path: str | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        max_queue: int = 8,
        model_name: str = "local",
    ) -> None:
        self.model_name = model_name
        self._engine = Engine(model_path, n_ctx=n_ctx, n_threads=n_threads, max_queue=max_queue)
        self._template: ChatTemplate | None = None

    def models(self) -> list[str]:
        return [self.model_name]

    async def load(self) -> None:
        """Load the model now (it otherwise loads at the first request)."""
        if self._template is None:
            try:
                llm = await asyncio.to_thread(self._engine.load)
            except Exception as exc:  # a missing or unreadable GGUF
                raise UpstreamError(f"the local model did not load: {exc}", status=500, type="api_error") from exc
            self._template = ChatTemplate(llm.metadata.get("tokenizer.chat_template"))

    async def stream(self, request: hub.Request) -> AsyncIterator[hub.Event]:
        """Generate an answer to ``request`` as hub events, token by token.

        Raises ``UpstreamError`` before yielding anything for a request the model
        cannot serve (400) or when the queue is full (429).  Closing the iterator
        (or cancelling the task) stops the generation before its next token.
        """
        await self.load()
        from .generation import DONE, run  # imports llama_cpp

        plan = self._plan(request)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        job: Job | None = None

        def emit(item: Any) -> None:  # worker thread -> event loop
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                if job is not None:
                    job.cancelled = True

        def drop() -> None:
            emit(hub.Error("the local model shut down", type="overloaded", status=503))
            emit(DONE)

        job = Job(run(plan, emit), drop)
        self._engine.submit(job)
        request_id = request.metadata.get("request_id")
        try:
            yield hub.ResponseStart(
                id="local-" + secrets.token_hex(12),
                model=self.model_name,
                created=int(time.time()),
                request_id=request_id,
            )
            get = queue.get
            while (item := await get()) is not DONE:
                yield item
            yield hub.ResponseEnd(request_id)
        finally:
            self._engine.cancel(job)

    async def aclose(self) -> None:
        """Stop generating, fail waiting requests, free the model."""
        await asyncio.to_thread(self._engine.close)

    # ------------------------------------------------------------------ request -> plan

    def _plan(self, request: hub.Request) -> Any:
        from . import grammar as grammars
        from .generation import Plan

        if request.n is not None and request.n > 1:
            raise _invalid("the local model generates one choice per request (n > 1 is not supported)")
        if request.max_tokens is not None and request.max_tokens < 1:
            raise _invalid("max_tokens must be at least 1")
        choice = request.tool_choice or hub.ToolChoice("auto")
        tools = request.tools if choice.mode != "none" else []
        if choice.mode == "tool":
            tools = [t for t in request.tools if t.name == choice.name]
            if not tools:
                raise _invalid(f"tool_choice names {choice.name!r}, which is not among the tools")
        mode = "text"
        text_grammar = None
        response_format = request.response_format or {}
        if tools and choice.mode in ("tool", "required"):
            mode = "tool"
        elif response_format.get("type") in ("json_schema", "json_object"):
            tools = []
            try:
                if response_format["type"] == "json_object":
                    text_grammar = grammars.JSON_OBJECT
                else:
                    text_grammar = grammars.json_schema(response_format.get("schema"))
            except ValueError as exc:
                raise _invalid(str(exc)) from None
        elif tools:
            mode = "auto"
        if mode == "tool":
            for tool in tools:  # refuse unsupported schemas now, not mid-stream
                try:
                    grammars.json_schema(tool.parameters)
                except ValueError as exc:
                    raise _invalid(f"tool {tool.name!r}: {exc}") from None

        assert self._template is not None
        prompt = self._template.render(request, tools=tools)
        if mode == "tool":
            prompt += CALL_PREFIX + (tools[0].name + ARGUMENTS_PREFIX if len(tools) == 1 else "")
        tokens = self._engine.tokenize(prompt)
        room = self._engine.n_ctx - len(tokens)
        if room < 1:
            raise _invalid(
                f"the prompt is {len(tokens)} tokens; the local model's context holds {self._engine.n_ctx}",
                code="context_length_exceeded",
            )
        return Plan(
            mode=mode,
            prompt=prompt,
            tokens=tokens,
            max_tokens=min(request.max_tokens or room, room),
            stops=[s for s in request.stop or () if s],
            grammar=text_grammar,
            tools=tools,
            sampling=_sampling(request),
        )


# A 135M model decoding greedily falls into loops ("la femme, la femme, ...") within a few
# dozen tokens; llama.cpp's classic repeat penalty over the last 64 tokens stops that. It
# applies unless the request sets OpenAI-style penalties of its own.
DEFAULT_REPEAT_PENALTY = 1.1


def _sampling(request: hub.Request) -> dict[str, Any]:
    """Greedy (deterministic) unless a temperature above 0 is asked for; then a seeded draw."""
    temperature = request.temperature or 0.0
    own_penalties = request.presence_penalty is not None or request.frequency_penalty is not None
    repeat = 1.0 if own_penalties else DEFAULT_REPEAT_PENALTY
    if temperature <= 0:
        return {
            "temperature": 0.0,
            "presence_penalty": request.presence_penalty,
            "frequency_penalty": request.frequency_penalty,
            "repeat_penalty": repeat,
        }
    return {
        "repeat_penalty": repeat,
        "temperature": temperature,
        "top_k": request.top_k,
        "top_p": request.top_p,
        "seed": request.seed if request.seed is not None else random.getrandbits(32),
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
    }
