"""The translation matrix: every corpus stream, into every dialect, read by that dialect's
official SDK (an independent reader for llm-stream, MMSP's own client for mmsp), must show
what the source capture says as ITS vendor's SDK reads it (tests/readers/sources.py: never
llmbridge's decoder); a finish reason the target cannot express must show as the word the
target's lossy table (``SHOWS`` in each reader) states.  And X -> Y -> X round trips keep
the hub content, extension fields included."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from llmbridge import dialects, hub
from llmbridge.dialects.base import decode_all, encode_all
from tests.conftest import corpus_files
from tests.readers import Summary, reader, sources

SOURCES = {
    "anthropic-messages": corpus_files("anthropic-messages"),
    "openai-chat": corpus_files("openai-chat"),
    "openai-responses": corpus_files("openai-responses"),
    "gemini": corpus_files("gemini")
    + [p for p in corpus_files("other") if p.name.startswith("gemini") and p.read_bytes().lstrip().startswith(b"[")],
    "cohere-v2": [p for p in corpus_files("other") if p.name.startswith("cohere-v2-")],
    "bedrock-converse": [
        p for p in corpus_files("other", suffix=".eventstream") if p.name.startswith("bedrock-converse-stream-")
    ],
    "gemini-interactions": [p for p in corpus_files("other") if p.name.startswith("gemini-interactions-")],
}
CASES = [(dialect, path) for dialect, paths in SOURCES.items() for path in paths]
# Captures whose image base64 the source fixture elided ("..." in the middle): an image reaches
# Gemini as a native inlineData part, whose bytes google-genai decodes, and rightly refuses.
ELIDED_IMAGE = {"openai-image-generation-partial-image"}
IDS = [f"{path.parent.name}/{path.stem}" for _, path in CASES]


def decode(dialect: str, body: bytes) -> list[hub.Event]:
    return decode_all(dialects.get(dialect).StreamDecoder(), body)


def encode(dialect: str, events: list[hub.Event]) -> bytes:
    return encode_all(dialects.get(dialect).StreamEncoder(), events)


@functools.cache
def source_view(source: str, path: Path) -> Summary:
    """What the capture says, by its vendor's SDK (and the hand-checked table)."""
    return sources.view(source, path)


def shown_finish(source: str, want: Summary, target: str) -> str | None:
    """The finish word the target's SDK must show for the source's: the same word within a
    dialect, else the target's word for the source's stop_reason (its lossy table)."""
    if want.stop is None:
        return None
    if target == source:
        return want.stop
    return reader(target).SHOWS[sources.reason(source, want)]


@pytest.mark.parametrize("target", dialects.NAMES)
@pytest.mark.parametrize(("source", "path"), CASES, ids=IDS)
def test_sdk_reads_translation(source, path, target):
    events = decode(source, path.read_bytes())
    want = source_view(source, path)
    got = reader(target).read(encode(target, events))
    if target == "gemini" and path.stem in ELIDED_IMAGE:
        assert "base64" in (got.error or ""), got.error
        return
    cut_off = [name for name, args in want.tool_calls if args is None]  # arguments cut short by max_tokens
    if want.error or (cut_off and target == "mmsp"):
        # MMSP's stream grammar: arguments that do not parse raise ToolCallArgumentParseError in place of the .done
        assert got.error, f"source ended in error ({want.error or cut_off}) but the {target} reader saw a clean end"
    else:
        assert got.error is None, got.error
    assert got.text == want.text
    if reader(target).CARRIES_THINKING:
        assert got.thinking == want.thinking
    if cut_off and got.tool_calls:
        # Gemini's functionCall.args must be an object: the partial text rides in the extension field
        want_calls = [(n, a) for n, a in want.tool_calls if a is not None]
        assert [(n, a) for n, a in got.tool_calls if n not in cut_off] == want_calls
    elif not got.error or got.tool_calls:
        assert got.tool_calls == want.tool_calls
    assert all(got.tool_call_ids) and len(set(got.tool_call_ids)) == len(got.tool_call_ids)
    if want.error or got.error:
        # A target's error form need not carry the finish and usage that came before it: MMSP's
        # error event stands in place of the stop event that would carry them.
        return
    if want.stop is not None and not got.error:
        assert got.stop == shown_finish(source, want, target), f"{source} {want.stop!r} as {target}"
        assert got.finish == want.finish or target != source
    if want.input_tokens is not None:
        assert got.input_tokens == want.input_tokens
    if want.output_tokens is not None:
        assert got.output_tokens == want.output_tokens


def arguments(text: str) -> object:
    """Tool arguments compared as JSON: "" and "{}" both mean no arguments."""
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text  # cut short: compared as text


def content(events: list[hub.Event]) -> dict:
    """The hub content a round trip must keep."""
    r = hub.assemble(events)
    for b in r.blocks:
        if b.kind == "tool_call":
            b.text = arguments(b.text)
    # (the vendor's item ids of text and thinking blocks are bookkeeping, not content)
    blocks = [
        (
            b.choice,
            b.kind,
            b.text,
            b.id if b.kind in ("tool_call", "native") else None,
            b.name,
            b.mime_type,
            b.fidelity or None,
        )
        for b in r.blocks
        if b.text or b.kind != "text" or b.fidelity
    ]
    usage = r.usage or hub.Usage()
    return {
        "blocks": blocks,
        "usage": (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.reasoning_tokens),
        "finishes": {c: f.reason for c, f in r.finishes.items()},
        "error": r.error.type if r.error else None,
        "complete": r.complete,
    }


@pytest.mark.parametrize("via", [d for d in dialects.NAMES])
@pytest.mark.parametrize(("source", "path"), CASES, ids=IDS)
def test_round_trip_keeps_hub_content(source, path, via):
    events = decode(source, path.read_bytes())
    there = decode(via, encode(via, events))
    back = decode(source, encode(source, there))
    want, got = content(events), content(back)
    if via == "mmsp" and path.stem in ELIDED_IMAGE:  # MMSP carries bytes: base64 that does not decode cannot
        for blocks in (want["blocks"], got["blocks"]):  # come back as it was
            blocks[:] = [(*b[:2], "", *b[3:]) if b[1] == "data" else b for b in blocks]
    assert got == want
