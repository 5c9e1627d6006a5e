"""Accept all that the vendor accepts (issue 22): a Claude Code 2.1 request decodes, goes back to an
Anthropic upstream as it came, and translates to the other served dialects."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from llmbridge import dialects
from llmbridge.dialects.fields import dropped_fields

DATA = Path(__file__).parent / "data" / "requests"
CLAUDE_CODE = json.loads((DATA / "claude-code-2.1-first-request.json").read_text())
AM = dialects.get("anthropic-messages")


def claude_code_body() -> dict:
    return copy.deepcopy(CLAUDE_CODE["body"])


def second_turn() -> dict:
    """The first request plus a tool loop turn: signed thinking, a tool call, its results."""
    body = claude_code_body()
    body["messages"] += [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should list the files.", "signature": "EqQBCkYIBxgCKkBs"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {"file_path": "/tmp/work/README.md"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "README.md", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01B",
                    "content": [{"type": "text", "text": "     1\t# Demo\n"}],
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
        {"role": "user", "content": "Thanks, now summarise."},
    ]
    return body


@pytest.mark.parametrize("make", [claude_code_body, second_turn], ids=["first", "second"])
def test_claude_code_request_goes_back_to_anthropic_as_it_came(make):
    body = make()
    request = AM.decode_request(body)
    again = AM.encode_request(request)
    assert again == body
    assert list(again) == list(body)  # the same keys in the same order, so the same bytes
    assert json.dumps(again) == json.dumps(body)


def test_claude_code_request_decodes_to_the_hub():
    request = AM.decode_request(claude_code_body())
    assert [m.role for m in request.messages] == ["system", "user", "system"]
    assert len(request.tools) == 24 and all(t.parameters["type"] == "object" for t in request.tools)
    assert request.thinking == {"type": "adaptive", "effort": "high"}
    assert request.metadata["user_id"].startswith("user_")
    assert request.extensions["anthropic-messages:context_management"]["edits"][0]["keep"] == "all"
    assert request.max_tokens == 32000 and request.stream


def translated(target: str) -> tuple[dict, list[str]]:
    request = AM.decode_request(claude_code_body())
    return dialects.get(target).encode_request(request), dropped_fields(request, "anthropic-messages", target)


CACHE_MARKS = {"system.cache_control", "messages.cache_control", "tools.cache_control"}


def test_claude_code_request_translates_to_chat():
    body, dropped = translated("openai-chat")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "system"]  # the later system message stays in its place
    assert [p["text"] for p in body["messages"][0]["content"]][
        1
    ] == "You are Claude Code, Anthropic's official CLI for Claude."
    assert body["messages"][2]["content"].startswith("gitStatus:")
    assert [t["function"]["name"] for t in body["tools"]][:3] == ["Task", "TaskOutput", "Bash"]
    assert len(body["tools"]) == 24 and body["reasoning_effort"] == "high"
    assert body["max_completion_tokens"] == 32000 and body["user"].startswith("user_")
    assert set(dropped) == {"context_management"} | CACHE_MARKS


def test_claude_code_request_translates_to_responses():
    body, dropped = translated("openai-responses")
    assert body["instructions"].startswith("x-anthropic-billing-header")
    assert "sdk-cli\n\nYou are Claude Code" in body["instructions"]  # blocks are not glued together
    assert [(i["type"], i["role"]) for i in body["input"]] == [("message", "user"), ("message", "developer")]
    assert len(body["tools"]) == 24 and all(t["type"] == "function" for t in body["tools"])
    assert body["reasoning"] == {"effort": "high"} and body["max_output_tokens"] == 32000
    assert set(dropped) == {"context_management"} | CACHE_MARKS


def test_claude_code_request_translates_to_gemini():
    body, dropped = translated("gemini")
    system = [p["text"] for p in body["systemInstruction"]["parts"]]
    assert len(system) == 4 and system[-1].startswith("gitStatus:")  # merged into the one system prompt, in order
    assert [c["role"] for c in body["contents"]] == ["user"]
    assert len(body["tools"][0]["functionDeclarations"]) == 24
    assert body["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "HIGH", "includeThoughts": True}
    assert set(dropped) == {"context_management", "metadata.user_id"} | CACHE_MARKS


def test_claude_code_second_turn_translates_everywhere():
    request = AM.decode_request(second_turn())
    chat = dialects.get("openai-chat").encode_request(request)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "system", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in chat["messages"][3]["tool_calls"]] == ["toolu_01A", "toolu_01B"]
    responses = dialects.get("openai-responses").encode_request(request)
    kinds = [i["type"] for i in responses["input"]]
    assert kinds.count("function_call") == 2 and kinds.count("function_call_output") == 2
    gemini = dialects.get("gemini").encode_request(request)
    responses_parts = [p for c in gemini["contents"] for p in c["parts"] if "functionResponse" in p]
    assert [p["functionResponse"]["name"] for p in responses_parts] == ["Bash", "Read"]


LENIENT = [
    (
        "anthropic-messages",
        {
            "model": "m",
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": "find it"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
                        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                        {"type": "container_upload", "file_id": "file_1"},
                    ],
                },
                {"role": "user", "content": [{"type": "search_result", "source": "s", "title": "t", "content": []}]},
            ],
            "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
                {"type": "bash_20250124", "name": "bash"},
                {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
                {"type": "code_execution_20250825", "name": "code_execution"},
                {"type": "memory_20250818", "name": "memory"},
            ],
        },
    ),
    (
        "openai-responses",
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "go"},
                {"type": "item_reference", "id": "msg_1"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
                {"type": "local_shell_call", "id": "lsh_1", "call_id": "c1", "status": "completed", "action": {}},
                {"type": "local_shell_call_output", "id": "lsh_1", "output": "ok"},
            ],
            "tools": [
                {"type": "web_search"},
                {"type": "file_search", "vector_store_ids": ["vs_1"]},
                {"type": "code_interpreter", "container": {"type": "auto"}},
                {"type": "image_generation"},
                {"type": "local_shell"},
                {"type": "mcp", "server_label": "x", "server_url": "https://x"},
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "x"},
                },
            ],
        },
    ),
    (
        "gemini",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "run"}]},
                {
                    "role": "model",
                    "parts": [
                        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
                        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}},
                        {"functionCall": {"name": "f", "args": {}}},
                    ],
                },
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"x": 1}}}]},
            ],
            "tools": [{"googleSearch": {}}, {"codeExecution": {}}, {"urlContext": {}}],
        },
    ),
]


@pytest.mark.parametrize(("dialect", "body"), LENIENT, ids=[d for d, _ in LENIENT])
def test_what_the_vendor_accepts_decodes_and_goes_everywhere(dialect, body):
    """Server tools, built-in tools, native blocks and items: never refused; carried to the same
    dialect, left out (and reported) for the others."""
    module = dialects.get(dialect)
    request = module.decode_request(copy.deepcopy(body))
    again = module.encode_request(request)
    for key in body:
        if key != "model" or dialect != "gemini":
            assert again[key] == body[key], key
    for target in ("openai-chat", "openai-responses", "anthropic-messages", "gemini"):
        if target != dialect:
            dialects.get(target).encode_request(copy.deepcopy(request))
            assert any(name.startswith("tools.") for name in dropped_fields(request, dialect, target))


def test_later_system_messages_of_another_dialect_join_the_one_system_prompt_in_order():
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "first"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {"role": "developer", "content": "second"},
            {"role": "user", "content": "more"},
        ],
    }
    request = dialects.get("openai-chat").decode_request(chat)
    anthropic = AM.encode_request(request)
    assert anthropic["system"] == "first\n\nsecond"
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]
    gemini = dialects.get("gemini").encode_request(request)
    assert [p["text"] for p in gemini["systemInstruction"]["parts"]] == ["first", "second"]
    responses = dialects.get("openai-responses").encode_request(request)
    assert responses["instructions"] == "first" and responses["input"][2]["role"] == "developer"  # in place


SAME_DIALECT = {
    "openai-chat": {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s"}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "x", "refusal": None, "annotations": []},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "user", "content": "q", "name": "bob"},
        ],
    },
    "openai-responses": {
        "model": "m",
        "instructions": "sys",
        "input": [
            {"role": "developer", "content": "dev"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "EEE"},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "c1",
                "name": "f",
                "arguments": "{}",
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "x", "annotations": []}],
            },
            {"role": "user", "content": "more"},
        ],
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f", "parameters": {"type": "object"}}],
    },
    "gemini": {
        "systemInstruction": {"parts": [{"text": "s1"}, {"text": "s2"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "a"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2ln"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"result": "ok"}}}]},
        ],
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW"}},
    },
}


@pytest.mark.parametrize("dialect", SAME_DIALECT)
def test_a_conversation_goes_back_to_its_own_dialect_as_it_came(dialect):
    """Message spelling (block or string content, roles, item ids and status, system parts,
    call ids the client did not send) survives decode -> encode for every served dialect."""
    body = SAME_DIALECT[dialect]
    module = dialects.get(dialect)
    again = module.encode_request(module.decode_request(copy.deepcopy(body)))
    assert {k: again[k] for k in body} == body
