"""What the request-side hardening costs, as ratios against the work it guards (same run).

- The nesting bound (``gateway.checks.check_nesting``) against reading the same body: JSON
  decode plus the dialect's ``decode_request``.
- The range check (``gateway.checks.validate_request``) against the same.
- ``gateway.extensions.PlainEncoder`` (no ``llmbridge`` data in vendor answers) against the
  bare stream encoder, per hub event of a corpus stream.
"""

from __future__ import annotations

import json

import msgspec

from llmbridge import dialects
from llmbridge.dialects.base import decode_all
from llmbridge.gateway._checks import check_nesting, validate_request
from llmbridge.gateway._extensions import PlainEncoder

from .common import CORPUS, best_of, table


def _bodies() -> list[tuple[str, bytes]]:
    small = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Hello!"}]}
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object"}}}}
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": schema}} for i in range(50)]
    turn = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t1", "arguments": '{"a": [{"b": 1}]}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result text " * 20},
    ]
    agent = {"model": "m", "messages": turn * 300, "tools": tools}
    text = {"model": "m", "messages": [{"role": "user", "content": "lorem ipsum " * 400_000}]}
    return [
        (name, json.dumps(body).encode())
        for name, body in [
            ("small chat request", small),
            ("agent: 900 messages, 50 tools", agent),
            ("one 4.8 MB message", text),
        ]
    ]


def run() -> str:
    chat = dialects.get("openai-chat")
    rows: list[list[object]] = []
    for name, raw in _bodies():
        decoded = msgspec.json.decode(raw)
        request = chat.decode_request(decoded)
        read = best_of(lambda r=raw: chat.decode_request(msgspec.json.decode(r)), repeat=3)
        nesting = best_of(lambda d=decoded: check_nesting(d, 128), repeat=3)
        ranges = best_of(lambda q=request: validate_request(q, "openai-chat"), repeat=3)
        rows.append([name, f"{len(raw):,}", read * 1e6, nesting * 1e6, nesting / read, ranges * 1e6])
    out = [
        "Request checks, CPU µs per request (best of 3) and the nesting check as a fraction of reading the body",
        table(["body", "bytes", "read µs", "nesting µs", "nesting/read", "ranges µs"], rows),
    ]

    source = (CORPUS / "openai-chat" / "openai-gpt4o-tool-call-long-arguments.sse").read_bytes()
    events = decode_all(chat.StreamDecoder(), source)
    rows = []
    for target in ("openai-chat", "openai-responses", "anthropic-messages", "gemini", "mmsp"):
        module = dialects.get(target)

        def bare(m=module) -> None:
            encoder = m.StreamEncoder()
            for event in events:
                encoder.encode(event)

        def plain(m=module, t=target) -> None:
            encoder = PlainEncoder(m.StreamEncoder(), t)
            for event in events:
                encoder.encode(event)

        a, b = best_of(bare, repeat=3), best_of(plain, repeat=3)
        rows.append([target, a / len(events) * 1e6, b / len(events) * 1e6, b / a])
    out += [
        "",
        f"Encoding without extension data, µs per hub event ({len(events)}-event chat stream, per stream)",
        table(["target", "bare µs", "plain µs", "plain/bare"], rows),
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(run())
