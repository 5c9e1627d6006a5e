"""Accept all that the vendor accepts (issue 22): a Claude Code 2.1 request decodes, goes back to an
Anthropic upstream as it came, and translates to the other served dialects."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from llmbridge import dialects

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
