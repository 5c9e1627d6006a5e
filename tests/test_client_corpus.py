"""The client over real HTTP against a replay upstream serving every corpus file in its own
dialect: the UniEvent grammar holds for every stream, and ``complete()`` agrees with what the
decoded hub stream says (tests.readers.expected)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import AsyncClient, Client, dialects, replay
from llmbridge.client._core import StreamCore
from llmbridge.dialects.base import decode_all
from llmbridge.errors import LLMBridgeError, ToolCallArgumentParseError
from llmbridge.unievent import grammar_violations
from tests.conftest import CORPUS, corpus_files
from tests.gateway_util import BASE_PATH, serving
from tests.readers import FINISH_CATEGORY, expected

DIALECTS = ["openai-chat", "openai-responses", "anthropic-messages", "gemini"]


@pytest.fixture(scope="module")
def rep():
    with serving(replay.create_app(CORPUS, seed=5)) as server:
        yield server


def client_for(server, dialect: str) -> Client:
    return Client(server.url + BASE_PATH.get(dialect, ""), dialect=dialect, max_retries=0)


def want_for(dialect: str, path):
    return expected(decode_all(dialects.get(dialect).StreamDecoder(), path.read_bytes()))


def summary_problems(name: str, got, want) -> list[str]:
    """Where a Completion disagrees with the expected Summary."""
    problems = []
    checks = [
        ("text", got.text, want.text),
        ("thinking", got.thinking, want.thinking),
        ("tool_calls", [(c.name, c.arguments) for c in got.tool_calls], want.tool_calls),
        ("tool_call_ids", [c.tool_call_id for c in got.tool_calls][: len(want.tool_call_ids)],
         [i for i in want.tool_call_ids if i] or [c.tool_call_id for c in got.tool_calls]),
        ("finish", FINISH_CATEGORY.get(got.finish) if got.finish else None, want.finish),
        ("input_tokens", got.usage.input_tokens, want.input_tokens),
        ("output_tokens", got.usage.output_tokens, want.output_tokens),
    ]  # fmt: skip
    for field, a, b in checks:
        if a != b:
            problems.append(f"{name}: {field}: got {a!r}, want {b!r}")
    return problems


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_corpus_stream_keeps_the_grammar_and_assembles_like_the_hub(rep, dialect):
    client = client_for(rep, dialect)
    problems: list[str] = []
    files = corpus_files(dialect)
    assert files
    for n, path in enumerate(files):
        name = path.stem
        want = want_for(dialect, path)
        events, error = [], None
        stream = client.stream(model=name + "@chunk=1024", messages=["hi"])  # cut at random boundaries
        try:
            for event in stream:
                events.append(event)
                assert len(event.content_items) == (event.event_type == "delta")
        except LLMBridgeError as exc:
            error = exc
        violations = grammar_violations(events)
        bad_args = any(args is None for _, args in want.tool_calls)
        if want.error or bad_args:
            # a stream ends with stop or with an exception, never both
            if error is None:
                problems.append(f"{name}: no exception for {want.error or 'unparseable arguments'}")
            elif bad_args and not want.error:
                assert isinstance(error, ToolCallArgumentParseError), name
            violations = [v for v in violations if v != "end: 0 stop events"]
            if error is not None and want.error:
                assert error.partial is not None and error.partial.text == want.text, name
        elif error is not None:
            problems.append(f"{name}: unexpected {type(error).__name__}: {error}")
        problems += [f"{name}: {v}" for v in violations]
        if error is None:
            problems += summary_problems(name, stream.completion, want)
        if error is None and n % 3 == 0:
            again = client.complete(name, "hi")  # complete() is the same call, assembled
            assert again.to_dict()["content_items"] == stream.completion.to_dict()["content_items"], name
    assert not problems, "\n".join(problems)


def test_async_client_sees_the_same_events(rep):
    """The async shell over the same bytes gives the same UniEvents (timestamps aside)."""
    names = {d: [p.stem for p in corpus_files(d)[:6]] for d in DIALECTS}

    def strip(events):
        out = []
        for e in events:
            d = e.to_dict()
            d.pop("created_at", None)
            out.append(d)
        return out

    async def run():
        got = {}
        for dialect, models in names.items():
            async with AsyncClient(rep.url + BASE_PATH.get(dialect, ""), dialect=dialect) as client:
                for model in models:
                    try:
                        got[model] = strip([e async for e in client.stream(model + "@chunk=1024", "hi")])
                    except LLMBridgeError as exc:
                        got[model] = type(exc).__name__
        return got

    got = asyncio.run(run())
    for dialect, models in names.items():
        client = client_for(rep, dialect)
        for model in models:
            try:
                want = strip(list(client.stream(model + "@chunk=1024", "hi")))
            except LLMBridgeError as exc:
                want = type(exc).__name__
            assert got[model] == want, model


CHUNK_FILES = [
    ("anthropic-messages", "claude-thinking-then-tool-use"),
    ("openai-chat", "openai-gpt4o-parallel-tool-calls"),
    ("openai-responses", "openai-reasoning-function-call-usage"),
    ("gemini", "gemini25pro-thoughts"),
    ("openai-chat", "openrouter-minimax-error-midstream"),
]


def core_events(dialect: str, pieces: list[bytes]):
    """UniEvents (timestamps aside) and the exception class name, from a body fed in pieces."""
    core = StreamCore(dialects.get(dialect))
    out = []
    try:
        for piece in pieces:
            out += core.feed(piece)
        while more := core.close():
            out += more
    except LLMBridgeError as exc:
        out.append(type(exc).__name__)
    return [e if isinstance(e, str) else {**e.to_dict(), "created_at": 0} for e in out]


@given(data=st.data())
def test_the_client_core_gives_the_same_events_however_the_bytes_are_cut(data):
    dialect, name = data.draw(st.sampled_from(CHUNK_FILES))
    body = (CORPUS / dialect / f"{name}.sse").read_bytes()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=40)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert core_events(dialect, pieces) == core_events(dialect, [body])
