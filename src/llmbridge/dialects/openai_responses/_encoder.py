"""Hub events -> a Responses stream the ``openai`` SDK accepts, and the final response object.

Text blocks become ``message`` items (blocks with the same item id share one message),
thinking becomes ``reasoning`` items with the thinking text as summary, tool calls become
``function_call`` (or ``custom_tool_call``) items, and our own native blocks come back as
the vendor items they were.  Hub data Responses cannot express rides in ``"llmbridge"``
keys: on items and content parts (foreign fidelity, extensions, annotations), on the
response object (foreign stream extensions, finish reasons with no Responses word) and,
for whole blocks with no Responses item (other vendors' native blocks, inline data, choices
other than 0), as carried hub events on the next event written.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ... import hub
from ..base import EXTENSION_KEY, EncoderDispatch, EncoderState, json_decode, json_encode
from ._common import ERROR_WORD, FINISH_INCOMPLETE, NAME, carry, usage_to

_REQUIRED_RESPONSE: dict[str, Any] = {
    "object": "response",
    "status": "in_progress",
    "error": None,
    "incomplete_details": None,
    "output": [],
    "usage": None,
}
# The response object's fields that OpenAI's and the Open Responses schemas require: when the
# source did not say them, the documented default of the request field each one echoes (1 for
# temperature and top_p, 0 for the penalties and top_logprobs, "auto" for service_tier,
# "disabled" for truncation), what is true of the gateway (nothing stored, nothing run in the
# background), or null where the schemas allow it. Never a value the source did not imply.
_BASE_RESPONSE: dict[str, Any] = {
    **_REQUIRED_RESPONSE,
    "completed_at": None,
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "output": [],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": None,
    "store": False,
    "background": False,
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "truncation": "disabled",
    "service_tier": "auto",
    "user": None,
    "safety_identifier": None,
    "prompt_cache_key": None,
    "usage": None,
    "metadata": {},
}
# Response.error.code is one of OpenAI's ResponseErrorCode words; the error event before it
# carries the exact code.
_FAILED_CODES = frozenset(
    (
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "vector_store_timeout",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    )
)


def _failed_code(error: hub.Error, code: str) -> str:
    """The ``response.failed`` response's ``error.code`` for ``error`` (sent with ``code``)."""
    if code in _FAILED_CODES:
        return code
    return "rate_limit_exceeded" if error.type == "rate_limit" else "server_error"


def _split(mapping: dict | None) -> tuple[Any, dict]:
    """Our namespace's value and every other namespace of a fidelity/extensions dict."""
    if not mapping:
        return None, {}
    return mapping.get(NAME), {k: v for k, v in mapping.items() if k != NAME}


class _Block:
    __slots__ = (
        "annotations",
        "chunks",
        "content_index",
        "content_mode",
        "custom",
        "extensions",
        "fidelity",
        "foreign",
        "item",
        "kind",
        "logprobs",
        "marks",
        "output_index",
        "part_open",
        "pending_logprobs",
        "prefix",
        "progress",
        "refusal",
        "stopped",
    )

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.item: dict = {}
        self.output_index = 0
        self.content_index = 0
        self.chunks: list[str] = []
        self.prefix = b""  # pre-encoded '"item_id":...,"output_index":...' for the delta fast path
        self.part_open = False
        self.annotations: list = []
        self.logprobs: list = []
        self.pending_logprobs: list = []
        self.foreign: list = []  # other vendors' block-level Extension events
        self.fidelity: dict | None = None
        self.extensions: dict | None = None
        self.custom = False
        self.refusal = False
        self.content_mode = False
        self.stopped = False
        self.marks: dict = {}  # ids we made up, so the decoder leaves them out of the hub
        self.progress = False  # an image item's own progress events were written (from its source)


class StreamEncoder(EncoderDispatch):
    """Hub events to openai-responses typed SSE events, numbered by ``sequence_number``.

    Terminal rule: ``ResponseEnd`` closes the open items and writes ``response.completed``
    (``response.incomplete`` for a length or filter finish); an ``Error`` closes the message
    and writes the ``error`` event that the SDK raises on, and that is the end.  Choices
    other than 0 and what the wire has no field for ride under ``llmbridge``.  Refuses what
    is not a hub event (``TypeError``); after the end it writes nothing.
    """

    def __init__(self, model: str | None = None) -> None:
        self._model = model  # the response's model when the stream ends before it started
        self._seq = 0
        self._response: dict = {}
        self._tag = "0"
        self._blocks: dict[int, _Block] = {}
        self._items: dict[int, dict] = {}  # output_index -> the item as last written
        self._next_output = 0
        self._message: dict | None = None  # the message item still taking content parts
        self._message_index = -1
        self._waiting: dict[int, dict] = {}  # earlier messages whose parts are still streaming
        self._carry: list[dict] = []
        self._finish: hub.Finish | None = None
        self._usage: hub.Usage | None = None
        self._state = EncoderState.IDLE  # OPEN once response.created is out
        self.final_response: dict | None = None  # the response object of the terminal event

    # ------------------------------------------------------------------ writing

    def _write(self, obj: dict) -> bytes:
        obj["sequence_number"] = self._seq
        self._seq += 1
        if self._carry:
            obj[EXTENSION_KEY] = {**obj.get(EXTENSION_KEY, {}), "events": self._carry}
            self._carry = []
        return b"event: " + obj["type"].encode() + b"\ndata: " + json_encode(obj) + b"\n\n"

    def _item_event(self, kind: str, block: _Block, **fields: Any) -> bytes:
        return self._write(
            {
                "type": kind,
                "item_id": block.item["id"],
                "output_index": block.output_index,
                **fields,
            }
        )

    def _part_event(self, kind: str, block: _Block, **fields: Any) -> bytes:
        return self._write(
            {
                "type": kind,
                "item_id": block.item["id"],
                "output_index": block.output_index,
                "content_index": block.content_index,
                **fields,
            }
        )

    def _new_item(self, block: _Block, item: dict) -> bytes:
        block.item = item
        block.output_index = self._next_output
        self._next_output += 1
        self._items[block.output_index] = item
        return self._write({"type": "response.output_item.added", "output_index": block.output_index, "item": item})

    def _done_item(self, output_index: int, item: dict) -> bytes:
        self._items[output_index] = item
        return self._write({"type": "response.output_item.done", "output_index": output_index, "item": item})

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{self._tag}{self._next_output}"

    # ------------------------------------------------------------------ events

    # EncoderDispatch.encode calls these, one per hub event type.

    def on_usage(self, event: hub.Usage) -> bytes:
        self._usage = hub.merge_usage(self._usage, event)
        return b""

    def on_finish(self, event: hub.Finish) -> bytes:
        if event.choice == 0:
            self._finish = event
        else:
            self._carry.append(carry(event))
        return b""

    def on_response_start(self, event: hub.ResponseStart) -> bytes:
        own, foreign = _split(event.extensions)
        filled: list[str] = []
        if isinstance(own, dict):  # the source's own response fields stand in for our defaults
            filled = [k for k in _BASE_RESPONSE if k not in own and k not in _REQUIRED_RESPONSE]
            response = {**_BASE_RESPONSE, **_REQUIRED_RESPONSE, **own}
        else:
            response = dict(_BASE_RESPONSE)
        response_id = event.id or "resp_llmbridge"
        self._tag = hashlib.sha1(response_id.encode()).hexdigest()[:10] + "_"
        response.update(id=response_id, created_at=event.created or 0, model=event.model or "", output=[])
        extra: dict[str, Any] = {}
        if foreign:
            extra["extensions"] = foreign
        if event.request_id:
            extra["request_id"] = event.request_id
        if event.id is None:
            extra["id"] = None  # the id above is made up
        if event.created is None:
            extra["created_at"] = None  # so is the time
        if not isinstance(own, dict):
            extra["defaults"] = True  # the response fields above are ours, not the source's
        elif filled:
            extra["filled"] = filled  # these ones are
        if extra:
            response[EXTENSION_KEY] = extra
        self._response = response
        self._state = EncoderState.OPEN
        return self._write({"type": "response.created", "response": response}) + self._write(
            {"type": "response.in_progress", "response": response}
        )

    def on_block_start(self, event: hub.BlockStart) -> bytes:
        kind = event.kind
        own_ext = (event.extensions or {}).get(NAME)
        if kind == "data" and event.choice == 0 and (event.mime_type or "").startswith("image/"):
            return self._image_start(event)
        if (
            event.choice != 0
            or kind not in ("text", "thinking", "tool_call", "native")
            or (kind == "native" and not (isinstance(own_ext, dict) and isinstance(own_ext.get("type"), str)))
        ):
            self._blocks[event.index] = _Block("carried")
            self._carry.append(carry(event))
            return b""
        block = _Block(kind)
        self._blocks[event.index] = block
        block.fidelity, block.extensions = event.fidelity, event.extensions
        own_fid, foreign_fid = _split(event.fidelity)
        own_fid = own_fid if isinstance(own_fid, dict) else {}
        _, foreign_ext = _split(event.extensions)
        extra = {k: v for k, v in (("fidelity", foreign_fid), ("extensions", foreign_ext)) if v}
        out = b""
        if kind == "text":
            own = own_ext if isinstance(own_ext, dict) else {}
            block.refusal = own.get("part_type") == "refusal"
            if self._message is None or not event.id or self._message["id"] != event.id:
                out += self._release_message()
                item = {
                    "id": event.id or self._id("msg"),
                    "type": "message",
                    "status": "in_progress",
                    "content": [],
                    "role": "assistant",
                    **(own.get("item") or {}),
                }
                if not event.id:
                    item[EXTENSION_KEY] = {"id": None}  # made up: the decoder gives the hub no id
                out += self._new_item(block, item)
                self._message, self._message_index = item, block.output_index
            block.item, block.output_index = self._message, self._message_index
            block.content_index = len(self._message["content"])
            self._message["content"].append(None)  # its slot; filled at BlockStop
            part = (
                {"type": "refusal", "refusal": ""}
                if block.refusal
                else {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            )
            if extra:
                part[EXTENSION_KEY] = extra
            out += self._part_event("response.content_part.added", block, part=part)
            block.prefix = (
                b'"item_id":'
                + json_encode(block.item["id"])
                + b',"output_index":'
                + str(block.output_index).encode()
                + b',"content_index":'
                + str(block.content_index).encode()
            )
            return out
        out += self._release_message()
        if kind == "thinking":
            block.content_mode = own_fid.get("text_kind") == "reasoning_text"
            item = {"id": own_fid.get("id") or event.id or self._id("rs"), "type": "reasoning", "summary": []}
            if not own_fid.get("id"):
                block.marks["own_id"] = False
                if not event.id:
                    block.marks["id"] = None
            if block.content_mode:
                item["content"] = []
            if own_fid.get("encrypted_content"):
                item["encrypted_content"] = own_fid["encrypted_content"]
        elif kind == "tool_call":
            block.custom = bool(own_fid.get("custom"))
            call_id = event.id or self._id("call")
            if not event.id:
                block.marks["call_id"] = None
            if not own_fid.get("id"):
                block.marks["id"] = None
            if block.custom:
                item = {
                    "id": own_fid.get("id") or self._id("ctc"),
                    "type": "custom_tool_call",
                    "status": "in_progress",
                    "call_id": call_id,
                    "name": event.name or "",
                    "input": "",
                }
            else:
                item = {
                    "id": own_fid.get("id") or self._id("fc"),
                    "type": "function_call",
                    "status": "in_progress",
                    "arguments": "",
                    "call_id": call_id,
                    "name": event.name or "",
                }
        else:  # one of our own native items, as it was added
            item = dict(own_ext)
            item.setdefault("id", event.id or self._id("item"))
        extra.update(block.marks)
        if extra:
            item[EXTENSION_KEY] = extra
        out += self._new_item(block, item)
        block.prefix = b'"item_id":' + json_encode(item["id"]) + b',"output_index":' + str(block.output_index).encode()
        return out

    def _image_start(self, event: hub.BlockStart) -> bytes:
        """An image (inline data) is the image_generation tool's item: added now, its base64 in
        ``result`` when the block stops."""
        block = _Block("image")
        self._blocks[event.index] = block
        block.fidelity, block.extensions = event.fidelity, event.extensions
        own = (event.extensions or {}).get(NAME)
        item_id = event.id if event.id and event.id.startswith("ig_") else self._id("ig")
        # result: required, null until the image is whole
        item: dict[str, Any] = {"id": item_id, "type": "image_generation_call", "status": "in_progress", "result": None}
        if not isinstance(own, dict):  # another dialect's image: mark what we made up, for our decoder
            item[EXTENSION_KEY] = {"image": "foreign", **({} if item_id == event.id else {"id": None})}
        out = self._new_item(block, item)
        block.prefix = b'"item_id":' + json_encode(item_id) + b',"output_index":' + str(block.output_index).encode()
        meta = {k: v for k, v in own.items() if k not in ("id", "type", "status", "result")} if own else {}
        meta.setdefault("output_format", (event.mime_type or "image/png").split("/", 1)[1])
        block.item = {**item, **meta}
        return out

    def _image_stop(self, block: _Block, event: hub.BlockStop) -> bytes:
        item = {**block.item, "status": "completed", "result": "".join(block.chunks)}
        _, foreign = _split(hub.merge_dicts(block.fidelity, event.fidelity))
        _, foreign_ext = _split(block.extensions)
        extra = {
            k: v for k, v in (("fidelity", foreign), ("extensions", foreign_ext), ("annotations", block.foreign)) if v
        }
        if extra or EXTENSION_KEY in item:
            item[EXTENSION_KEY] = {**item.get(EXTENSION_KEY, {}), **extra}
        out = b""
        if not block.progress:  # an image from another dialect: the tool's own events
            out = self._item_event("response.image_generation_call.in_progress", block)
            out += self._item_event("response.image_generation_call.completed", block)
        block.item = item
        return out + self._done_item(block.output_index, item)

    def on_delta(self, event: hub.Delta) -> bytes:
        block = self._blocks.get(event.index)
        if block is None:
            return b""
        kind = block.kind
        block.chunks.append(event.text)
        if kind == "text" and not block.refusal:
            if self._carry or block.pending_logprobs:
                logprobs, block.pending_logprobs = block.pending_logprobs, []
                return self._part_event("response.output_text.delta", block, delta=event.text, logprobs=logprobs)
            seq = self._seq
            self._seq += 1
            return (
                b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                + block.prefix
                + b',"delta":'
                + json_encode(event.text)
                + b',"logprobs":[],"sequence_number":'
                + str(seq).encode()
                + b"}\n\n"
            )
        if kind == "tool_call":
            if block.custom:
                return b""  # the input is unwrapped from {"input": ...} at the end
            return self._item_event("response.function_call_arguments.delta", block, delta=event.text)
        if kind == "thinking":
            if not event.text:
                return b""
            out = b""
            if not block.part_open:
                block.part_open = True
                if block.content_mode:
                    out = self._part_event(
                        "response.content_part.added", block, part={"type": "reasoning_text", "text": ""}
                    )
                else:
                    out = self._item_event(
                        "response.reasoning_summary_part.added",
                        block,
                        summary_index=0,
                        part={"type": "summary_text", "text": ""},
                    )
            if block.content_mode:
                return out + self._part_event("response.reasoning_text.delta", block, delta=event.text)
            return out + self._item_event(
                "response.reasoning_summary_text.delta", block, summary_index=0, delta=event.text
            )
        if kind == "text":  # a refusal
            return self._part_event("response.refusal.delta", block, delta=event.text)
        if kind == "carried":
            self._carry.append(carry(event))
        return b""

    def on_extension(self, event: hub.Extension) -> bytes:
        block = self._blocks.get(event.index) if event.index is not None else None
        data = event.data
        if block is None or block.kind == "carried" or block.stopped:
            if (
                event.namespace == NAME
                and isinstance(data, dict)
                and isinstance(data.get("type"), str)
                and event.index is None
            ):
                return self._write(dict(data))  # an event type we do not model, as it came
            carried = block is not None and block.kind == "carried"
            self._carry.append(carry(hub.Extension(event.namespace, data, event.index if carried else None)))
            return b""
        if event.namespace == NAME and isinstance(data, dict):
            kind = data.get("type")
            if isinstance(kind, str):
                if kind == "response.output_text.annotation.added":
                    block.annotations.append(data.get("annotation"))
                    return self._part_event(kind, block, **{k: v for k, v in data.items() if k != "type"})
                if block.kind == "native" or block.kind == "image":  # the item's own progress events
                    block.progress = True
                    return self._item_event(kind, block, **{k: v for k, v in data.items() if k != "type"})
            elif block.kind == "text" and isinstance(data.get("logprobs"), list):
                block.pending_logprobs.extend(data["logprobs"])
                block.logprobs.extend(data["logprobs"])
                return b""
        block.foreign.append({"namespace": event.namespace, "data": data})
        return b""

    def on_block_stop(self, event: hub.BlockStop) -> bytes:
        block = self._blocks.get(event.index)
        if block is None:
            return b""
        if block.kind == "carried":
            self._carry.append(carry(event))
            return b""
        if block.stopped:
            return b""
        block.stopped = True
        if block.kind == "image":
            return self._image_stop(block, event)
        fidelity = hub.merge_dicts(block.fidelity, event.fidelity)
        own_fid, foreign_fid = _split(fidelity)
        own_fid = own_fid if isinstance(own_fid, dict) else {}
        _, foreign_ext = _split(event.extensions)
        extra = {
            k: v
            for k, v in (
                ("fidelity", _split(event.fidelity)[1]),
                ("extensions", foreign_ext),
                ("annotations", block.foreign),
            )
            if v
        }
        text = "".join(block.chunks)
        kind = block.kind
        if kind == "text":
            return self._stop_text(block, text, extra)
        out = b""
        item = dict(block.item)
        item.pop(EXTENSION_KEY, None)
        if kind == "thinking":
            if text and block.content_mode:
                out += self._part_event("response.reasoning_text.done", block, text=text)
                out += self._part_event(
                    "response.content_part.done", block, part={"type": "reasoning_text", "text": text}
                )
                item["content"] = [{"type": "reasoning_text", "text": text}]
            elif text:
                out += self._item_event("response.reasoning_summary_text.done", block, summary_index=0, text=text)
                out += self._item_event(
                    "response.reasoning_summary_part.done",
                    block,
                    summary_index=0,
                    part={"type": "summary_text", "text": text},
                )
                summary = own_fid.get("summary")
                if not (
                    isinstance(summary, list)
                    and "\n\n".join(p.get("text", "") for p in summary if isinstance(p, dict)) == text
                ):
                    summary = [{"type": "summary_text", "text": text}]
                item["summary"] = summary
            if own_fid.get("encrypted_content"):
                item["encrypted_content"] = own_fid["encrypted_content"]
            if foreign_fid:  # merged: fidelity from BlockStart may not have reached the added item
                extra["fidelity"] = foreign_fid
        elif kind == "tool_call":
            item["status"] = "completed"
            if block.custom:
                value = text
                try:
                    parsed = json_decode(text) if text else {}
                    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
                        value = parsed["input"]
                except ValueError:
                    pass
                if value:
                    out += self._item_event("response.custom_tool_call_input.delta", block, delta=value)
                out += self._item_event("response.custom_tool_call_input.done", block, input=value)
                item["input"] = value
            else:
                if not text:  # hub "" means {}: clients get "{}", our decoder gets "" back
                    text = "{}"
                    block.marks["arguments"] = ""
                    done = {
                        "type": "response.function_call_arguments.done",
                        "item_id": item["id"],
                        "output_index": block.output_index,
                        "name": item["name"],
                        "arguments": text,
                        EXTENSION_KEY: {"arguments": ""},
                    }
                    out += self._write(done)
                else:
                    out += self._item_event(
                        "response.function_call_arguments.done", block, name=item["name"], arguments=text
                    )
                item["arguments"] = text
            if foreign_fid:
                extra["fidelity"] = foreign_fid
        else:  # native
            own_ext = (event.extensions or {}).get(NAME)
            if isinstance(own_ext, dict) and isinstance(own_ext.get("type"), str):
                item = dict(own_ext)
        if kind != "native":  # our fidelity that arrived too late for the item as added
            late = {k: v for k, v in own_fid.items() if k in ("id", "text_kind") and v != block.item.get(k)}
            if late.get("text_kind") == "reasoning_text" and block.content_mode:
                del late["text_kind"]
            if late:
                extra["fidelity"] = {**extra.get("fidelity", {}), NAME: late}
        extra.update(block.marks)
        if extra:
            item[EXTENSION_KEY] = extra
        block.item = item
        return out + self._done_item(block.output_index, item)

    def _stop_text(self, block: _Block, text: str, extra: dict) -> bytes:
        if block.refusal:
            part: dict[str, Any] = {"type": "refusal", "refusal": text}
            out = self._part_event("response.refusal.done", block, refusal=text)
        else:
            part = {"type": "output_text", "text": text, "annotations": block.annotations, "logprobs": block.logprobs}
            out = self._part_event("response.output_text.done", block, text=text, logprobs=block.logprobs)
        if extra:
            part[EXTENSION_KEY] = extra
        block.item["content"][block.content_index] = part
        waiting = self._waiting.get(block.output_index)
        if waiting is not None and None not in waiting["content"]:
            del self._waiting[block.output_index]
            return (
                out
                + self._part_event("response.content_part.done", block, part=part)
                + self._message_done(block.output_index, waiting)
            )
        return out + self._part_event("response.content_part.done", block, part=part)

    def _release_message(self) -> bytes:
        """No more parts join the current message: done now, or when its open parts end."""
        message = self._message
        if message is None:
            return b""
        self._message = None
        if None in message["content"]:
            self._waiting[self._message_index] = message
            return b""
        return self._message_done(self._message_index, message)

    def _message_done(self, output_index: int, message: dict) -> bytes:
        message["status"] = "completed"
        return self._done_item(output_index, dict(message))

    def _close_message(self) -> bytes:
        """Finish every message item (closing parts a malformed hub stream left open)."""
        out = self._release_message()
        for index, block in list(self._blocks.items()):
            if block.kind == "text" and not block.stopped:
                out += self.on_block_stop(hub.BlockStop(index))
        return out

    # ------------------------------------------------------------------ the end

    def _output(self) -> list[dict]:
        return [self._items[n] for n in sorted(self._items)]

    def _opened(self) -> bytes:
        """``response.created`` and ``response.in_progress``, if the stream has not started.

        Every Responses stream opens with them, and the terminal event names the response they
        announced. A stream can end before its start when a slow upstream's keep-alives committed
        the answer and it then failed (a deadline, a refusal, an empty body): the client still
        gets a whole stream, of a response whose id and time are made up (and marked so)."""
        if self._state is not EncoderState.IDLE:
            return b""
        return self.on_response_start(hub.ResponseStart(model=self._model))

    def on_response_end(self, event: hub.ResponseEnd) -> bytes:
        out = self._opened() + self._close_open()
        finish = self._finish
        reason = finish.reason if finish else "end_turn"
        response = dict(self._response)
        if reason in FINISH_INCOMPLETE:
            status, kind = "incomplete", "response.incomplete"
            response["incomplete_details"] = {"reason": FINISH_INCOMPLETE[reason]}
            derived = reason
        elif reason == "error":
            status, kind = "failed", "response.failed"
            response["error"] = {"code": "server_error", "message": (finish and finish.raw) or "the turn failed"}
            derived = None
        else:
            status, kind = "completed", "response.completed"
            calls = any(item.get("type") in ("function_call", "custom_tool_call") for item in self._items.values())
            derived = "tool_use" if calls else "end_turn"
        if finish is None or finish.reason != derived or finish.stop_sequence:
            response[EXTENSION_KEY] = {**response.get(EXTENSION_KEY, {}), "finish": _finish_record(finish)}
        if event.request_id:
            response[EXTENSION_KEY] = {**response.get(EXTENSION_KEY, {}), "request_id": event.request_id}
        response.update(status=status, output=self._output(), usage=usage_to(self._usage))
        self.final_response = response
        self._state = EncoderState.CLOSED
        return out + self._write({"type": kind, "response": response})

    def _close_open(self) -> bytes:
        """Close what a malformed hub stream left open, so the SDK sees whole items."""
        out = b""
        for index, block in list(self._blocks.items()):
            if not block.stopped and block.kind != "carried":
                out += self.on_block_stop(hub.BlockStop(index))
        return out + self._close_message()

    def on_error(self, error: hub.Error) -> bytes:
        out = self._opened() + self._close_message()
        word = ERROR_WORD.get(error.type, "server_error")
        code = error.code or word
        body: dict[str, Any] = {"type": word, "code": code, "message": error.message, "param": None}
        # The SDK raises on this event with `body` as the exception's body: what streamed before the
        # error (finish, usage) rides along, as the failed response that follows is never read.
        extra: dict[str, Any] = {"type": error.type}
        if error.status is not None:
            extra["status"] = error.status
        if error.code is None:
            extra["code"] = None  # the "code" above is made up
        if self._finish is not None:
            extra["finish"] = _finish_record(self._finish)
        if self._usage is not None:
            extra["usage"] = usage_to(self._usage)
        body[EXTENSION_KEY] = extra
        out += self._write({"type": "error", "code": code, "message": error.message, "param": None, "error": body})
        response = dict(self._response)
        if self._finish is not None:
            response[EXTENSION_KEY] = {**response.get(EXTENSION_KEY, {}), "finish": _finish_record(self._finish)}
        response.update(
            status="failed",
            error={"code": _failed_code(error, code), "message": error.message},
            output=self._output(),
            usage=usage_to(self._usage),
        )
        self.final_response = response
        self._state = EncoderState.CLOSED
        return out + self._write({"type": "response.failed", "response": response})


def _finish_record(finish: hub.Finish | None) -> dict | None:
    """A finish reason Responses has no status for (``None``: the source gave none)."""
    if finish is None:
        return None
    fields = (("reason", finish.reason), ("raw", finish.raw), ("stop_sequence", finish.stop_sequence))
    return {k: v for k, v in fields if v is not None}
