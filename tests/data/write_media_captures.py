"""Writes the image and embedding captures in this folder (run: python tests/data/write_media_captures.py).

No real image or embedding streams exist in tests/corpus, so these are written from the vendors'
documentation (sources in tests/data/README.md), with small real PNG/JPEG bytes so that every
image passes the gateway's checks (base64, magic number against the declared format). Deterministic:
running it again writes the same bytes.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).parent


def png(width: int, height: int, shade: int) -> bytes:
    """A real RGB PNG: a gradient whose brightness is ``shade`` (so partials differ from the final)."""
    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in ((x * 255 // width) & shade, (y * 255 // height) & shade, 128))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sse(event: str | None, obj: object) -> str:
    head = f"event: {event}\n" if event else ""
    return head + "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


def openai_images() -> None:
    """OpenAI Images API streaming (platform.openai.com/docs/api-reference/images-streaming)."""
    folder = HERE / "openai-images"
    folder.mkdir(exist_ok=True)
    common = {"size": "1024x1024", "quality": "high", "background": "opaque", "output_format": "png"}
    t = 1764651600
    partials = [
        sse(
            "image_generation.partial_image",
            {
                "type": "image_generation.partial_image",
                "b64_json": b64(png(16, 16, s)),
                "created_at": t + i,
                **common,
                "partial_image_index": i,
            },
        )
        for i, s in enumerate((0x3F, 0x7F))
    ]
    usage = {
        "total_tokens": 4176,
        "input_tokens": 16,
        "output_tokens": 4160,
        "input_tokens_details": {"text_tokens": 16, "image_tokens": 0},
    }
    completed = sse(
        "image_generation.completed",
        {
            "type": "image_generation.completed",
            "b64_json": b64(png(16, 16, 0xFF)),
            "created_at": t + 3,
            **common,
            "usage": usage,
        },
    )
    (folder / "gpt-image-stream.sse").write_text("".join(partials) + completed)
    # OpenAI's own stream ends after the completed event, without [DONE]; the spec's has it.
    (folder / "gpt-image-done.sse").write_text("".join(partials) + completed + "data: [DONE]\n\n")
    moderation = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": "moderation_blocked",
            "message": "Your request was rejected by the safety system.",
            "param": None,
        },
    }
    (folder / "gpt-image-error.sse").write_text(partials[0] + sse("error", moderation))
    broken = partials[0].replace(b64(png(16, 16, 0x3F))[:40], "!!not*base64!!" + b64(png(16, 16, 0x3F))[14:40])
    (folder / "gpt-image-broken.sse").write_text(broken + completed)
    jpeg_claims_png = sse(
        "image_generation.completed",
        {
            "type": "image_generation.completed",
            "b64_json": b64(b"\xff\xd8\xff\xe0" + bytes(60)),
            "created_at": t,
            **common,
            "usage": usage,
        },
    )
    (folder / "gpt-image-wrong-format.sse").write_text(jpeg_claims_png)


def gemini_image() -> None:
    """gemini-2.5-flash-image over streamGenerateContent?alt=sse with responseModalities
    (ai.google.dev/gemini-api/docs/image-generation): text parts, then one inlineData part."""
    folder = HERE / "gemini"
    folder.mkdir(exist_ok=True)
    version = "gemini-2.5-flash-image"
    rid = "mD4uaZmFKfGJ1dkP0bSi8Ao"
    chunks = [
        {
            "candidates": [
                {
                    "content": {
                        "parts": [{"text": "Here is a nano banana dish in a fancy restaurant."}],
                        "role": "model",
                    },
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 12,
                "totalTokenCount": 12,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}],
            },
            "modelVersion": version,
            "responseId": rid,
        },
        {
            "candidates": [
                {
                    "content": {
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": b64(png(24, 16, 0xFF))}}],
                        "role": "model",
                    },
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 12,
                "candidatesTokenCount": 1301,
                "totalTokenCount": 1313,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}],
                "candidatesTokensDetails": [{"modality": "IMAGE", "tokenCount": 1290}],
            },
            "modelVersion": version,
            "responseId": rid,
        },
    ]
    (folder / "gemini-image.sse").write_text("".join(sse(None, c) for c in chunks))
    broken = json.loads(json.dumps(chunks))
    broken[1]["candidates"][0]["content"]["parts"][0]["inlineData"]["data"] = "iVBORw0KGgo$$broken$$"
    (folder / "gemini-image-broken.sse").write_text("".join(sse(None, c) for c in broken))
    refusal = [
        {
            "candidates": [
                {
                    "content": {"parts": [{"text": "I can't create that image."}], "role": "model"},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 7, "totalTokenCount": 16},
            "modelVersion": version,
            "responseId": rid,
        }
    ]
    (folder / "gemini-image-refusal.sse").write_text("".join(sse(None, c) for c in refusal))


def responses_image() -> None:
    """OpenAI Responses with the image_generation tool, streaming with partial_images=1
    (platform.openai.com/docs/guides/image-generation, api-reference/responses-streaming)."""
    folder = HERE / "openai-responses"
    folder.mkdir(exist_ok=True)
    rid, ig = "resp_68ae0e4b1d7c8190a2c3", "ig_68ae0e5a8a0c8190b7d1"
    base = {
        "id": rid,
        "object": "response",
        "created_at": 1756237387,
        "model": "gpt-4.1-mini-2025-04-14",
        "tools": [{"type": "image_generation", "partial_images": 1, "output_format": "png"}],
    }
    final = b64(png(16, 16, 0xFF))
    item_done = {
        "id": ig,
        "type": "image_generation_call",
        "status": "completed",
        "background": "opaque",
        "output_format": "png",
        "quality": "medium",
        "size": "1024x1024",
        "result": final,
        "revised_prompt": "A gray tabby cat hugging an otter with an orange scarf",
    }
    usage = {
        "input_tokens": 2302,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 53,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2355,
    }
    events = [
        ("response.created", {"response": {**base, "status": "in_progress", "output": [], "usage": None}}),
        ("response.in_progress", {"response": {**base, "status": "in_progress", "output": [], "usage": None}}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": {"id": ig, "type": "image_generation_call", "status": "in_progress"}},
        ),
        ("response.image_generation_call.in_progress", {"output_index": 0, "item_id": ig}),
        ("response.image_generation_call.generating", {"output_index": 0, "item_id": ig}),
        (
            "response.image_generation_call.partial_image",
            {
                "output_index": 0,
                "item_id": ig,
                "partial_image_index": 0,
                "partial_image_b64": b64(png(16, 16, 0x7F)),
                "output_format": "png",
                "size": "1024x1024",
                "quality": "medium",
                "background": "opaque",
            },
        ),
        ("response.output_item.done", {"output_index": 0, "item": item_done}),
        ("response.completed", {"response": {**base, "status": "completed", "output": [item_done], "usage": usage}}),
    ]
    out = [sse(kind, {"type": kind, "sequence_number": n, **body}) for n, (kind, body) in enumerate(events)]
    (folder / "responses-image-gen.sse").write_text("".join(out))


def vector(seed: int, dims: int) -> list[float]:
    values = [math.sin(seed * 7.1 + i * 0.37) for i in range(dims)]
    norm = math.sqrt(sum(v * v for v in values))
    return [round(v / norm, 8) for v in values]


def embeddings() -> None:
    """OpenAI ``CreateEmbeddingResponse`` (api-reference/embeddings) and Gemini's
    ``BatchEmbedContentsResponse`` (ai.google.dev/api/embeddings), three inputs each."""
    folder = HERE / "openai-embeddings"
    folder.mkdir(exist_ok=True)
    data = [{"object": "embedding", "index": i, "embedding": vector(i + 1, 16)} for i in range(3)]
    body = {
        "object": "list",
        "data": data,
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 21, "total_tokens": 21},
    }
    (folder / "te3-small-batch3.json").write_text(json.dumps(body, indent=1))
    packed = []
    for item in data:
        raw = struct.pack(f"<{len(item['embedding'])}f", *item["embedding"])
        packed.append({**item, "embedding": b64(raw)})
    (folder / "te3-small-batch3-base64.json").write_text(json.dumps({**body, "data": packed}, indent=1))
    (folder / "te3-small-short.json").write_text(json.dumps({**body, "data": data[:2]}, indent=1))
    folder = HERE / "gemini-embeddings"
    folder.mkdir(exist_ok=True)
    gem = {"embeddings": [{"values": vector(i + 11, 16)} for i in range(3)]}
    (folder / "gemini-embedding-batch3.json").write_text(json.dumps(gem, indent=1))
    nan = {"embeddings": [{"values": [0.1] * 15 + [None]} for _ in range(3)]}
    (folder / "gemini-embedding-malformed.json").write_text(json.dumps(nan, indent=1))


def mmsp_embeddings() -> None:
    """MMSP's embedding stream (MMSP's stream grammar, Embeddings): one ``embedding.delta`` and one
    ``embedding.done`` per message sent, in order, then ``stop`` with the usage."""
    folder = HERE / "mmsp"
    folder.mkdir(exist_ok=True)
    out = []
    t = 1764651600000
    for i in range(3):
        v = vector(i + 21, 16)
        for kind in ("embedding.delta", "embedding.done"):
            event = {
                "role": "assistant",
                "event_type": "delta",
                "content_items": [{"type": kind, "embedding": v}],
                "usage_metadata": None,
                "finish_reason": None,
                "created_at": t + i,
            }
            out.append(sse(None, event))
    stop = {
        "role": "assistant",
        "event_type": "stop",
        "content_items": [],
        "usage_metadata": {"cached_tokens": 0, "prompt_tokens": 9, "thoughts_tokens": None, "response_tokens": 0},
        "finish_reason": "stop",
        "created_at": t + 5,
    }
    out.append(sse(None, stop))
    (folder / "mmsp-embedding-batch3.sse").write_text("".join(out) + "data: [DONE]\n\n")


if __name__ == "__main__":
    openai_images()
    gemini_image()
    responses_image()
    embeddings()
    mmsp_embeddings()
