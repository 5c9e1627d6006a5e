"""What each corpus capture says, as its vendor's own SDK reads it: the expectations of the
translation matrix (tests/test_matrix.py), independent of llmbridge's decoders.

``view(dialect, path)`` reads the SOURCE capture with the vendor's SDK (the dialect's reader
in this package; Cohere's SDK; botocore's event-stream parser; google-genai's response and
interaction models) and then applies :data:`HAND_CHECKED`: the values, checked by hand
against the capture, where the SDK cannot show what the capture says (it crashes on a
vendor's extra fields, it does not know a vendor's reasoning field, it overwrites usage
with a trailing ``null``).  Each entry says why.

``reason(dialect, summary)`` turns the SDK's finish word into the standard's stop_reason,
with the readers' hand-written tables (never llmbridge's maps).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from . import FINISH_CATEGORY, Summary, arguments, reader
from . import reason as reader_reason

# ----------------------------------------------------------------------- vendor fields, by hand
# Small, literal readers of one vendor field each, for the HAND_CHECKED entries below.


def _chunks(path: Path) -> Iterator[dict]:
    """The JSON objects of a capture's ``data:`` lines (one line per event in these captures)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            yield json.loads(line[5:])


def _deltas(path: Path) -> Iterator[dict]:
    for chunk in _chunks(path):
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                yield choice.get("delta") or {}


def delta_field(name: str) -> Callable[[Path], str]:
    """The concatenated string values of ``choices[0].delta.<name>``."""
    return lambda path: "".join(d.get(name) or "" for d in _deltas(path) if isinstance(d.get(name), str))


def reasoning_details(path: Path) -> str:
    """OpenRouter's ``delta.reasoning_details``: the text of its ``reasoning.text`` entries."""
    return "".join(
        item.get("text") or ""
        for d in _deltas(path)
        for item in d.get("reasoning_details") or ()
        if item.get("type") == "reasoning.text"
    )


def _content_parts(path: Path) -> Iterator[dict]:
    for d in _deltas(path):
        if isinstance(d.get("content"), list):
            yield from d["content"]


def content_array_thinking(path: Path) -> str:
    """Mistral's content arrays: the text inside their ``thinking`` parts."""
    parts = [p for p in _content_parts(path) if p.get("type") == "thinking"]
    return "".join(t.get("text", "") for p in parts for t in p["thinking"])


def _content(path: Path) -> str:
    return "".join(d["content"] for d in _deltas(path) if isinstance(d.get("content"), str))


def think_tags(part: str) -> Callable[[Path], str]:
    """DeepSeek-R1's inline ``<think>...</think>``: the thinking, or the text after it."""

    def get(path: Path) -> str:
        match = re.fullmatch(r"<think>(.*?)</think>(.*)", _content(path), re.S)  # kept as streamed
        assert match, f"no think tags in {path.name}"
        return match.group(1) if part == "thinking" else match.group(2)

    return get


def last_usage(field: str) -> Callable[[Path], int]:
    """A count from the last non-null usage object anywhere in a chunk (top level or ``x_groq``)."""

    def get(path: Path) -> int:
        found = None
        for chunk in _chunks(path):
            for holder in (chunk, chunk.get("x_groq") or {}):
                if isinstance(holder.get("usage"), dict):
                    found = holder["usage"]
        assert found is not None, f"no usage in {path.name}"
        return found[field]

    return get


def usage_sum(*fields: str) -> Callable[[Path], int]:
    """xAI counts reasoning apart from completion_tokens; the standard's output counts both."""

    def get(path: Path) -> int:
        usage = [c["usage"] for c in _chunks(path) if isinstance(c.get("usage"), dict)][-1]
        total = 0
        for name in fields:
            node: Any = usage
            for key in name.split("."):
                node = node[key]
            total += node
        return total

    return get


# ----------------------------------------------------------------------- the hand-checked table

_REASONING = delta_field("reasoning")

HAND_CHECKED: dict[str, dict[str, Any]] = {
    # The openai SDK keeps only reasoning_content; these vendors put thinking elsewhere.
    "openai-chat/groq-compound-web-search": {
        "thinking": _REASONING,
        "input_tokens": last_usage("prompt_tokens"),  # Groq's usage rides in x_groq, the SDK drops it
        "output_tokens": last_usage("completion_tokens"),
        "why": "Groq: thinking in delta.reasoning, usage in x_groq.usage",
    },
    "openai-chat/groq-gpt-oss-error-event-after-text": {"thinking": _REASONING, "why": "delta.reasoning"},
    "openai-chat/groq-gpt-oss-error-event-tool-use-failed": {"thinking": _REASONING, "why": "delta.reasoning"},
    "openai-chat/groq-gpt-oss-reasoning-tool-calls": {"thinking": _REASONING, "why": "delta.reasoning"},
    "openai-chat/mistral-magistral-thinking-content-array": {
        "thinking": content_array_thinking,
        "why": "Mistral: thinking parts inside a content array",
    },
    "openai-chat/openrouter-claude-reasoning-details": {"thinking": reasoning_details, "why": "reasoning_details"},
    "openai-chat/snowflake-cortex-claude-thinking": {"thinking": reasoning_details, "why": "reasoning_details"},
    "openai-chat/hf-together-deepseek-r1-think-tags": {
        "text": think_tags("text"),
        "thinking": think_tags("thinking"),
        "why": "DeepSeek-R1: thinking inline in <think> tags; the SDK shows them as text",
    },
    "openai-chat/openai-gpt5-moderation-trailing-chunk": {
        "input_tokens": 13,
        "output_tokens": 11,
        "why": "a trailing moderation chunk has usage: null, which the SDK's accumulator lets overwrite the usage",
    },
    "openai-chat/openrouter-minimax-error-midstream": {
        "thinking": _REASONING,
        "input_tokens": 43,
        "output_tokens": 10,
        "why": "OpenRouter: an error object inside an ordinary chunk, with the usage beside it",
    },
    "openai-chat/openrouter-novita-kimi-k2-tool-call-repeated-id": {
        "tool_calls": [("llm_version", {})],
        "why": "the provider repeats the call's id and name in every chunk; the SDK concatenates the names",
    },
    "openai-chat/openrouter-web-search-annotations": {
        "text": delta_field("content"),
        "stop": "stop",
        "finish": "stop",
        "input_tokens": last_usage("prompt_tokens"),
        "output_tokens": last_usage("completion_tokens"),
        "error": None,
        "why": "the SDK raises on delta.annotations entries without an index",
    },
    "openai-chat/perplexity-sonar-citations": {
        "stop": "stop",
        "finish": "stop",
        "why": "the finish_reason rides on an object 'chat.completion.done' chunk the SDK skips",
    },
    "openai-chat/xai-grok3-mini-reasoning-tool-call": {
        "output_tokens": usage_sum("completion_tokens", "completion_tokens_details.reasoning_tokens"),
        "why": "xAI leaves reasoning tokens out of completion_tokens",
    },
    "openai-responses/openai-background-resume-starting-after": {
        "text": lambda path: "".join(c["delta"] for c in _chunks(path) if c["type"] == "response.output_text.delta"),
        "stop": "completed",
        "finish": "stop",
        "input_tokens": 15,
        "output_tokens": 9,
        "error": None,
        "why": "a resumed stream starts without response.created, which the SDK's accumulator requires",
    },
    # Gemini on Vertex streams arguments as partialArgs, which google-genai shows as fragments.
    "gemini/vertex-gemini31pro-streaming-function-call-args": {
        "tool_calls": [("getWeather", {"location": "Boston"}), ("getWeather", {"location": "San Francisco"})],
        "why": "partialArgs",
    },
    "gemini/vertex-gemini3flash-streaming-args-no-args-call": {
        "tool_calls": [
            ("read_theme", {}),
            ("read_screen", {"id": "A"}),
            ("read_screen", {"id": "B"}),
            ("read_screen", {"id": "C"}),
        ],
        "why": "partialArgs",
    },
    "gemini/vertex-streaming-function-call-args-nested": {
        "tool_calls": [
            (
                "cookRecipe",
                {
                    "recipe": {
                        "ingredients": [
                            {"amount": "16 oz", "name": "Lasagna noodles"},
                            {"amount": "1 lb", "name": "Ground beef"},
                            {"amount": "15 oz", "name": "Ricotta cheese"},
                            {"amount": "3 cups", "name": "Mozzarella cheese"},
                            {"amount": "1/2 cup", "name": "Parmesan cheese"},
                            {"amount": "24 oz", "name": "Tomato sauce"},
                            {"amount": "1", "name": "Egg"},
                            {"amount": "2 cloves", "name": "Garlic"},
                            {"amount": "1 tsp", "name": "Salt"},
                            {"amount": "1/2 tsp", "name": "Pepper"},
                        ],
                        "name": "Lasagna",
                        "steps": [
                            "Preheat oven to 375\u00b0F (190\u00b0C).",
                            "Cook lasagna noodles according to package directions, drain and set aside.",
                            "Brown ground beef with minced garlic in a skillet. Drain fat and stir in tomato sauce. "
                            "Simmer for 10 minutes.",
                            "In a bowl, mix ricotta cheese, egg, salt, pepper, and Parmesan cheese.",
                            "In a 9x13 baking dish, spread a thin layer of meat sauce.",
                            "Layer noodles, ricotta mixture, mozzarella, and meat sauce. Repeat.",
                            "Top with remaining mozzarella cheese.",
                            "Cover with foil and bake for 25 minutes.",
                            "Remove foil and bake for another 25 minutes until golden.",
                            "Let stand for 15 minutes before serving.",
                        ],
                    }
                },
            )
        ],
        "why": "partialArgs, nested paths",
    },
}


# ----------------------------------------------------------------------- SDK readers of the others


def read_gemini_array(body: bytes) -> Summary:
    """A Gemini stream without ``alt=sse`` (one JSON array), each element parsed by google-genai's
    own ``GenerateContentResponse`` model and summarized as the gemini reader does."""
    from google.genai import types

    from . import gemini

    # _from_response is what generate_content calls on each response it receives
    chunks = [types.GenerateContentResponse._from_response(response=obj, kwargs={}) for obj in json.loads(body)]
    return gemini.summarize(chunks)


def read_cohere(body: bytes) -> Summary:
    """Cohere's own SDK, ``ClientV2.chat_stream`` through a mock transport."""
    import cohere

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    client = cohere.ClientV2(api_key="k", base_url="http://cohere.test", httpx_client=http)
    s = Summary(thinking="")
    calls: dict[int, list] = {}
    for e in client.chat_stream(model="m", messages=[{"role": "user", "content": "hi"}]):
        if e.type == "content-delta":
            s.text += e.delta.message.content.text or ""
            s.thinking += e.delta.message.content.thinking or ""
        elif e.type == "tool-plan-delta":
            s.thinking += e.delta.message.tool_plan  # Cohere's plan before its calls: its thinking
        elif e.type == "tool-call-start":
            call = e.delta.message.tool_calls
            calls[e.index] = [call.function.name, call.id, call.function.arguments or ""]
        elif e.type == "tool-call-delta":
            calls[e.index][2] += e.delta.message.tool_calls.function.arguments
        elif e.type == "message-end":
            s.stop = e.delta.finish_reason
            tokens = e.delta.usage.tokens if e.delta.usage else None
            if tokens is not None:
                s.input_tokens, s.output_tokens = int(tokens.input_tokens), int(tokens.output_tokens)
    s.tool_calls = [(name, arguments(args)) for name, _, args in calls.values()]
    s.tool_call_ids = [i for _, i, _ in calls.values()]
    return s


def read_bedrock(body: bytes) -> Summary:
    """botocore's own event-stream parser with the ConverseStream output shape."""
    import botocore.session
    from botocore.eventstream import EventStream
    from botocore.parsers import EventStreamJSONParser

    operation = botocore.session.get_session().get_service_model("bedrock-runtime").operation_model("ConverseStream")

    class Raw:
        def stream(self) -> Iterator[bytes]:
            yield body

        def close(self) -> None:
            pass

    s = Summary(thinking="")
    calls: dict[int, list] = {}
    for e in EventStream(Raw(), operation.output_shape.members["stream"], EventStreamJSONParser(), "ConverseStream"):
        if "contentBlockStart" in e and "toolUse" in e["contentBlockStart"]["start"]:
            use = e["contentBlockStart"]["start"]["toolUse"]
            calls[e["contentBlockStart"]["contentBlockIndex"]] = [use["name"], use["toolUseId"], ""]
        elif "contentBlockDelta" in e:
            delta, index = e["contentBlockDelta"]["delta"], e["contentBlockDelta"]["contentBlockIndex"]
            s.text += delta.get("text", "")
            s.thinking += (delta.get("reasoningContent") or {}).get("text", "")
            if "toolUse" in delta:
                calls[index][2] += delta["toolUse"]["input"]
        elif "messageStop" in e:
            s.stop = e["messageStop"]["stopReason"]
        elif "metadata" in e:
            usage = e["metadata"]["usage"]
            s.input_tokens = (
                usage["inputTokens"] + usage.get("cacheReadInputTokens", 0) + usage.get("cacheWriteInputTokens", 0)
            )
            s.output_tokens = usage["outputTokens"]
    s.tool_calls = [(name, arguments(args)) for name, _, args in calls.values()]
    s.tool_call_ids = [i for _, i, _ in calls.values()]
    return s


def read_interactions(body: bytes) -> Summary:
    """google-genai's Interactions client, ``interactions.create(stream=True)``."""
    from google import genai
    from google.genai import types

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url="http://gemini.test", httpx_client=http))
    s = Summary(thinking="")
    calls: dict[int, list] = {}
    for e in client.interactions.create(model="gemini-2.5-flash", input="hi", stream=True):
        if e.event_type == "step.start" and e.step.type == "function_call":
            calls[e.index] = [e.step.name, e.step.id, ""]
        elif e.event_type == "step.delta":
            if e.delta.type == "text":
                s.text += e.delta.text
            elif e.delta.type == "thought_summary":
                s.thinking += e.delta.content.text
            elif e.delta.type == "arguments_delta":
                calls[e.index][2] += e.delta.arguments
        elif e.event_type in ("interaction.completed", "interaction.complete"):
            s.stop = e.interaction.status
            usage = e.interaction.usage
            if usage is not None:
                s.input_tokens = usage.total_input_tokens
                # the standard's output counts thoughts too; Interactions counts them apart
                s.output_tokens = (usage.total_output_tokens or 0) + (usage.total_thought_tokens or 0)
    s.tool_calls = [(name, arguments(args)) for name, _, args in calls.values()]
    s.tool_call_ids = [i for _, i, _ in calls.values()]
    return s


# The finish words of the source-only dialects (vendor API references) as the standard's stop_reason.
REASONS: dict[str, dict[str, str]] = {
    "cohere-v2": {
        "COMPLETE": "end_turn",
        "STOP_SEQUENCE": "stop_sequence",
        "MAX_TOKENS": "max_tokens",
        "TOOL_CALL": "tool_use",
        "ERROR": "error",
        "ERROR_TOXIC": "content_filter",
        "ERROR_LIMIT": "max_tokens",
        "TIMEOUT": "other",  # cut short by time: no stop_reason of its own, the word kept raw
        "USER_CANCEL": "other",
    },
    "bedrock-converse": {
        "end_turn": "end_turn",
        "tool_use": "tool_use",
        "max_tokens": "max_tokens",
        "stop_sequence": "stop_sequence",
        "guardrail_intervened": "content_filter",
        "content_filtered": "content_filter",
        "model_context_window_exceeded": "max_tokens",
        "malformed_model_output": "error",
        "malformed_tool_use": "error",
    },
    "gemini-interactions": {
        "completed": "end_turn",
        "requires_action": "tool_use",
        "incomplete": "max_tokens",
        "failed": "error",
        "cancelled": "other",  # no stop_reason for a turn the user cancelled; the word kept raw
    },
}

# The lossy tables of the source-only dialects: the word their SDK shows for each stop_reason.
SHOWS: dict[str, dict[str, str]] = {
    "cohere-v2": {
        "end_turn": "COMPLETE",
        "stop_sequence": "STOP_SEQUENCE",
        "max_tokens": "MAX_TOKENS",
        "tool_use": "TOOL_CALL",
        "content_filter": "ERROR_TOXIC",
        "refusal": "COMPLETE",
        "pause_turn": "COMPLETE",
        "error": "ERROR",
        "other": "COMPLETE",
    },
    "bedrock-converse": {
        "end_turn": "end_turn",
        "stop_sequence": "stop_sequence",
        "max_tokens": "max_tokens",
        "tool_use": "tool_use",
        "content_filter": "content_filtered",
        "refusal": "end_turn",
        "pause_turn": "end_turn",
        "error": "end_turn",
        "other": "end_turn",
    },
    "gemini-interactions": {
        "end_turn": "completed",
        "stop_sequence": "completed",
        "max_tokens": "incomplete",
        "tool_use": "requires_action",
        "content_filter": "completed",
        "refusal": "completed",
        "pause_turn": "completed",
        "error": "failed",
        "other": "completed",
    },
}

_READ_OTHER: dict[str, Callable[[bytes], Summary]] = {
    "cohere-v2": read_cohere,
    "bedrock-converse": read_bedrock,
    "gemini-interactions": read_interactions,
}


def view(dialect: str, path: Path) -> Summary:
    """What the capture at ``path`` (of ``dialect``) says, read by its vendor's SDK, with the
    :data:`HAND_CHECKED` corrections applied."""
    body = path.read_bytes()
    with warnings.catch_warnings():
        # pydantic warns while the openai SDK serializes vendor content arrays; not our concern
        warnings.simplefilter("ignore", UserWarning)
        summary = _read(dialect, body)
    for name, value in HAND_CHECKED.get(f"{path.parent.name}/{path.stem}", {}).items():
        if name != "why":
            setattr(summary, name, value(path) if callable(value) else value)
    if summary.stop is not None and summary.finish is None:
        summary.finish = FINISH_CATEGORY.get(reason(dialect, summary) or "other")
    return summary


def _read(dialect: str, body: bytes) -> Summary:
    if dialect in _READ_OTHER:
        return _READ_OTHER[dialect](body)
    if dialect == "gemini" and body.lstrip().startswith(b"["):
        return read_gemini_array(body)
    return reader(dialect).read(body)


def reason(dialect: str, summary: Summary) -> str | None:
    """The standard's stop_reason for the finish word ``dialect``'s SDK showed."""
    if dialect in REASONS:
        return REASONS[dialect].get(summary.stop, "other") if summary.stop else None
    return reader_reason(dialect, summary)
