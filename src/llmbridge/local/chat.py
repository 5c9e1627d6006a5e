"""A hub request as the model's prompt, through the chat template the GGUF carries.

SmolLM2 speaks ChatML (``<|im_start|>role\\n...<|im_end|>``).  The template only
knows roles and text, so tools travel as text in the Hermes/Qwen convention that
small instruct models have seen most:

* the tool list goes at the end of the system prompt inside ``<tools>...</tools>``,
  one JSON object per line, with how to call one;
* an assistant tool call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
* a tool result is a ``user`` turn ``<tool_response>\\n...\\n</tool_response>``.

Thinking parts of earlier turns are dropped (the model does not think); images,
files and vendor-native parts are refused with a 400 rather than dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from .. import hub
from ..errors import UpstreamError

__all__ = [
    "ARGUMENTS_PREFIX",
    "CALL_PREFIX",
    "CHATML",
    "ChatTemplate",
    "DEFAULT_SYSTEM",
    "TOOLS_INTRO",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "tool_call_text",
]

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
# What the assistant turn holds before the tool name and before the arguments.
CALL_PREFIX = TOOL_CALL_OPEN + '\n{"name": "'
ARGUMENTS_PREFIX = '", "arguments": '

TOOLS_INTRO = (
    "You can call functions. The available functions, one JSON object per line:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, reply with exactly:\n"
    '<tool_call>\n{{"name": "<function name>", "arguments": <arguments as a JSON object>}}\n</tool_call>'
)


def _bad_part(where: str, part: object) -> UpstreamError:
    kind = type(part).__name__.removesuffix("Part").lower()
    return UpstreamError(
        f"{where}: the local model reads text only, not {kind} parts", status=400, type="invalid_request"
    )


class ChatTemplate:
    """Renders hub messages with a Jinja chat template (the GGUF's ``tokenizer.chat_template``)."""

    def __init__(self, template: str | None = None) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # a llama-cpp-python dependency

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(template or CHATML)
        self.has_default_system = template is not None and DEFAULT_SYSTEM in template

    def render(self, request: hub.Request, *, tools: list[hub.Tool] | None = None) -> str:
        """The prompt text, ending with the assistant's turn header; ``tools`` are described in the system prompt."""
        messages = [{"role": role, "content": content} for role, content in _turns(request)]
        if tools:
            listing = "\n".join(_tool_line(tool) for tool in tools)
            intro = TOOLS_INTRO.format(tools=listing)
            if messages and messages[0]["role"] == "system":
                messages[0]["content"] += "\n\n" + intro
            else:
                base = DEFAULT_SYSTEM if self.has_default_system else ""
                messages.insert(0, {"role": "system", "content": f"{base}\n\n{intro}" if base else intro})
        return self._template.render(messages=messages, add_generation_prompt=True, bos_token="", eos_token="")


def _tool_line(tool: hub.Tool) -> str:
    entry: dict[str, Any] = {"name": tool.name}
    if tool.description:
        entry["description"] = tool.description
    entry["parameters"] = tool.parameters
    return json.dumps(entry, ensure_ascii=False)


def tool_call_text(name: str, arguments: str) -> str:
    return f"{CALL_PREFIX}{name}{ARGUMENTS_PREFIX}{arguments or '{}'}}}\n{TOOL_CALL_CLOSE}"


def _turns(request: hub.Request) -> list[tuple[str, str]]:
    system = [m.text for m in request.messages if m.role == "system"]
    turns: list[tuple[str, str]] = [("system", "\n\n".join(system))] if system else []
    for n, message in enumerate(request.messages):
        if message.role == "system":
            continue
        texts: list[str] = []
        results: list[str] = []
        for part in message.parts:
            if isinstance(part, hub.TextPart):
                texts.append(part.text)
            elif isinstance(part, hub.ToolCallPart):
                texts.append(tool_call_text(part.name, part.arguments))
            elif isinstance(part, hub.ToolResultPart):
                results.append(_tool_result_text(part, f"messages[{n}]"))
            elif isinstance(part, hub.ThinkingPart):
                continue
            else:
                raise _bad_part(f"messages[{n}]", part)
        role = "assistant" if message.role == "assistant" else "user"
        if results:
            turns.append(("user", "\n".join(results)))
        if texts:
            turns.append((role, "\n".join(texts)))
    return turns


def _tool_result_text(part: hub.ToolResultPart, where: str) -> str:
    body: list[str] = []
    for inner in part.content:
        if isinstance(inner, hub.TextPart):
            body.append(inner.text)
        else:
            raise _bad_part(where, inner)
    text = "\n".join(body)
    if part.is_error:
        text = f"Error: {text}"
    return f"<tool_response>\n{text}\n</tool_response>"
