"""Non-streaming ``chat.completion`` bodies <-> hub events / hub.Response.

The decoder replays the body through the stream decoder's block logic (one message per
choice becomes one chunk), so streaming and non-streaming bodies decode alike.  The
encoder concatenates a choice's blocks into ``content`` / ``reasoning_content`` /
``tool_calls``; when that loses block boundaries or fidelity, ``message.llmbridge.blocks``
lists the blocks (kind, metadata and the length of their text) so the decoder can cut
them apart again.
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY
from ._common import FINISH_TO_WIRE, NAME, error_from_object, usage_to_wire
from ._decoder import StreamDecoder


def decode_response(body: Any) -> list[hub.Event]:
    if not isinstance(body, dict):
        return [
            hub.ResponseStart(),
            hub.Error("response body is not a JSON object", "protocol_error"),
            hub.ResponseEnd(),
        ]
    decoder = StreamDecoder()
    if body.get("error"):
        decoder._start(body)
        decoder.fail(error_from_object(body["error"]))
        return decoder._out
    decoder._start(body)
    decoder._seen = {}
    for choice in body.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message") or {}
        bridge = message.get(EXTENSION_KEY) if isinstance(message, dict) else None
        if isinstance(bridge, dict) and isinstance(bridge.get("blocks"), list):
            _replay_blocks(decoder, choice, message, bridge["blocks"])
            continue
        if not isinstance(message, dict):
            continue
        chunk_choice = {k: v for k, v in choice.items() if k != "message"}
        chunk_choice["delta"] = {k: v for k, v in message.items() if k not in ("annotations", EXTENSION_KEY)}
        if isinstance(bridge, dict) and "finish" in bridge:
            if bridge["finish"] is None:  # our encoder's stand-in "stop": no finish was said
                chunk_choice["finish_reason"] = None
            else:
                chunk_choice[EXTENSION_KEY] = {"finish": bridge["finish"], "raw": bridge.get("raw")}
        decoder._choice(chunk_choice)
        ch = decoder._choices.get(choice.get("index", 0))
        if message.get("annotations") and ch is not None:
            target = next((b for b in reversed(_text_blocks(decoder._out, ch.n))), None)
            decoder.emit(hub.Extension(NAME, {"annotations": message["annotations"]}, target))
        if not chunk_choice.get("finish_reason") and ch is not None:
            decoder._close_choice(ch)
    if isinstance(body.get("usage"), dict):
        decoder._usage(body["usage"])
    bridge = body.get(EXTENSION_KEY) if isinstance(body.get(EXTENSION_KEY), dict) else {}
    for ann in bridge.get("annotations") or []:
        decoder.emit(hub.Extension(ann.get("namespace") or NAME, ann.get("data")))
    if isinstance(bridge.get("error"), dict):
        err = bridge["error"]
        decoder.fail(hub.Error(err.get("message") or "error", err.get("type") or "api_error", err.get("code")))
        return decoder._out
    decoder._end()  # closes what is still open
    return decoder._out


def _text_blocks(events: list[hub.Event], choice: int) -> list[int]:
    return [e.index for e in events if type(e) is hub.BlockStart and e.kind == "text" and e.choice == choice]


def _replay_blocks(decoder: StreamDecoder, choice: dict, message: dict, blocks: list) -> None:
    n = choice.get("index", 0)
    text = message.get("content") or ""
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    sources = {
        "text": text,
        "thinking": message.get("reasoning_content") or "",
        "refusal": message.get("refusal") or "",
    }
    offsets = dict.fromkeys(sources, 0)
    calls = message.get("tool_calls") or []
    for spec in blocks:
        kind = spec.get("kind", "text")
        index = decoder._next_block
        decoder._next_block += 1
        body_text = ""
        block_id = spec.get("id")
        name = spec.get("name")
        if kind == "tool_call":
            call = calls[spec["tool"]] if isinstance(spec.get("tool"), int) and spec["tool"] < len(calls) else {}
            fn = call.get("function") or {}
            block_id, name, body_text = call.get("id", block_id), fn.get("name", name), fn.get("arguments") or ""
        elif kind in ("text", "thinking"):
            source = "refusal" if spec.get("refusal") else kind
            start = offsets[source]
            offsets[source] = start + int(spec.get("length") or 0)
            body_text = sources[source][start : offsets[source]]
        else:
            body_text = spec.get("text") or ""
        decoder.emit(
            hub.BlockStart(index, kind, block_id, name, n, spec.get("mime_type"), None, spec.get("extensions"))
        )
        if body_text:
            decoder.emit(hub.Delta(index, body_text))
        for ext in spec.get("annotations") or []:
            decoder.emit(hub.Extension(ext.get("namespace") or NAME, ext.get("data"), index))
        decoder.emit(hub.BlockStop(index, spec.get("fidelity")))
    reason = choice.get("finish_reason")
    unsaid = (message.get(EXTENSION_KEY) or {}).get("finish", "") is None  # our encoder's stand-in "stop"
    if reason and not unsaid:
        ch = decoder._choices.setdefault(n, _new_choice(n))
        ch.refused = any(spec.get("refusal") for spec in blocks)
        ch.had_tools = any(spec.get("kind") == "tool_call" for spec in blocks)
        decoder._finish(ch, reason, choice, message.get(EXTENSION_KEY) or {})


def _new_choice(n: int) -> Any:
    from ._decoder import _Choice

    return _Choice(n)


def encode_response(response: hub.Response) -> dict[str, Any]:
    ext = dict(response.extensions or {})
    own = ext.pop(NAME, None) or {}
    body: dict[str, Any] = {
        "id": response.id or "",
        "object": "chat.completion",
        "created": response.created or 0,
        "model": response.model or "",
    }
    if isinstance(own, dict):
        body.update({k: v for k, v in own.items() if k not in body and k not in ("choices", "usage", "error")})
    choices = sorted({b.choice for b in response.blocks} | set(response.finishes))
    body["choices"] = [_encode_choice(response, n) for n in (choices or [0])]
    if response.usage is not None:
        body["usage"] = usage_to_wire(response.usage)
    bridge: dict[str, Any] = {}
    if ext:
        bridge["extensions"] = ext
    if response.request_id:
        bridge["request_id"] = response.request_id
    if response.annotations:
        bridge["annotations"] = [{"namespace": a.namespace, "data": a.data} for a in response.annotations]
    if response.error is not None:
        bridge["error"] = {"message": response.error.message, "type": response.error.type, "code": response.error.code}
    if bridge:
        body[EXTENSION_KEY] = bridge
    return body


def _encode_choice(response: hub.Response, n: int) -> dict[str, Any]:
    blocks = response.choice_blocks(n)
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    text = "".join(b.text for b in blocks if b.kind == "text" and not _refusal(b))
    refusal = "".join(b.text for b in blocks if b.kind == "text" and _refusal(b))
    thinking = "".join(b.text for b in blocks if b.kind == "thinking")
    if text or any(b.kind == "text" and not _refusal(b) for b in blocks):
        message["content"] = text
    if refusal:
        message["refusal"] = refusal
    if thinking:
        message["reasoning_content"] = thinking
    calls = [b for b in blocks if b.kind == "tool_call"]
    if calls:
        message["tool_calls"] = [
            {
                "id": b.id or f"call_{b.index}",
                "type": "function",
                "function": {"name": b.name or "", "arguments": b.text or "{}"},
            }
            for b in calls
        ]
    annotations = [a for b in blocks for a in b.annotations]
    own_annotations = [
        a.data["annotations"]
        for a in annotations
        if a.namespace == NAME and isinstance(a.data, dict) and list(a.data) == ["annotations"]
    ]
    if own_annotations and len(own_annotations) == len(annotations):
        message["annotations"] = [x for group in own_annotations for x in group]
    canonical = _canonical(blocks) and (not annotations or "annotations" in message)
    if not canonical:
        specs = []
        tool = 0
        for b in blocks:
            spec: dict[str, Any] = {"kind": b.kind}
            for key in ("id", "name", "mime_type", "fidelity", "extensions"):
                if getattr(b, key) is not None:
                    spec[key] = getattr(b, key)
            if b.kind == "tool_call":
                spec["tool"] = tool
                tool += 1
            elif b.kind in ("text", "thinking"):
                spec["length"] = len(b.text)
                if _refusal(b):
                    spec["refusal"] = True
            else:
                spec["text"] = b.text
            if b.annotations:
                spec["annotations"] = [{"namespace": a.namespace, "data": a.data} for a in b.annotations]
            specs.append(spec)
        message[EXTENSION_KEY] = {"blocks": specs}
    choice: dict[str, Any] = {"index": n, "message": message, "logprobs": None, "finish_reason": None}
    finish = response.finishes.get(n)
    if finish is not None:
        word = FINISH_TO_WIRE.get(finish.reason)
        derived = (
            "tool_use" if calls else "refusal" if refusal else "stop_sequence" if finish.stop_sequence else "end_turn"
        )
        if finish.reason == "refusal" and refusal and not calls:
            word = "stop"
        elif word is None or (finish.raw and finish.raw != word) or (word == "stop" and derived != finish.reason):
            message.setdefault(EXTENSION_KEY, {}).update({"finish": finish.reason, "raw": finish.raw or finish.reason})
        choice["finish_reason"] = word or ("content_filter" if finish.reason == "refusal" else "stop")
        if finish.stop_sequence:
            choice["stop_reason"] = finish.stop_sequence
    else:  # finish_reason is required: a clean end that named no reason is the natural stop
        choice["finish_reason"] = "stop"
        message.setdefault(EXTENSION_KEY, {})["finish"] = None  # (our decoder: no finish was said)
    return choice


def _canonical(blocks: list[hub.Block]) -> bool:
    """Blocks that content / reasoning_content / refusal / tool_calls alone give back exactly."""
    kinds = [b.kind for b in blocks]
    if kinds != sorted(kinds, key=_ORDER.get):
        return False
    seen: set[tuple[str, bool]] = set()
    for b in blocks:
        if b.fidelity or (b.extensions and not _refusal(b)) or b.kind not in ("text", "thinking", "tool_call"):
            return False
        if b.kind != "tool_call":
            if b.id or (b.kind, _refusal(b)) in seen:
                return False
            seen.add((b.kind, _refusal(b)))
    return True


_ORDER = {"thinking": 0, "text": 1, "tool_call": 2, "native": 3, "data": 4}


def _refusal(block: hub.Block) -> bool:
    return bool(block.kind == "text" and block.extensions and (block.extensions.get(NAME) or {}).get("refusal"))
