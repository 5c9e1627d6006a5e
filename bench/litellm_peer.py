"""LiteLLM's streaming translation over the same corpus input, for the pairs it has.

Measured as LiteLLM runs it, bytes in and bytes out, with the SSE layer given to it for
free (our decoder + json.loads, faster than its own), so the figure is generous to it:
- openai-chat -> anthropic-messages: chat chunks -> ``ModelResponseStream`` ->
  ``AnthropicStreamWrapper.anthropic_sse_wrapper()`` (what its proxy's /v1/messages does in
  front of an OpenAI-format upstream).
- anthropic-messages -> openai-chat: Anthropic events -> its ``ModelResponseIterator.chunk_parser``
  -> ``ModelResponseStream`` -> ``data: <json>`` lines (its /v1/chat/completions in front of
  Anthropic).
"""

from __future__ import annotations

import json
import logging
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch from the network at import

import contextlib

import litellm  # noqa: F401  (ImportError here means: not in the bench environment)
from litellm.llms.anthropic.chat.handler import ModelResponseIterator
from litellm.llms.anthropic.pass_through.adapters.streaming_iterator import AnthropicStreamWrapper
from litellm.types.utils import ModelResponseStream

from llmbridge import sse

from .common import best_of, corpus_bodies, table

logging.getLogger("LiteLLM").setLevel(logging.CRITICAL)


def _json_events(body: bytes) -> list[dict]:
    d = sse.Decoder()
    out = []
    for e in d.feed(body) + d.close():
        if e.data.strip() != "[DONE]":
            with contextlib.suppress(ValueError):
                out.append(json.loads(e.data))
    return out


def chat_to_messages(bodies: list[bytes]) -> int:
    size = 0
    for body in bodies:
        chunks = [c for c in _json_events(body) if "choices" in c and "error" not in c]
        try:
            stream = (ModelResponseStream(**c) for c in chunks)
            for frame in AnthropicStreamWrapper(stream, model="m").anthropic_sse_wrapper():
                size += len(frame)
        except Exception:
            pass
    return size


def messages_to_chat(bodies: list[bytes]) -> int:
    size = 0
    for body in bodies:
        events = _json_events(body)
        it = ModelResponseIterator(streaming_response=iter(()), sync_stream=True)
        for event in events:
            try:
                chunk = it.chunk_parser(event)
            except Exception:
                continue
            size += len(b"data: " + chunk.model_dump_json().encode() + b"\n\n")
    return size


PAIRS = {
    ("openai-chat", "anthropic-messages"): chat_to_messages,
    ("anthropic-messages", "openai-chat"): messages_to_chat,
}


def compare(ours: dict[tuple[str, str], float]) -> str:
    rows = []
    for (source, target), fn in PAIRS.items():
        bodies = [b for _, b in corpus_bodies(source)]
        n = sum(len(sse.Decoder().feed(b + b"\n\n")) for b in bodies)
        t = best_of(lambda fn=fn, b=bodies: fn(b), repeat=3, min_time=0.3)
        theirs = n / t
        rows.append([f"{source} -> {target}", ours[(source, target)], theirs, ours[(source, target)] / theirs])
    return "LiteLLM in the same run, same input (events/s per core)\n" + table(
        ["pair", "llmbridge", "LiteLLM", "llmbridge x"], rows
    )
