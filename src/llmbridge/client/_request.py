"""Call arguments -> ``hub.Request``: messages in three forms, tools, tool choice, parameters."""

from __future__ import annotations

from typing import Any

from .. import hub
from ..dialects import mmsp, openai_chat
from ..unievent import Message as UniMessage
from .tools import as_hub_tools

# Keyword arguments that map straight onto hub.Request fields.
PARAMS = frozenset(
    {
        "max_tokens", "temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty", "n",
        "parallel_tool_calls", "response_format", "thinking", "metadata", "extensions",
    }
)  # fmt: skip


def to_messages(messages: Any) -> list[hub.Message]:
    """Messages as hub messages.

    Accepted, mixed freely: ``hub.Message``; a string (a user message); an assembled
    :class:`~llmbridge.unievent.Message` / ``Completion`` (an assistant turn); MMSP UniEvent dicts
    ``{"role", "content_items": [...]}``; OpenAI-like dicts ``{"role", "content": str | parts}``.
    Consecutive dicts of one form are decoded together by that dialect's request codec.
    """
    if messages is None:
        return []
    if isinstance(messages, (str, dict, hub.Message, UniMessage)):
        messages = [messages]
    out: list[hub.Message] = []
    run: list[dict] = []
    run_form: str | None = None

    def flush() -> None:
        nonlocal run
        if run:
            out.extend(_decode_run(run_form or "openai", run))
            run = []

    for m in messages:
        if isinstance(m, hub.Message):
            flush()
            out.append(m)
        elif isinstance(m, str):
            flush()
            out.append(hub.Message("user", [hub.TextPart(m)]))
        elif isinstance(m, UniMessage):
            flush()
            out.extend(_decode_run("seed", [m.to_dict()]))
        elif isinstance(m, dict):
            form = "seed" if "content_items" in m else "openai"
            if form != run_form:
                flush()
                run_form = form
            run.append(m)
        else:
            raise TypeError(f"not a message: {m!r}")
    flush()
    return out


def _decode_run(form: str, run: list[dict]) -> list[hub.Message]:
    if form == "seed":
        # Seed 001 has no tool role: tool results ride in user messages and decode to tool messages.
        return mmsp.decode_request({"model": "-", "messages": [{**m, "role": _seed_role(m)} for m in run]}).messages
    return openai_chat.decode_request({"messages": run}).messages


def _seed_role(m: dict) -> str:
    role = m.get("role", "user")
    return "user" if role == "tool" else role


def to_tool_choice(value: Any) -> hub.ToolChoice | None:
    if value is None or isinstance(value, hub.ToolChoice):
        return value
    if value in ("auto", "none", "required", "any"):
        return hub.ToolChoice("required" if value == "any" else value)
    if isinstance(value, str):
        return hub.ToolChoice("tool", value)
    if isinstance(value, dict):
        spec = value.get("function") if isinstance(value.get("function"), dict) else value
        if isinstance(spec.get("name"), str):
            return hub.ToolChoice("tool", spec["name"])
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return hub.ToolChoice("tool", name)
    raise TypeError(f"tool_choice must be 'auto', 'none', 'required' or a tool name, not {value!r}")


def build_request(
    model: str,
    messages: Any,
    *,
    system: str | None = None,
    tools: Any = None,
    tool_choice: Any = None,
    stop: str | list[str] | None = None,
    **params: Any,
) -> hub.Request:
    unknown = set(params) - PARAMS
    if unknown:
        raise TypeError(f"unknown parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(PARAMS))}")
    if not isinstance(model, str) or not model:
        raise TypeError("model must be a non-empty string")
    msgs = to_messages(messages)
    if system:
        msgs.insert(0, hub.Message("system", [hub.TextPart(system)]))
    request = hub.Request(
        model=model,
        messages=msgs,
        tools=as_hub_tools(tools),
        tool_choice=to_tool_choice(tool_choice),
        stream=True,
        stop=[stop] if isinstance(stop, str) else list(stop or ()),
    )
    for key, value in params.items():
        if value is not None:
            setattr(request, key, dict(value) if key in ("metadata", "extensions") else value)
    return request
