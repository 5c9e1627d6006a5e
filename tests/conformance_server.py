"""A small LLM-Stream server for the conformance suite's own tests, with one fault switchable at a time.

With ``fault=None`` it conforms (every check passes); each fault breaks exactly one rule,
so a test can show the suite catches it.  Canned answers, no model: a text turn, a
tool-call turn when the request declares tools, a long slow turn for "Count from ...".
"""

from __future__ import annotations

import asyncio
import json
import struct

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

TYPE_BYTES = {
    "stream.start": 1,
    "content.delta": 2,
    "tool.call": 3,
    "content.stop": 4,
    "usage": 5,
    "error": 6,
    "stream.end": 7,
}


def _events(body: dict, fault: str | None) -> list[dict]:
    rid = (body.get("metadata") or {}).get("request_id")
    echo = {"request_id": rid} if rid and fault != "no-echo" else {}
    ev: list[dict] = [{"type": "stream.start", "model": body.get("model"), **echo}]
    if body.get("tools"):
        name = "rm_rf" if fault == "undeclared-tool" else body["tools"][0]["name"]
        args = "{city: Vienna" if fault == "bad-tool-args" else '{"city":"Vienna"}'
        ev.append({"type": "tool.call", "index": 0, "id": "call_1", "name": name, "arguments": args})
        ev.append({"type": "content.stop", "index": 0, "stop_reason": "tool_use"})
    else:
        ev.append({"type": "content.delta", "index": 0, "role": "assistant", "delta": {"text": "Hello, "}})
        ev.append({"type": "content.delta", "index": 0, "role": "assistant", "delta": {"text": "wörld ✓"}})
        if fault != "no-content-stop":
            ev.append({"type": "content.stop", "index": 0, "stop_reason": "end_turn"})
    if fault == "bad-error":
        ev.append({"type": "error", "error": "oops"})
    if fault == "content-after-error":
        ev.append({"type": "error", "error": {"type": "api_error", "message": "boom"}})
        ev.append({"type": "content.delta", "index": 5, "role": "assistant", "delta": {"text": "late"}})
    usage = {"type": "usage", "input_tokens": "3" if fault == "bad-usage" else 3, "output_tokens": 2}
    if fault != "no-usage":
        ev.append(usage)
    if fault != "no-end":
        ev.append({"type": "stream.end", **echo})
    if fault == "after-end":
        ev.append({"type": "usage", "input_tokens": 3, "output_tokens": 2})
    if fault == "two-starts":
        ev.insert(1, {"type": "stream.start"})
    if fault == "no-start":
        ev.pop(0)
    for n, e in enumerate(ev):
        seq = n + (1 if fault == "seq-from-one" else 0) + (3 if fault == "seq-gap" and n >= 2 else 0)
        e.update({"v": "1.0", "seq": seq} if fault != "no-v" else {"seq": seq})
    return ev


def _sse(ev: list[dict], fault: str | None) -> bytes:
    out = []
    for n, e in enumerate(ev):
        name = "content.delta" if fault == "name-mismatch" and e["type"] == "usage" else e["type"]
        data = json.dumps(e, ensure_ascii=False)
        if fault == "split-json" and n == 1:
            out.append(f"event: {name}\ndata: {data[:20]}\n\nevent: {name}\ndata: {data[20:]}\n\n")
            continue
        out.append(f"event: {name}\ndata: {data}\n\n")
        if fault == "junk-line" and n == 0:
            out.append("hello world\n\n")
    body = "".join(out).encode()
    if fault == "not-utf8":
        body = body.replace("✓".encode(), b"\xff\xfe")
    return body


def _binary(ev: list[dict], fault: str | None) -> bytes:
    out = []
    for e in ev:
        payload = json.dumps(e).encode()
        t = TYPE_BYTES.get(e["type"], 0x40)
        if fault == "binary-type-byte" and e["type"] == "usage":
            t = 2
        out.append(struct.pack(">BI", t, len(payload)) + payload)
        if fault == "binary-unknown-type" and e["type"] == "stream.start":
            out.append(struct.pack(">BI", 0x99, 2) + b"{}")
    body = b"".join(out)
    if fault == "binary-bad-length":
        body = body[:-10] + struct.pack(">BI", 7, 500) + b"{}"
    return body


def create(fault: str | None = None) -> Starlette:
    async def stream(request: Request) -> Response:
        ctype = request.headers.get("content-type", "").split(";")[0].strip()
        accept = request.headers.get("accept", "")
        if ctype not in ("application/llm-request+json", "application/json") and fault != "accept-anything":
            return Response('{"error":{"type":"unsupported_media_type","message":"no"}}', 415)
        if "version=" in request.headers.get("content-type", "") and fault == "reject-version-param":
            return Response('{"error":{"type":"invalid_request","message":"version?"}}', 400)
        if accept == "application/xml" and fault != "no-406":
            return Response('{"error":{"type":"invalid_request","message":"406"}}', 406)
        raw = await request.body()
        if len(raw) > 50_000 and fault == "500-on-large":
            return Response("boom", 500)
        try:
            body = json.loads(raw)
            assert isinstance(body, dict) and isinstance(body.get("messages"), list)
        except Exception:
            if fault == "html-errors":
                return Response("<h1>bad</h1>", 400, media_type="text/html")
            return Response('{"error":{"type":"invalid_request","message":"bad request"}}', 400)
        if not str(body.get("model", "")).startswith("m"):
            return Response('{"error":{"type":"not_found","message":"no such model"}}', 404)
        rejects = {
            "reject-unknown-fields": "conformance_unknown_field" in body,
            "reject-unknown-params": "conformance_unknown_knob" in (body.get("parameters") or {}),
            "reject-unknown-ext": "vendor:conformance-unknown" in (body.get("extensions") or {}),
        }
        if rejects.get(fault or ""):
            return Response('{"error":{"type":"invalid_request","message":"unknown field"}}', 400)
        ev = _events(body, fault)
        if "Count from" in json.dumps(body):
            return StreamingResponse(_slow(), media_type="text/event-stream")
        if "application/llm-stream+binary" in accept:
            media = "text/plain" if fault == "binary-as-text" else "application/llm-stream+binary"
            return Response(_binary(ev, fault), media_type=media)
        media = "application/json" if fault == "content-type" else "text/event-stream"
        return Response(_sse(ev, fault), media_type=media)

    async def _slow():
        yield b'event: stream.start\ndata: {"v":"1.0","seq":0,"type":"stream.start"}\n\n'
        for n in range(1, 400):
            await asyncio.sleep(0.05)
            data = {"v": "1.0", "seq": n, "type": "content.delta", "index": 0, "delta": {"text": f"{n}\n"}}
            yield f"event: content.delta\ndata: {json.dumps(data)}\n\n".encode()

    async def ws_endpoint(ws: WebSocket) -> None:
        await ws.accept(subprotocol="llm-stream.v1")
        turn: asyncio.Task | None = None
        cancelled = asyncio.Event()

        async def run(body: dict) -> None:
            if "Count from" in json.dumps(body):
                await ws.send_text('{"v":"1.0","seq":0,"type":"stream.start"}')
                seq = 1
                for n in range(1, 400):
                    if cancelled.is_set() and fault != "ws-no-cancel":
                        await ws.send_text(
                            json.dumps(
                                {
                                    "v": "1.0",
                                    "seq": seq,
                                    "type": "error",
                                    "error": {"type": "cancelled", "message": "cancelled"},
                                }
                            )
                        )
                        await ws.send_text(json.dumps({"v": "1.0", "seq": seq + 1, "type": "stream.end"}))
                        return
                    await asyncio.sleep(0.01)
                    await ws.send_text(
                        json.dumps(
                            {"v": "1.0", "seq": seq, "type": "content.delta", "index": 0, "delta": {"text": str(n)}}
                        )
                    )
                    seq += 1
                    if n == 30:
                        break
                await ws.send_text(
                    json.dumps({"v": "1.0", "seq": seq, "type": "content.stop", "index": 0, "stop_reason": "end_turn"})
                )
                await ws.send_text(json.dumps({"v": "1.0", "seq": seq + 1, "type": "stream.end"}))
                return
            for e in _events(body, None):
                await ws.send_text(json.dumps(e))

        try:
            while True:
                m = await ws.receive()
                if m["type"] == "websocket.disconnect":
                    return
                if m.get("bytes") is not None:
                    if fault == "ws-binary-ignored":
                        continue
                    await ws.close(1003)
                    return
                try:
                    obj = json.loads(m["text"])
                except ValueError:
                    for e in [
                        {"type": "stream.start"},
                        {"type": "error", "error": {"type": "invalid_request", "message": "bad json"}},
                        {"type": "stream.end"},
                    ]:
                        e.update(
                            {"v": "1.0", "seq": [0, 1, 2][["stream.start", "error", "stream.end"].index(e["type"])]}
                        )
                        await ws.send_text(json.dumps(e))
                    continue
                if obj.get("type") == "cancel":
                    cancelled.set()
                    continue
                if turn is not None:
                    await turn
                cancelled.clear()
                turn = asyncio.ensure_future(run(obj))
        except WebSocketDisconnect:
            pass
        finally:
            if turn is not None:
                turn.cancel()

    return Starlette(routes=[Route("/v1/stream", stream, methods=["POST"]), WebSocketRoute("/v1/stream", ws_endpoint)])


# fault -> the check that must fail because of it
FAULTS = {
    "no-start": "lifecycle.start-first",
    "two-starts": "lifecycle.start-first",
    "seq-from-one": "lifecycle.start-first",
    "seq-gap": "seq.order",
    "no-end": "lifecycle.one-end",
    "after-end": "lifecycle.one-end",
    "split-json": "stream.one-json-object",
    "name-mismatch": "envelope.event-name",
    "no-v": "envelope.fields",
    "bad-usage": "usage.shape",
    "no-usage": "usage.present",
    "bad-error": "error.shape",
    "content-after-error": "error.last",
    "no-content-stop": "lifecycle.content-stop",
    "bad-tool-args": "tool.shape",
    "undeclared-tool": "tool.declared",
    "content-type": "stream.content-type",
    "not-utf8": "stream.utf8",
    "junk-line": "stream.sse-lines",
    "no-echo": "request-id.echo",
    "reject-unknown-fields": "request.unknown-fields",
    "reject-unknown-params": "request.unknown-parameters",
    "reject-unknown-ext": "request.unknown-extensions",
    "reject-version-param": "request.version-param",
    "accept-anything": "negotiation.415",
    "no-406": "negotiation.406",
    "500-on-large": "errors.large-request",
    "html-errors": "errors.bad-request",
    "binary-bad-length": "binary.framing",
    "binary-unknown-type": "binary.framing",
    "binary-type-byte": "binary.type-byte",
    "binary-as-text": "binary.content-type",
    "ws-binary-ignored": "ws.binary-message",
    "ws-no-cancel": "ws.cancel",
}
