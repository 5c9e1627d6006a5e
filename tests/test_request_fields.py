"""Every request field of each served vendor dialect: accepted, carried to an upstream of the same
dialect, mapped to each other dialect's field, or dropped and reported (issue 22).

One row per field of the vendor's API reference; docs/dialects/<dialect>.md holds the same rows
as a table ("Request fields"), and ``test_the_docs_table_lists_every_row`` keeps the two alike.
A row is ``(dialect, field, fragment, expectations)``: ``fragment`` is merged into a minimal
request of the dialect; each expectation names a target dialect and either a path that must be
set in the target's upstream request (``Mapped``, optionally with its value) or a name that
:func:`dropped_fields` must report (``Dropped``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmbridge import dialects
from llmbridge.dialects.fields import dropped_fields

DOCS = Path(__file__).parent.parent / "docs" / "dialects"
SERVED = ("openai-chat", "openai-responses", "anthropic-messages", "gemini")
DOC_FILE = {d: DOCS / (d.replace("-", "_") + ".md") for d in SERVED}

BASE: dict[str, dict[str, Any]] = {
    "anthropic-messages": {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    "openai-chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "openai-responses": {"model": "m", "input": "hi"},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}
_ANY = object()


@dataclass(frozen=True)
class Mapped:
    path: str  # dotted, with [n] indexes: "generationConfig.thinkingConfig.thinkingBudget"
    value: Any = _ANY


@dataclass(frozen=True)
class Dropped:
    name: str  # what dropped_fields reports


def at(body: Any, path: str) -> Any:
    """The value at ``path`` in ``body``; KeyError when it is not there."""
    for key, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        body = body[int(index)] if index else body[key]
    return body


CHAT, RESP, ANTH, GEM = SERVED
USER = {"role": "user", "content": "hi"}
TOOL_A = {"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}
TOOL_CHAT = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
TOOL_RESP = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
TOOL_GEM = {"functionDeclarations": [{"name": "f", "description": "d", "parametersJsonSchema": {"type": "object"}}]}
CALL_TURN_A = [
    USER,
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"x": "1"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
]
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}

ROWS: list[tuple[str, str, dict[str, Any], dict[str, Mapped | Dropped]]] = [
    # ------------------------------------------------------------------ anthropic-messages
    (ANTH, "model", {"model": "claude-x"}, {CHAT: Mapped("model", "claude-x"), RESP: Mapped("model", "claude-x")}),
    (
        ANTH,
        "messages (user, assistant)",
        {"messages": [USER, {"role": "assistant", "content": "yo"}]},
        {
            CHAT: Mapped("messages[1].role", "assistant"),
            RESP: Mapped("input[1].role", "assistant"),
            GEM: Mapped("contents[1].role", "model"),
        },
    ),
    (
        ANTH,
        "messages role system (in the conversation)",
        {"messages": [USER, {"role": "system", "content": "be brief"}]},
        {
            CHAT: Mapped("messages[1].role", "system"),
            RESP: Mapped("input[1].role", "developer"),
            GEM: Mapped("systemInstruction.parts[0].text", "be brief"),
        },
    ),
    (
        ANTH,
        "system",
        {"system": "sys"},
        {
            CHAT: Mapped("messages[0].content", "sys"),
            RESP: Mapped("instructions", "sys"),
            GEM: Mapped("systemInstruction.parts[0].text", "sys"),
        },
    ),
    (
        ANTH,
        "system[].cache_control",
        {"system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]},
        {
            CHAT: Dropped("system.cache_control"),
            RESP: Dropped("system.cache_control"),
            GEM: Dropped("system.cache_control"),
        },
    ),
    (
        ANTH,
        "messages[].content[].cache_control",
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
            ]
        },
        {
            CHAT: Dropped("messages.cache_control"),
            RESP: Dropped("messages.cache_control"),
            GEM: Dropped("messages.cache_control"),
        },
    ),
    (
        ANTH,
        "max_tokens",
        {"max_tokens": 77},
        {
            CHAT: Mapped("max_completion_tokens", 77),
            RESP: Mapped("max_output_tokens", 77),
            GEM: Mapped("generationConfig.maxOutputTokens", 77),
        },
    ),
    (
        ANTH,
        "stop_sequences",
        {"stop_sequences": ["END"]},
        {
            CHAT: Mapped("stop", ["END"]),
            RESP: Dropped("stop_sequences"),
            GEM: Mapped("generationConfig.stopSequences", ["END"]),
        },
    ),
    (ANTH, "stream", {"stream": True}, {CHAT: Mapped("stream", True), RESP: Mapped("stream", True)}),
    (
        ANTH,
        "temperature",
        {"temperature": 0.5},
        {
            CHAT: Mapped("temperature", 0.5),
            RESP: Mapped("temperature", 0.5),
            GEM: Mapped("generationConfig.temperature", 0.5),
        },
    ),
    (
        ANTH,
        "top_p",
        {"top_p": 0.9},
        {CHAT: Mapped("top_p", 0.9), RESP: Mapped("top_p", 0.9), GEM: Mapped("generationConfig.topP", 0.9)},
    ),
    (
        ANTH,
        "top_k",
        {"top_k": 40},
        {CHAT: Mapped("top_k", 40), RESP: Dropped("top_k"), GEM: Mapped("generationConfig.topK", 40)},
    ),
    (
        ANTH,
        "metadata.user_id",
        {"metadata": {"user_id": "u1"}},
        {CHAT: Mapped("user", "u1"), RESP: Mapped("metadata.user_id", "u1"), GEM: Dropped("metadata.user_id")},
    ),
    (
        ANTH,
        "tools",
        {"tools": [TOOL_A]},
        {
            CHAT: Mapped("tools[0].function.name", "f"),
            RESP: Mapped("tools[0].name", "f"),
            GEM: Mapped("tools[0].functionDeclarations[0].name", "f"),
        },
    ),
    (
        ANTH,
        "tools[].cache_control",
        {"tools": [{**TOOL_A, "cache_control": {"type": "ephemeral"}}]},
        {
            CHAT: Dropped("tools.cache_control"),
            RESP: Dropped("tools.cache_control"),
            GEM: Dropped("tools.cache_control"),
        },
    ),
    (
        ANTH,
        "tools (server tools: web_search_20250305, bash_20250124 ...)",
        {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]},
        {
            CHAT: Dropped("tools.web_search_20250305"),
            RESP: Dropped("tools.web_search_20250305"),
            GEM: Dropped("tools.web_search_20250305"),
        },
    ),
    (
        ANTH,
        "tool_choice",
        {"tools": [TOOL_A], "tool_choice": {"type": "any"}},
        {
            CHAT: Mapped("tool_choice", "required"),
            RESP: Mapped("tool_choice", "required"),
            GEM: Mapped("toolConfig.functionCallingConfig.mode", "ANY"),
        },
    ),
    (
        ANTH,
        "tool_choice.disable_parallel_tool_use",
        {"tools": [TOOL_A], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
        {
            CHAT: Mapped("parallel_tool_calls", False),
            RESP: Mapped("parallel_tool_calls", False),
            GEM: Dropped("parallel_tool_calls"),
        },
    ),
    (
        ANTH,
        "messages tool_use / tool_result",
        {"messages": CALL_TURN_A, "tools": [TOOL_A]},
        {
            CHAT: Mapped("messages[2].tool_call_id", "t1"),
            RESP: Mapped("input[2].call_id", "t1"),
            GEM: Mapped("contents[2].parts[0].functionResponse.name", "f"),
        },
    ),
    (
        ANTH,
        "thinking (enabled, budget_tokens)",
        {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2000}},
        {
            CHAT: Mapped("reasoning_effort", "low"),
            RESP: Mapped("reasoning.effort", "low"),
            GEM: Mapped("generationConfig.thinkingConfig.thinkingBudget", 2000),
        },
    ),
    (
        ANTH,
        "thinking (adaptive)",
        {"thinking": {"type": "adaptive"}},
        {GEM: Mapped("generationConfig.thinkingConfig.thinkingBudget", -1)},
    ),
    (
        ANTH,
        "thinking (disabled)",
        {"thinking": {"type": "disabled"}},
        {
            CHAT: Mapped("reasoning_effort", "none"),
            RESP: Mapped("reasoning.effort", "none"),
            GEM: Mapped("generationConfig.thinkingConfig.thinkingBudget", 0),
        },
    ),
    (
        ANTH,
        "output_config.effort",
        {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}},
        {
            CHAT: Mapped("reasoning_effort", "xhigh"),
            RESP: Mapped("reasoning.effort", "xhigh"),
            GEM: Mapped("generationConfig.thinkingConfig.thinkingLevel", "HIGH"),
        },
    ),
    (
        ANTH,
        "output_config.format",
        {"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        {
            CHAT: Mapped("response_format.json_schema.schema", SCHEMA),
            RESP: Mapped("text.format.schema", SCHEMA),
            GEM: Mapped("generationConfig.responseJsonSchema", SCHEMA),
        },
    ),
    (
        ANTH,
        "output_format (beta, deprecated)",
        {"output_format": {"type": "json_schema", "schema": SCHEMA}},
        {
            CHAT: Mapped("response_format.type", "json_schema"),
            RESP: Mapped("text.format.type", "json_schema"),
            GEM: Mapped("generationConfig.responseJsonSchema", SCHEMA),
        },
    ),
    (
        ANTH,
        "service_tier",
        {"service_tier": "standard_only"},
        {
            CHAT: Mapped("service_tier", "default"),
            RESP: Mapped("service_tier", "default"),
            GEM: Dropped("service_tier"),
        },
    ),
    (
        ANTH,
        "context_management",
        {"context_management": {"edits": [{"type": "clear_thinking_20251015"}]}},
        {CHAT: Dropped("context_management"), RESP: Dropped("context_management"), GEM: Dropped("context_management")},
    ),
    (
        ANTH,
        "container",
        {"container": "cntr_1"},
        {CHAT: Dropped("container"), RESP: Dropped("container"), GEM: Dropped("container")},
    ),
    (
        ANTH,
        "mcp_servers",
        {"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]},
        {CHAT: Dropped("mcp_servers"), RESP: Dropped("mcp_servers"), GEM: Dropped("mcp_servers")},
    ),
    (
        ANTH,
        "inference_geo",
        {"inference_geo": "us"},
        {CHAT: Dropped("inference_geo"), RESP: Dropped("inference_geo"), GEM: Dropped("inference_geo")},
    ),
    (
        ANTH,
        "cache_control (top level)",
        {"cache_control": {"type": "ephemeral"}},
        {CHAT: Dropped("cache_control"), RESP: Dropped("cache_control"), GEM: Dropped("cache_control")},
    ),
    (ANTH, "speed", {"speed": "fast"}, {CHAT: Dropped("speed"), RESP: Dropped("speed"), GEM: Dropped("speed")}),
    # ------------------------------------------------------------------ openai-chat
    (CHAT, "model", {"model": "gpt-x"}, {ANTH: Mapped("model", "gpt-x"), RESP: Mapped("model", "gpt-x")}),
    (
        CHAT,
        "messages role system / developer",
        {"messages": [{"role": "developer", "content": "dev"}, {"role": "system", "content": "sys"}, USER]},
        {
            ANTH: Mapped("system", "dev\n\nsys"),
            RESP: Mapped("instructions", "dev\n\nsys"),
            GEM: Mapped("systemInstruction.parts[1].text", "sys"),
        },
    ),
    (
        CHAT,
        "messages role user / assistant",
        {"messages": [USER, {"role": "assistant", "content": "yo"}, USER]},
        {
            ANTH: Mapped("messages[1].role", "assistant"),
            RESP: Mapped("input[1].role", "assistant"),
            GEM: Mapped("contents[1].role", "model"),
        },
    ),
    (
        CHAT,
        "messages role tool (and assistant tool_calls)",
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ]
        },
        {
            ANTH: Mapped("messages[2].content[0].tool_use_id", "c1"),
            RESP: Mapped("input[2].call_id", "c1"),
            GEM: Mapped("contents[2].parts[0].functionResponse.name", "f"),
        },
    ),
    (
        CHAT,
        "max_completion_tokens",
        {"max_completion_tokens": 55},
        {
            ANTH: Mapped("max_tokens", 55),
            RESP: Mapped("max_output_tokens", 55),
            GEM: Mapped("generationConfig.maxOutputTokens", 55),
        },
    ),
    (
        CHAT,
        "max_tokens (deprecated)",
        {"max_tokens": 55},
        {ANTH: Mapped("max_tokens", 55), RESP: Mapped("max_output_tokens", 55)},
    ),
    (
        CHAT,
        "temperature",
        {"temperature": 0.3},
        {
            ANTH: Mapped("temperature", 0.3),
            RESP: Mapped("temperature", 0.3),
            GEM: Mapped("generationConfig.temperature", 0.3),
        },
    ),
    (CHAT, "top_p", {"top_p": 0.8}, {ANTH: Mapped("top_p", 0.8), GEM: Mapped("generationConfig.topP", 0.8)}),
    (
        CHAT,
        "stop",
        {"stop": ["X"]},
        {
            ANTH: Mapped("stop_sequences", ["X"]),
            RESP: Dropped("stop"),
            GEM: Mapped("generationConfig.stopSequences", ["X"]),
        },
    ),
    (
        CHAT,
        "seed",
        {"seed": 7},
        {ANTH: Dropped("seed"), RESP: Dropped("seed"), GEM: Mapped("generationConfig.seed", 7)},
    ),
    (
        CHAT,
        "presence_penalty",
        {"presence_penalty": 0.5},
        {
            ANTH: Dropped("presence_penalty"),
            RESP: Dropped("presence_penalty"),
            GEM: Mapped("generationConfig.presencePenalty", 0.5),
        },
    ),
    (
        CHAT,
        "frequency_penalty",
        {"frequency_penalty": 0.5},
        {
            ANTH: Dropped("frequency_penalty"),
            RESP: Dropped("frequency_penalty"),
            GEM: Mapped("generationConfig.frequencyPenalty", 0.5),
        },
    ),
    (
        CHAT,
        "messages content input_audio",
        {
            "messages": [
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}]}
            ]
        },
        {ANTH: Dropped("messages.input_audio"), GEM: Mapped("contents[0].parts[0].inlineData.mimeType", "audio/wav")},
    ),
    (
        CHAT,
        "response_format (json_object)",
        {"response_format": {"type": "json_object"}},
        {
            ANTH: Dropped("response_format"),
            RESP: Mapped("text.format.type", "json_object"),
            GEM: Mapped("generationConfig.responseMimeType", "application/json"),
        },
    ),
    (CHAT, "n", {"n": 2}, {ANTH: Dropped("n"), RESP: Dropped("n"), GEM: Mapped("generationConfig.candidateCount", 2)}),
    (
        CHAT,
        "tools",
        {"tools": [TOOL_CHAT]},
        {
            ANTH: Mapped("tools[0].name", "f"),
            RESP: Mapped("tools[0].name", "f"),
            GEM: Mapped("tools[0].functionDeclarations[0].name", "f"),
        },
    ),
    (
        CHAT,
        "tool_choice",
        {"tools": [TOOL_CHAT], "tool_choice": {"type": "function", "function": {"name": "f"}}},
        {
            ANTH: Mapped("tool_choice", {"type": "tool", "name": "f"}),
            RESP: Mapped("tool_choice.name", "f"),
            GEM: Mapped("toolConfig.functionCallingConfig.allowedFunctionNames", ["f"]),
        },
    ),
    (
        CHAT,
        "parallel_tool_calls",
        {"tools": [TOOL_CHAT], "parallel_tool_calls": False},
        {
            ANTH: Mapped("tool_choice.disable_parallel_tool_use", True),
            RESP: Mapped("parallel_tool_calls", False),
            GEM: Dropped("parallel_tool_calls"),
        },
    ),
    (
        CHAT,
        "response_format",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}},
        {
            ANTH: Mapped("output_config.format.schema", SCHEMA),
            RESP: Mapped("text.format.schema", SCHEMA),
            GEM: Mapped("generationConfig.responseJsonSchema", SCHEMA),
        },
    ),
    (
        CHAT,
        "reasoning_effort",
        {"reasoning_effort": "high"},
        {
            ANTH: Mapped("thinking.budget_tokens", 16384),
            RESP: Mapped("reasoning.effort", "high"),
            GEM: Mapped("generationConfig.thinkingConfig.thinkingLevel", "HIGH"),
        },
    ),
    (
        CHAT,
        "service_tier",
        {"service_tier": "priority"},
        {ANTH: Mapped("service_tier", "auto"), RESP: Mapped("service_tier", "priority"), GEM: Dropped("service_tier")},
    ),
    (
        CHAT,
        "user",
        {"user": "u9"},
        {ANTH: Mapped("metadata.user_id", "u9"), RESP: Mapped("metadata.user_id", "u9"), GEM: Dropped("user")},
    ),
    (
        CHAT,
        "metadata",
        {"metadata": {"k": "v"}},
        {RESP: Mapped("metadata.k", "v"), ANTH: Dropped("metadata.k"), GEM: Dropped("metadata.k")},
    ),
    (CHAT, "store", {"store": True}, {ANTH: Dropped("store"), RESP: Mapped("store", True), GEM: Dropped("store")}),
    (CHAT, "logprobs", {"logprobs": True}, {ANTH: Dropped("logprobs"), RESP: Dropped("logprobs")}),
    (CHAT, "logit_bias", {"logit_bias": {"1": 5}}, {ANTH: Dropped("logit_bias"), GEM: Dropped("logit_bias")}),
    (CHAT, "modalities / audio", {"modalities": ["text"]}, {ANTH: Dropped("modalities"), GEM: Dropped("modalities")}),
    (CHAT, "prediction", {"prediction": {"type": "content", "content": "x"}}, {ANTH: Dropped("prediction")}),
    (
        CHAT,
        "prompt_cache_key",
        {"prompt_cache_key": "k"},
        {ANTH: Dropped("prompt_cache_key"), RESP: Mapped("prompt_cache_key", "k"), GEM: Dropped("prompt_cache_key")},
    ),
    (
        CHAT,
        "safety_identifier",
        {"safety_identifier": "s"},
        {ANTH: Dropped("safety_identifier"), RESP: Mapped("safety_identifier", "s")},
    ),
    (
        CHAT,
        "verbosity",
        {"verbosity": "low"},
        {ANTH: Dropped("verbosity"), RESP: Mapped("text.verbosity", "low"), GEM: Dropped("verbosity")},
    ),
    (CHAT, "web_search_options", {"web_search_options": {}}, {ANTH: Dropped("web_search_options")}),
    (
        CHAT,
        "stream / stream_options",
        {"stream": True, "stream_options": {"include_usage": True}},
        {ANTH: Mapped("stream", True), RESP: Mapped("stream", True)},
    ),
    # ------------------------------------------------------------------ openai-responses
    (RESP, "model", {"model": "gpt-x"}, {ANTH: Mapped("model", "gpt-x"), CHAT: Mapped("model", "gpt-x")}),
    (
        RESP,
        "instructions",
        {"instructions": "sys"},
        {
            ANTH: Mapped("system", "sys"),
            CHAT: Mapped("messages[0].content", "sys"),
            GEM: Mapped("systemInstruction.parts[0].text", "sys"),
        },
    ),
    (
        RESP,
        "input (roles user, assistant, system, developer)",
        {
            "input": [
                {"role": "developer", "content": "dev"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "more"},
            ]
        },
        {
            ANTH: Mapped("system", "dev"),
            CHAT: Mapped("messages[2].role", "assistant"),
            GEM: Mapped("contents[1].role", "model"),
        },
    ),
    (
        RESP,
        "input function_call / function_call_output",
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
            "tools": [TOOL_RESP],
        },
        {
            ANTH: Mapped("messages[2].content[0].tool_use_id", "c1"),
            CHAT: Mapped("messages[2].tool_call_id", "c1"),
            GEM: Mapped("contents[2].parts[0].functionResponse.name", "f"),
        },
    ),
    (
        RESP,
        "max_output_tokens",
        {"max_output_tokens": 99},
        {
            ANTH: Mapped("max_tokens", 99),
            CHAT: Mapped("max_completion_tokens", 99),
            GEM: Mapped("generationConfig.maxOutputTokens", 99),
        },
    ),
    (RESP, "temperature", {"temperature": 0.2}, {ANTH: Mapped("temperature", 0.2), CHAT: Mapped("temperature", 0.2)}),
    (RESP, "top_p", {"top_p": 0.7}, {ANTH: Mapped("top_p", 0.7), GEM: Mapped("generationConfig.topP", 0.7)}),
    (
        RESP,
        "tools (function)",
        {"tools": [TOOL_RESP]},
        {
            ANTH: Mapped("tools[0].name", "f"),
            CHAT: Mapped("tools[0].function.name", "f"),
            GEM: Mapped("tools[0].functionDeclarations[0].name", "f"),
        },
    ),
    (
        RESP,
        "tools (built-in: web_search, file_search, code_interpreter, image_generation, local_shell ...)",
        {"tools": [{"type": "web_search"}]},
        {ANTH: Dropped("tools.web_search"), CHAT: Dropped("tools.web_search"), GEM: Dropped("tools.web_search")},
    ),
    (
        RESP,
        "tool_choice",
        {"tools": [TOOL_RESP], "tool_choice": "required"},
        {
            ANTH: Mapped("tool_choice.type", "any"),
            CHAT: Mapped("tool_choice", "required"),
            GEM: Mapped("toolConfig.functionCallingConfig.mode", "ANY"),
        },
    ),
    (
        RESP,
        "parallel_tool_calls",
        {"tools": [TOOL_RESP], "parallel_tool_calls": False},
        {
            ANTH: Mapped("tool_choice.disable_parallel_tool_use", True),
            CHAT: Mapped("parallel_tool_calls", False),
            GEM: Dropped("parallel_tool_calls"),
        },
    ),
    (
        RESP,
        "reasoning.effort",
        {"reasoning": {"effort": "low"}},
        {
            ANTH: Mapped("thinking.budget_tokens", 2048),
            CHAT: Mapped("reasoning_effort", "low"),
            GEM: Mapped("generationConfig.thinkingConfig.thinkingLevel", "LOW"),
        },
    ),
    (
        RESP,
        "reasoning.summary",
        {"reasoning": {"effort": "medium", "summary": "auto"}},
        {ANTH: Dropped("reasoning"), CHAT: Dropped("reasoning"), GEM: Dropped("reasoning")},
    ),
    (
        RESP,
        "text.format",
        {"text": {"format": {"type": "json_schema", "name": "r", "schema": SCHEMA}}},
        {
            ANTH: Mapped("output_config.format.schema", SCHEMA),
            CHAT: Mapped("response_format.json_schema.schema", SCHEMA),
            GEM: Mapped("generationConfig.responseJsonSchema", SCHEMA),
        },
    ),
    (
        RESP,
        "text.verbosity",
        {"text": {"verbosity": "low"}},
        {ANTH: Dropped("text"), CHAT: Mapped("verbosity", "low"), GEM: Dropped("text")},
    ),
    (
        RESP,
        "metadata",
        {"metadata": {"user_id": "u"}},
        {ANTH: Mapped("metadata.user_id", "u"), CHAT: Mapped("user", "u"), GEM: Dropped("metadata.user_id")},
    ),
    (
        RESP,
        "service_tier",
        {"service_tier": "flex"},
        {
            ANTH: Mapped("service_tier", "standard_only"),
            CHAT: Mapped("service_tier", "flex"),
            GEM: Dropped("service_tier"),
        },
    ),
    (RESP, "store", {"store": False}, {ANTH: Dropped("store"), CHAT: Mapped("store", False), GEM: Dropped("store")}),
    (
        RESP,
        "include",
        {"include": ["reasoning.encrypted_content"]},
        {ANTH: Dropped("include"), CHAT: Dropped("include")},
    ),
    (
        RESP,
        "previous_response_id",
        {"previous_response_id": "resp_1"},
        {
            ANTH: Dropped("previous_response_id"),
            CHAT: Dropped("previous_response_id"),
            GEM: Dropped("previous_response_id"),
        },
    ),
    (RESP, "conversation", {"conversation": "conv_1"}, {ANTH: Dropped("conversation")}),
    (
        RESP,
        "prompt_cache_key",
        {"prompt_cache_key": "k"},
        {ANTH: Dropped("prompt_cache_key"), CHAT: Mapped("prompt_cache_key", "k"), GEM: Dropped("prompt_cache_key")},
    ),
    (RESP, "truncation", {"truncation": "auto"}, {ANTH: Dropped("truncation"), CHAT: Dropped("truncation")}),
    (RESP, "background", {"background": False}, {ANTH: Dropped("background")}),
    (RESP, "max_tool_calls", {"max_tool_calls": 3}, {ANTH: Dropped("max_tool_calls"), CHAT: Dropped("max_tool_calls")}),
    (
        RESP,
        "safety_identifier / user",
        {"safety_identifier": "s"},
        {ANTH: Dropped("safety_identifier"), CHAT: Mapped("safety_identifier", "s")},
    ),
    (RESP, "top_logprobs", {"top_logprobs": 2}, {ANTH: Dropped("top_logprobs")}),
    (RESP, "stream", {"stream": True}, {ANTH: Mapped("stream", True), CHAT: Mapped("stream", True)}),
    # ------------------------------------------------------------------ gemini
    (
        GEM,
        "contents (roles user, model)",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"text": "yo"}]},
                {"role": "user", "parts": [{"text": "more"}]},
            ]
        },
        {
            ANTH: Mapped("messages[1].role", "assistant"),
            CHAT: Mapped("messages[1].role", "assistant"),
            RESP: Mapped("input[1].role", "assistant"),
        },
    ),
    (
        GEM,
        "systemInstruction",
        {"systemInstruction": {"parts": [{"text": "a"}, {"text": "b"}]}},
        {
            ANTH: Mapped("system", "a\n\nb"),
            CHAT: Mapped("messages[0].content[1].text", "b"),
            RESP: Mapped("instructions", "a\n\nb"),
        },
    ),
    (
        GEM,
        "functionCall / functionResponse parts",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "ok"}}}]},
            ],
            "tools": [TOOL_GEM],
        },
        {
            ANTH: Mapped("messages[1].content[0].name", "f"),
            CHAT: Mapped("messages[2].role", "tool"),
            RESP: Mapped("input[2].type", "function_call_output"),
        },
    ),
    (
        GEM,
        "inlineData / fileData parts",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "see"}, {"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}
            ]
        },
        {
            ANTH: Mapped("messages[0].content[1].type", "image"),
            CHAT: Mapped("messages[0].content[1].type", "image_url"),
            RESP: Mapped("input[0].content[1].type", "input_image"),
        },
    ),
    (
        GEM,
        "tools (functionDeclarations)",
        {"tools": [TOOL_GEM]},
        {
            ANTH: Mapped("tools[0].name", "f"),
            CHAT: Mapped("tools[0].function.name", "f"),
            RESP: Mapped("tools[0].name", "f"),
        },
    ),
    (
        GEM,
        "tools (googleSearch, codeExecution, urlContext ...)",
        {"tools": [{"googleSearch": {}}]},
        {ANTH: Dropped("tools.googleSearch"), CHAT: Dropped("tools.googleSearch"), RESP: Dropped("tools.googleSearch")},
    ),
    (
        GEM,
        "toolConfig.functionCallingConfig",
        {"tools": [TOOL_GEM], "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}},
        {
            ANTH: Mapped("tool_choice.type", "any"),
            CHAT: Mapped("tool_choice", "required"),
            RESP: Mapped("tool_choice", "required"),
        },
    ),
    (
        GEM,
        "generationConfig.maxOutputTokens",
        {"generationConfig": {"maxOutputTokens": 42}},
        {
            ANTH: Mapped("max_tokens", 42),
            CHAT: Mapped("max_completion_tokens", 42),
            RESP: Mapped("max_output_tokens", 42),
        },
    ),
    (
        GEM,
        "generationConfig.temperature / topP",
        {"generationConfig": {"temperature": 0.1, "topP": 0.5}},
        {ANTH: Mapped("top_p", 0.5), CHAT: Mapped("temperature", 0.1), RESP: Mapped("top_p", 0.5)},
    ),
    (
        GEM,
        "generationConfig.topK",
        {"generationConfig": {"topK": 9}},
        {ANTH: Mapped("top_k", 9), CHAT: Mapped("top_k", 9), RESP: Dropped("generationConfig.topK")},
    ),
    (
        GEM,
        "generationConfig.stopSequences",
        {"generationConfig": {"stopSequences": ["Z"]}},
        {
            ANTH: Mapped("stop_sequences", ["Z"]),
            CHAT: Mapped("stop", ["Z"]),
            RESP: Dropped("generationConfig.stopSequences"),
        },
    ),
    (
        GEM,
        "generationConfig.seed",
        {"generationConfig": {"seed": 3}},
        {ANTH: Dropped("generationConfig.seed"), CHAT: Mapped("seed", 3), RESP: Dropped("generationConfig.seed")},
    ),
    (
        GEM,
        "generationConfig.presencePenalty / frequencyPenalty",
        {"generationConfig": {"presencePenalty": 0.1}},
        {ANTH: Dropped("generationConfig.presencePenalty"), CHAT: Mapped("presence_penalty", 0.1)},
    ),
    (
        GEM,
        "generationConfig.candidateCount",
        {"generationConfig": {"candidateCount": 2}},
        {ANTH: Dropped("generationConfig.candidateCount"), CHAT: Mapped("n", 2)},
    ),
    (
        GEM,
        "generationConfig.responseMimeType / responseJsonSchema / responseSchema",
        {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA}},
        {
            ANTH: Mapped("output_config.format.schema", SCHEMA),
            CHAT: Mapped("response_format.json_schema.schema", SCHEMA),
            RESP: Mapped("text.format.schema", SCHEMA),
        },
    ),
    (
        GEM,
        "generationConfig.thinkingConfig.thinkingBudget",
        {"generationConfig": {"maxOutputTokens": 8000, "thinkingConfig": {"thinkingBudget": 4000}}},
        {
            ANTH: Mapped("thinking.budget_tokens", 4000),
            CHAT: Mapped("reasoning_effort", "medium"),
            RESP: Mapped("reasoning.effort", "medium"),
        },
    ),
    (
        GEM,
        "generationConfig.thinkingConfig.thinkingLevel",
        {"generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW"}}},
        {
            ANTH: Mapped("output_config.effort", "low"),
            CHAT: Mapped("reasoning_effort", "low"),
            RESP: Mapped("reasoning.effort", "low"),
        },
    ),
    (
        GEM,
        "generationConfig.thinkingConfig.includeThoughts",
        {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
        {ANTH: Mapped("thinking.type", "adaptive")},
    ),
    (
        GEM,
        "generationConfig (other: responseModalities, speechConfig, imageConfig, mediaResolution ...)",
        {"generationConfig": {"responseModalities": ["TEXT"]}},
        {ANTH: Dropped("generationConfig.responseModalities"), CHAT: Dropped("generationConfig.responseModalities")},
    ),
    (
        GEM,
        "safetySettings",
        {"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]},
        {ANTH: Dropped("safetySettings"), CHAT: Dropped("safetySettings"), RESP: Dropped("safetySettings")},
    ),
    (
        GEM,
        "cachedContent",
        {"cachedContent": "cachedContents/1"},
        {ANTH: Dropped("cachedContent"), CHAT: Dropped("cachedContent")},
    ),
    (GEM, "labels", {"labels": {"a": "b"}}, {ANTH: Dropped("labels")}),
]


def request_body(dialect: str, fragment: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(BASE[dialect]), **copy.deepcopy(fragment)}


def row_id(row: tuple) -> str:
    return f"{row[0]}:{row[1]}"


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_carried_to_the_same_dialect(row):
    dialect, _, fragment, _ = row
    body = request_body(dialect, fragment)
    module = dialects.get(dialect)
    again = module.encode_request(module.decode_request(copy.deepcopy(body)))
    for key in fragment:  # every field the row sets comes back as it came
        if dialect == "gemini" and key == "model":
            continue
        assert again.get(key) == body[key], key
    assert dropped_fields(module.decode_request(body), dialect, dialect) == []


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_mapped_or_dropped_for_every_other_dialect(row):
    dialect, _, fragment, expectations = row
    request = dialects.get(dialect).decode_request(request_body(dialect, fragment))
    for target, expect in expectations.items():
        out = dialects.get(target).encode_request(copy.deepcopy(request))
        dropped = dropped_fields(request, dialect, target)
        if isinstance(expect, Mapped):
            value = at(out, expect.path)
            if expect.value is not _ANY:
                assert value == expect.value, (target, expect.path)
        else:
            assert expect.name in dropped, (target, dropped)
    for target in SERVED:  # a dialect nobody listed maps it or drops it, but never loses it silently
        if target != dialect and target not in expectations:
            dialects.get(target).encode_request(copy.deepcopy(request))


def doc_rows(dialect: str) -> list[str]:
    """The first cells of the "Request fields" table of the dialect's doc page."""
    text = DOC_FILE[dialect].read_text()
    section = text.split("## Request fields", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    return [c.strip("`") for c in cells[1:]]  # after the header row


@pytest.mark.parametrize("dialect", SERVED)
def test_the_docs_table_lists_every_row(dialect):
    documented = doc_rows(dialect)
    tested = [row[1] for row in ROWS if row[0] == dialect]
    assert documented == tested


def test_text_parts_report_only_their_extensions():
    """dropped_fields passes over a text part without extensions (its fast branch) and reports
    another namespace's keys of one that has them, as _part_fields does for any part."""
    from llmbridge import hub
    from llmbridge.dialects import fields

    extensions = [None, {}, {"anthropic-messages": {"cache_control": {"type": "ephemeral"}}}, {"gemini": {"x": 1}}]
    for ext in extensions:
        for role in ("user", "system"):
            request = hub.Request(model="m", messages=[hub.Message(role, [hub.TextPart("hi", ext)])])
            for source, target in (("anthropic-messages", "openai-chat"), ("openai-chat", "gemini")):
                want: set[str] = set()
                fields._part_fields(
                    request.messages[0].parts[0], "system" if role == "system" else "messages", target, want
                )
                assert dropped_fields(request, source, target) == sorted(want)
