"""The llm-stream non-streaming response body (``"type": "response"``) <-> hub events / hub.Response."""

from __future__ import annotations

from typing import Any

import msgspec

from ... import hub
from ._common import (
    NS,
    USAGE_DETAILS,
    VERSION,
    annotation,
    error_fields,
    error_from,
    expect,
    finish_fields,
    finish_from,
    opt_str,
    usage_fields,
)
from ._request import decode_tool_call


def _block_dict(b: hub.Block) -> dict:
    out: dict[str, Any] = {"index": b.index, "kind": b.kind, "text": b.text}
    for key in ("id", "name", "mime_type", "fidelity", "extensions"):
        value = getattr(b, key)
        if value is not None and value != {}:
            out[key] = value
    if b.choice:
        out["choice"] = b.choice
    return out


def _annotations_list(items: list[hub.Extension]) -> list[dict]:
    return [annotation(a) for a in items]


def encode_response(response: hub.Response) -> dict:
    """An assembled response as the non-streaming body (``"type": "response"``, see docs)."""
    body: dict[str, Any] = {"v": VERSION, "type": "response"}
    for key in ("id", "model", "created", "request_id"):
        value = getattr(response, key)
        if value is not None:
            body[key] = value
    content: list[dict] = []
    calls: list[dict] = []
    other: list[dict] = []
    annotations = _annotations_list(response.annotations)
    for b in response.blocks:
        annotations += _annotations_list(b.annotations)
        pairs = (("llmbridge:fidelity", b.fidelity), ("llmbridge:extensions", b.extensions))
        extra: dict[str, Any] = {k: v for k, v in pairs if v}
        if b.choice == 0 and b.kind == "text":
            if b.id is not None:
                extra["llmbridge:id"] = b.id
            content.append({"type": "text", "index": b.index, "text": b.text, **extra})
        elif b.choice == 0 and b.kind == "tool_call":
            call_id = b.id if b.id is not None else f"call_{response.id or 'llmbridge'}_{b.index}"
            calls.append({"index": b.index, "id": call_id, "name": b.name or "", "arguments": b.text or "{}", **extra})
        else:
            other.append(_block_dict(b))
    body["content"] = content
    if calls:
        body["tool_calls"] = calls
    finish = response.finishes.get(0)
    if finish is not None:
        finish_fields(finish, body)
    more = [f for c, f in response.finishes.items() if c != 0]
    if more:
        body["llmbridge:finishes"] = [finish_fields(f, {"choice": f.choice}) for f in more]
    if response.usage is not None:
        body["usage"] = usage_fields(response.usage)
    if response.error is not None:
        body["error"] = error_fields(response.error)
        if response.error.status is not None:
            body["llmbridge:status"] = response.error.status
        if response.error.body is not None:
            body["llmbridge:body"] = response.error.body
    if other:
        body["llmbridge:blocks"] = other
    if annotations:
        body["llmbridge:annotations"] = annotations
    if response.extensions:
        body["llmbridge:extensions"] = response.extensions
    return body


def decode_response(body: dict) -> list[hub.Event]:
    """A non-streaming body as a hub stream; :class:`RequestError` names a malformed field."""
    expect(body, (dict,), "body", "a JSON object")
    if "error" in body and "content" not in body:
        return [hub.ResponseStart(), _response_error(body), hub.ResponseEnd()]
    r = hub.Response(
        opt_str(body, "id", "body"),
        opt_str(body, "model", "body"),
        body.get("created") if type(body.get("created")) is int else None,
        opt_str(body, "request_id", "body"),
    )
    blocks: list[hub.Block] = []
    content = body.get("content") or []
    expect(content, (list,), "content", "an array")
    for i, item in enumerate(content):
        expect(item, (dict,), f"content[{i}]", "an object")
        text = expect(item.get("text", ""), (str,), f"content[{i}].text", "a string")
        blocks.append(
            hub.Block(
                item.get("index", i) if type(item.get("index")) is int else i,
                "text",
                opt_str(item, "llmbridge:id", f"content[{i}]"),
                text=text,
                fidelity=item.get("llmbridge:fidelity"),
                extensions=item.get("llmbridge:extensions"),
            )
        )
    calls = body.get("tool_calls") or []
    expect(calls, (list,), "tool_calls", "an array")
    for i, call in enumerate(calls):
        part = decode_tool_call(call, f"tool_calls[{i}]")
        index = call.get("index") if type(call.get("index")) is int else len(content) + i
        blocks.append(
            hub.Block(
                index,
                "tool_call",
                part.id,
                part.name,
                text=part.arguments,
                fidelity=call.get("llmbridge:fidelity"),
                extensions=call.get("llmbridge:extensions"),
            )
        )
    for i, item in enumerate(body.get("llmbridge:blocks") or []):
        expect(item, (dict,), f"llmbridge:blocks[{i}]", "an object")
        blocks.append(
            hub.Block(
                item.get("index", len(blocks)),
                item.get("kind", "text"),
                item.get("id"),
                item.get("name"),
                item.get("choice", 0),
                item.get("mime_type"),
                item.get("text", ""),
                item.get("fidelity"),
                item.get("extensions"),
            )
        )
    blocks.sort(key=lambda b: b.index)
    by_index = {b.index: b for b in blocks}
    for a in body.get("llmbridge:annotations") or []:
        if type(a) is dict and type(a.get("namespace")) is str:
            note = hub.Extension(a["namespace"], a.get("data"), a.get("index"))
            block = by_index.get(note.index) if note.index is not None else None
            (block.annotations if block is not None else r.annotations).append(note)
    r.blocks = blocks
    finish = finish_from(body, 0)
    if finish is not None:
        r.finishes[0] = finish
    for f in body.get("llmbridge:finishes") or []:
        if type(f) is dict and type(f.get("choice")) is int and (finish := finish_from(f, f["choice"])):
            r.finishes[f["choice"]] = finish
    usage = body.get("usage")
    if type(usage) is dict:
        r.usage = hub.Usage(
            usage.get("input_tokens"), usage.get("output_tokens"), extensions=usage.get("llmbridge:extensions")
        )
        for name in USAGE_DETAILS:
            setattr(r.usage, name, usage.get(NS + name))
    if body.get("error") is not None:
        r.error = _response_error(body)
    ext = body.get("llmbridge:extensions")
    r.extensions = ext if type(ext) is dict and ext else None
    return hub.response_events(r)


def _response_error(body: dict) -> hub.Error:
    return msgspec.structs.replace(error_from(0, body), body=body.get("llmbridge:body"))
