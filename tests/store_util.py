"""Fake vendor upstreams on real sockets for the stored-response and cache tests (issue 25)."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge import dialects, hub


def answer_bytes(
    dialect: str, text: str, *, tool: bool = False, thinking: bool = False, response_id: str = "up_1"
) -> bytes:
    """A whole streamed answer in ``dialect``, made by our own encoder (what its SDK accepts)."""
    events: list[hub.Event] = [hub.ResponseStart(response_id, "up-model", 1)]
    if thinking:
        fidelity = {"anthropic-messages": {"signature": "sig-1"}}
        events += [hub.BlockStart(5, "thinking"), hub.Delta(5, "pondering"), hub.BlockStop(5, fidelity)]
    events += [hub.BlockStart(0, "text"), hub.Delta(0, text), hub.BlockStop(0)]
    if tool:
        events += [hub.BlockStart(1, "tool_call", "call_1", "lookup"), hub.Delta(1, '{"q": 1}'), hub.BlockStop(1)]
    events += [hub.Usage(input_tokens=10, output_tokens=3), hub.Finish("tool_use" if tool else "end_turn")]
    events.append(hub.ResponseEnd())
    encoder = dialects.get(dialect).StreamEncoder()
    return b"".join(encoder.encode(e) for e in events)


class FakeUpstreams:
    """Chat Completions, Messages and Gemini on one server; each request's body is kept."""

    def __init__(self) -> None:
        self.received: dict[str, list[dict]] = {
            "openai-chat": [], "anthropic-messages": [], "gemini": [], "openai-responses": []
        }  # fmt: skip

    def app(self) -> Starlette:
        def endpoint(dialect: str):
            async def handle(request: Request) -> Response:
                seen = self.received[dialect]
                body = json.loads(await request.body())
                seen.append(body)
                text = f"reply {len(seen)} from {dialect}"
                asked = json.dumps(body)
                data = answer_bytes(
                    dialect, text, tool="use the tool" in asked, thinking="think first" in asked,
                    response_id=f"resp_upstream{len(seen)}",
                )  # fmt: skip
                if "cut me short" in asked:  # an answer that breaks off: never to be cached
                    data = data[: len(data) // 2]
                return Response(data, media_type="text/event-stream")

            return handle

        return Starlette(
            routes=[
                Route("/v1/chat/completions", endpoint("openai-chat"), methods=["POST"]),
                Route("/v1/responses", endpoint("openai-responses"), methods=["POST"]),
                Route("/v1/messages", endpoint("anthropic-messages"), methods=["POST"]),
                Route("/v1beta/models/{target:path}", endpoint("gemini"), methods=["POST"]),
            ]
        )
