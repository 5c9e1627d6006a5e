"""Non-streaming Gemini bodies (``generateContent``) <-> hub.

A ``generateContent`` body is one chunk of the stream with every part whole, so decoding
runs it through the stream's :class:`._decoder.ChunkDecoder`, and encoding writes each
block as one part with the stream encoder's :func:`._common.block_part`.
"""

from __future__ import annotations

from typing import Any

from ... import hub
from ..base import EXTENSION_KEY
from ._common import NAME, block_part, close_candidate, format_time, usage_from_hub
from ._decoder import ChunkDecoder


def decode_response(body: Any) -> list[hub.Event]:
    """A ``generateContent`` body (or a JSON-array body of chunks) as a hub stream."""
    out: list[hub.Event] = []
    violations: list[str] = []
    chunks = ChunkDecoder(out.append, lambda rule, msg, event=None: violations.append(rule))
    for obj in body if isinstance(body, list) else [body]:
        try:
            chunks.chunk(obj)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError):
            violations.append("chunk-shape")
        if chunks.errored:
            break
    if not chunks.started:
        chunks.start({})
    if not chunks.errored:
        chunks.end()
        if not chunks.complete:
            out.append(hub.Error("response has no finishReason", "incomplete_stream"))
    out.append(hub.ResponseEnd())
    return out


def encode_response(response: hub.Response) -> dict:
    """An assembled hub response as a ``generateContent`` body."""
    by_choice: dict[int, list[dict]] = {}
    blocks = sorted(response.blocks, key=lambda b: b.choice)  # the order the decoder will meet them
    ordinals = {b.index: n for n, b in enumerate(blocks)}
    annotations = []
    last_kind: dict[int, str] = {}
    for b in blocks:
        parts = by_choice.setdefault(b.choice, [])
        # A boundary Gemini parts would not show: a text block after a text block, an empty one.
        marker = b.kind in ("text", "thinking") and (last_kind.get(b.choice) == b.kind or not (b.text or b.fidelity))
        last_kind[b.choice] = b.kind
        parts.append(
            block_part(
                b.kind,
                b.text,
                id=b.id,
                name=b.name,
                mime_type=b.mime_type,
                fidelity=b.fidelity,
                extensions=b.extensions,
            )
        )
        if marker:
            parts[-1].setdefault(EXTENSION_KEY, {}).setdefault("start", {})
        for ann in b.annotations:
            annotations.append({"namespace": ann.namespace, "data": ann.data, "block": ordinals[b.index]})
    candidate_ext: dict[int, dict] = {}
    top: dict[str, Any] = {}
    for ann in response.annotations:
        if ann.namespace == NAME and isinstance(ann.data, dict):
            data = dict(ann.data)
            if "promptFeedback" in data:
                top["promptFeedback"] = data.pop("promptFeedback")
            choice = data.pop("candidate", 0)
            candidate_ext.setdefault(choice, {}).update(data)
        else:
            annotations.append({"namespace": ann.namespace, "data": ann.data})
    candidates = []
    for choice in sorted(set(by_choice) | set(response.finishes) | set(candidate_ext)):
        content = {"parts": by_choice.get(choice, []), "role": "model"}
        candidates.append(
            close_candidate({"content": content}, choice, response.finishes.get(choice), candidate_ext.get(choice))
        )
    body: dict[str, Any] = {"candidates": candidates, **top}
    if response.usage is not None:
        body["usageMetadata"] = usage_from_hub(response.usage)
    if response.model is not None:
        body["modelVersion"] = response.model
    if response.id is not None:
        body["responseId"] = response.id
    exts = dict(response.extensions or {})
    ours = exts.pop(NAME, None)
    if isinstance(ours, dict):
        for k, v in ours.items():
            body.setdefault(k, v)
    if response.created is not None and "createTime" not in body:
        body["createTime"] = format_time(response.created)
    mine: dict[str, Any] = {}
    if exts:
        mine["extensions"] = exts
    if annotations:
        mine["annotations"] = annotations
    if response.request_id is not None:
        mine["request_id"] = response.request_id
    if mine:
        body[EXTENSION_KEY] = mine
    return body


def model_body(name: str) -> dict[str, Any]:
    """One model in Google's shape (``GET /v1beta/models/{name}``)."""
    return {
        "name": f"models/{name}",
        "version": "1",
        "displayName": name,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    }


def models_body(names: list[str]) -> dict[str, Any]:
    """Google's model list (``GET /v1beta/models``)."""
    return {"models": [model_body(n) for n in names]}
