"""Non-streaming Anthropic Messages bodies and error bodies <-> hub."""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY, json_decode
from ._common import (
    MESSAGE_KEYS,
    MESSAGE_NULLABLE,
    NAME,
    apply_usage_extra,
    block_start,
    citations,
    error_body,
    error_from_body,
    event_from_json,
    event_to_json,
    finish_from_stop,
    stop_from_finish,
    usage_from_raw,
    usage_to_raw,
)

_BLOCK_EXT_KEYS = ("fidelity", "extensions", "annotations")


def decode_response(body: dict[str, Any]) -> list[hub.Event]:
    """A Messages response body (or error body) as a hub stream."""
    if type(body) is not dict:
        return [
            hub.ResponseStart(),
            hub.Error("response body is not a JSON object", "protocol_error"),
            hub.ResponseEnd(),
        ]
    if body.get("type") == "error":
        return [hub.ResponseStart(), error_from_body(body), hub.ResponseEnd()]
    ours = body.get(EXTENSION_KEY) if type(body.get(EXTENSION_KEY)) is dict else {}
    extras = {k: v for k, v in body.items() if k not in MESSAGE_KEYS and not (v is None and k in MESSAGE_NULLABLE)}
    extensions = {NAME: extras} if extras else None
    if ours.get("extensions"):
        extensions = {**(extensions or {}), **ours["extensions"]}
    events: list[hub.Event] = [
        hub.ResponseStart(
            None if ours.get("no_id") else body.get("id"),
            body.get("model"),
            ours.get("created"),
            ours.get("request_id"),
            extensions,
        )
    ]
    content = body.get("content")
    message_id = body.get("id") or "llmbridge"
    used: set[int] = set()

    def allocate(preferred: Any) -> int:
        index = preferred if type(preferred) is int and preferred not in used else 0
        while index in used:
            index += 1
        used.add(index)
        return index

    for position, block in enumerate(content if type(content) is list else ()):
        if type(block) is not dict:
            continue
        block_ours = block.get(EXTENSION_KEY) if type(block.get(EXTENSION_KEY)) is dict else {}
        n = allocate(block_ours.get("index", position))
        start, text = block_start(block, n, f"toolu_{message_id}_{position + 1}", whole=True)
        fidelity = hub.merge_dicts(start.fidelity, block_ours.get("fidelity"))
        extensions = hub.merge_dicts(start.extensions, block_ours.get("extensions"))
        block_id = start.id or block_ours.get("id")
        events.append(hub.BlockStart(n, start.kind, block_id, start.name, 0, start.mime_type, None, extensions))
        if block.get("type") == EXTENSION_KEY:
            text = (block.get(EXTENSION_KEY) or {}).get("text") or ""
        elif "arguments" in block_ours:
            text = block_ours["arguments"]
        if text:
            events.append(hub.Delta(n, text))
        events.extend(citations(block, n))
        for note in block_ours.get("annotations") or ():
            event = event_from_json(note)
            if type(event) is hub.Extension:
                events.append(hub.Extension(event.namespace, event.data, n))
        events.append(hub.BlockStop(n, fidelity))
    remap: dict[int, int] = {}
    for note in ours.get("events") or ():  # other choices
        event = event_from_json(note)
        if event is None:
            continue
        if type(event) is hub.BlockStart:
            remap[event.index] = allocate(event.index)
        if hasattr(event, "index") and type(event) is not hub.Finish:
            if event.index not in remap:
                continue
            event.index = remap[event.index]
        events.append(event)
    for note in ours.get("annotations") or ():
        event = event_from_json(note)
        if type(event) is hub.Extension:
            events.append(event)
    usage = body.get("usage")
    if type(usage) is dict:
        known = apply_usage_extra(usage_from_raw(usage), ours.get("usage"))
        if any(getattr(known, f) is not None for f in known.__struct_fields__):
            events.append(known)
    finish = event_from_json(ours.get("finish"))
    if type(finish) is hub.Finish:
        events.append(finish)
    elif type(body.get("stop_reason")) is str:
        events.append(finish_from_stop(body["stop_reason"], body.get("stop_sequence")))
    events.append(hub.ResponseEnd(ours.get("request_id")))
    return events


def encode_response(response: hub.Response) -> dict[str, Any]:
    """An assembled hub response as a Messages response body."""
    if response.error is not None:
        return error_body(response.error)
    content: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for block in response.blocks:
        if block.choice != 0:
            others.extend(event_to_json(e) for e in hub.response_events(_only(block)) if _is_block_event(e))
            continue
        encoded = _block(block, len(content) + 1, response.id)
        if block.index != len(content):  # keep the hub index when renumbering
            encoded.setdefault(EXTENSION_KEY, {})["index"] = block.index
        content.append(encoded)
    usage, usage_extra = usage_to_raw(response.usage)
    body: dict[str, Any] = {
        "id": response.id or "msg_llmbridge",
        "type": "message",
        "role": "assistant",
        "model": response.model or "",
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    ours: dict[str, Any] = {}
    finish = response.finish
    if finish is not None:
        stop, exact = stop_from_finish(finish)
        body["stop_reason"] = stop
        body["stop_sequence"] = finish.stop_sequence
        if not exact:
            ours["finish"] = event_to_json(finish)
    for choice, other in response.finishes.items():
        if choice != 0:
            others.append(event_to_json(other))
    ext = response.extensions or {}
    for key, value in (ext.get(NAME) or {}).items():
        body.setdefault(key, value)
    for key in MESSAGE_NULLABLE:
        body.setdefault(key, None)
    if type(body["container"]) is dict and "skills" not in body["container"]:
        body["container"] = {**body["container"], "skills": None}  # required, nullable
    foreign = {k: v for k, v in ext.items() if k != NAME}
    for key, value in (
        ("extensions", foreign),
        ("usage", usage_extra),
        ("events", others),
        ("request_id", response.request_id),
        ("created", response.created),
        ("no_id", response.id is None),
    ):
        if value:
            ours[key] = value
    notes = [event_to_json(a) for a in response.annotations]
    if notes:
        ours["annotations"] = notes
    if ours:
        body[EXTENSION_KEY] = ours
    return body


def _only(block: hub.Block) -> hub.Response:
    return hub.Response(blocks=[block])


def _is_block_event(event: hub.Event) -> bool:
    return type(event) in (hub.BlockStart, hub.Delta, hub.BlockStop, hub.Extension)


def _block(block: hub.Block, n: int, message_id: str | None) -> dict[str, Any]:
    """One assembled hub block as an Anthropic content block."""
    fidelity = dict(block.fidelity or {})
    extensions = dict(block.extensions or {})
    own_fid = fidelity.pop(NAME, None) or {}
    own_ext = extensions.get(NAME)
    ours: dict[str, Any] = {}
    kind = block.kind
    if kind == "text":
        out: dict[str, Any] = {"type": "text", "text": block.text}
        extensions.pop(NAME, None)
        citations = [
            a.data.get("citation")
            for a in block.annotations
            if a.namespace == NAME and type(a.data) is dict and a.data.get("type") == "citations_delta"
        ]
        notes = [
            a
            for a in block.annotations
            if not (a.namespace == NAME and type(a.data) is dict and a.data.get("type") == "citations_delta")
        ]
        if type(own_ext) is dict:
            out.update((k, v) for k, v in own_ext.items() if k not in out)
        if citations:
            out["citations"] = [*(out.get("citations") or []), *citations]
        out.setdefault("citations", None)  # required, nullable
    elif kind == "thinking":
        notes = block.annotations
        if own_fid.get("redacted_data") is not None and not block.text:
            out = {"type": "redacted_thinking", "data": own_fid["redacted_data"]}
        else:
            out = {"type": "thinking", "thinking": block.text, "signature": own_fid.get("signature") or ""}
        own_fid = {}
    elif kind == "tool_call":
        notes = block.annotations
        extensions.pop(NAME, None)
        try:
            args = json_decode(block.text) if block.text.strip() else {}
        except ValueError:
            args = {}
            ours["arguments"] = block.text  # cut off or not JSON: keep the text as it came
        out = {
            "type": "tool_use",
            "id": block.id or f"toolu_{message_id or 'llmbridge'}_{n}",
            "name": block.name or "",
            "input": args,
        }
        if type(own_ext) is dict:
            out.update((k, v) for k, v in own_ext.items() if k not in out)
    elif kind == "native" and type(own_ext) is dict and own_ext.get("type"):
        notes = block.annotations
        extensions.pop(NAME, None)
        out = dict(own_ext)
    else:
        notes = block.annotations
        data = {"kind": kind, "id": block.id, "name": block.name, "mime_type": block.mime_type, "text": block.text}
        out = {"type": EXTENSION_KEY}
        ours.update((k, v) for k, v in data.items() if v)
    if kind in ("text", "thinking") and block.id:
        ours["id"] = block.id
    if own_fid:
        fidelity[NAME] = own_fid
    for key, value in (("fidelity", fidelity), ("extensions", extensions)):
        if value:
            ours[key] = value
    if notes:
        ours["annotations"] = [event_to_json(a) for a in notes]
    if ours:
        out[EXTENSION_KEY] = ours
    return out


def model_body(name: str) -> dict[str, Any]:
    """One model in Anthropic's shape (``GET /v1/models/{id}``); the gateway knows no dates."""
    return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z",
            "lifecycle": "active"}  # fmt: skip


def models_body(names: list[str]) -> dict[str, Any]:
    """Anthropic's model list (``GET /v1/models``), one page."""
    return {
        "data": [model_body(n) for n in names],
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
