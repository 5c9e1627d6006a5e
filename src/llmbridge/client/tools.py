"""Tools for the client: JSON schemas from type hints, a registry, and safe execution.

``@tool`` turns a function into a :class:`Tool`: its name, the first paragraph of its
docstring as the description, and a JSON schema of its parameters built from the type
hints (``str``, ``int``, ``float``, ``bool``, ``list[X]``, ``dict``, ``Optional[X]``,
``Literal[...]``, enums).  ``side_effects=True`` marks a tool that runs only when the
caller's ``confirm(call)`` callback says yes (LLM-Stream draft §8.2).
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import hub
from ..errors import ConfirmationRequired, ToolNotDeclaredError

__all__ = ["Tool", "ToolRegistry", "ToolRun", "tool", "schema_for", "as_hub_tools"]

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_for(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one type hint; ``TypeError`` for a hint with no JSON form."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is type(None):
        return {"type": "null"}
    if annotation in (list, tuple, set):
        return {"type": "array"}
    if annotation is dict:
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        return {**_literal_type(values), "enum": values}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {**_literal_type(list(args)), "enum": list(args)}
    if origin in (list, tuple, set, Iterable) or origin is getattr(typing, "Sequence", None):
        return {"type": "array", "items": schema_for(args[0])} if args else {"type": "array"}
    if origin is dict:
        if len(args) == 2 and args[1] is not Any:
            return {"type": "object", "additionalProperties": schema_for(args[1])}
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = schema_for(options[0]) if len(options) == 1 else {"anyOf": [schema_for(a) for a in options]}
        if len(options) < len(args):  # Optional: null allowed too
            if set(inner) == {"type"} and isinstance(inner["type"], str):
                return {"type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return inner
    if origin is typing.Annotated:
        return schema_for(args[0])
    raise TypeError(f"no JSON schema for the type hint {annotation!r}; pass schema= explicitly")


def _literal_type(values: list[Any]) -> dict[str, Any]:
    kinds = {_SCALARS.get(type(v)) for v in values}
    return {"type": kinds.pop()} if len(kinds) == 1 and None not in kinds else {}


def _doc_parts(fn: Callable) -> tuple[str | None, dict[str, str]]:
    """The docstring's first paragraph, and per-parameter text from an ``Args:`` section."""
    doc = inspect.getdoc(fn)
    if not doc:
        return None, {}
    description = doc.split("\n\n", 1)[0].strip() or None
    params: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?|\n)+)", doc, re.M)
    if section:
        current = None
        for line in section.group(1).splitlines():
            m = re.match(r"\s+(\w+)(?:\s*\(.*?\))?\s*:\s*(.*)", line)
            if m and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
    if section and description and description.startswith(("Args:", "Arguments:", "Parameters:")):
        description = None
    return description, params


def _parameters_schema(fn: Callable, param_docs: dict[str, str]) -> dict[str, Any]:
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        schema = dict(schema_for(hints.get(name, p.annotation)))
        if name in param_docs:
            schema["description"] = param_docs[name]
        default = p.default.value if isinstance(p.default, enum.Enum) else p.default
        if default is not p.empty and isinstance(default, (str, int, float, bool)):
            schema["default"] = default
        properties[name] = schema
        if p.default is p.empty:
            required.append(name)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


@dataclass
class Tool:
    """A callable the model may ask for, with its JSON schema."""

    fn: Callable[..., Any] | None
    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    side_effects: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            raise TypeError(f"tool {self.name!r} has no implementation")
        return self.fn(*args, **kwargs)

    @property
    def is_async(self) -> bool:
        return self.fn is not None and inspect.iscoroutinefunction(self.fn)

    def to_hub(self) -> hub.Tool:
        return hub.Tool(self.name, self.description, self.parameters)

    def bind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments as keyword arguments for ``fn``: enum values become their members."""
        if self.fn is None:
            return arguments
        hints = typing.get_type_hints(self.fn)
        out = dict(arguments)
        for key, value in arguments.items():
            hint = hints.get(key)
            if isinstance(hint, type) and issubclass(hint, enum.Enum):
                out[key] = hint(value)
        return out


def tool(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: dict[str, Any] | None = None,
    side_effects: bool = False,
) -> Any:
    """Make a :class:`Tool` of ``fn``; usable bare (``@tool``) or with options (``@tool(side_effects=True)``)."""

    def build(f: Callable) -> Tool:
        doc, param_docs = _doc_parts(f)
        return Tool(
            f,
            name or f.__name__,
            description if description is not None else doc,
            schema if schema is not None else _parameters_schema(f, param_docs),
            side_effects,
        )

    return build(fn) if fn is not None else build


def as_tool(value: Any) -> Tool:
    """A :class:`Tool` from a Tool, a function, a ``hub.Tool`` or a tool dict (OpenAI or plain)."""
    if isinstance(value, Tool):
        return value
    if isinstance(value, hub.Tool):
        return Tool(None, value.name, value.description, value.parameters)
    if isinstance(value, dict):
        spec = value.get("function") if value.get("type") == "function" else value
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise TypeError(f"a tool dict needs a name: {value!r}")
        params = spec.get("parameters", spec.get("input_schema")) or {"type": "object", "properties": {}}
        return Tool(None, spec["name"], spec.get("description"), params)
    if callable(value):
        return tool(value)
    raise TypeError(f"not a tool: {value!r}")


def as_hub_tools(values: Iterable[Any] | None) -> list[hub.Tool]:
    return [as_tool(v).to_hub() for v in values or ()]


class ToolRegistry:
    """The tools a client knows by name: ``client.tools.register(fn)`` (also a decorator)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, fn: Any = None, **options: Any) -> Any:
        if fn is None:
            return lambda f: self.register(f, **options)
        t = tool(fn, **options) if not isinstance(fn, Tool) and callable(fn) and options else as_tool(fn)
        self._tools[t.name] = t
        return t

    def __iter__(self):
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)


# --------------------------------------------------------------------------- the tool loop


@dataclass
class ToolRun:
    """What :meth:`Client.run_tools` returns: the final answer and every message of the loop."""

    completion: Any  # Completion
    transcript: list[hub.Message]
    rounds: int

    @property
    def text(self) -> str:
        return self.completion.text


@dataclass
class Outcome:
    """One executed (or refused) call, as it goes back to the model."""

    call_id: str
    name: str
    text: str
    is_error: bool

    def message(self) -> hub.Message:
        part = hub.ToolResultPart(self.call_id, [hub.TextPart(self.text)], self.is_error, self.name)
        return hub.Message("tool", [part])


def next_choice(choice: Any) -> Any:
    """A forcing tool choice applies to the first round only, else the loop could never end."""
    if choice is None or choice in ("auto", "none") or getattr(choice, "mode", None) in ("auto", "none"):
        return choice
    return "auto"


def result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def check_call(call: Any, declared: dict[str, Tool]) -> tuple[Tool | None, Outcome | None]:
    """The tool to run for ``call``, or the error outcome that refuses it (undeclared, no code)."""
    spec = declared.get(call.name)
    if spec is None:
        return None, _error(call, ToolNotDeclaredError(call.name, call.tool_call_id))
    if spec.fn is None:
        return None, Outcome(call.tool_call_id, call.name, f"error: tool {call.name!r} has no implementation", True)
    return spec, None


def refused(call: Any, confirm: Any) -> Outcome:
    why = "the user declined" if confirm is not None else "no confirmation callback was given"
    return _error(call, ConfirmationRequired(call.name, call.tool_call_id, why))


def failed(call: Any, exc: BaseException) -> Outcome:
    return Outcome(call.tool_call_id, call.name, f"error: {type(exc).__name__}: {exc}", True)


def _error(call: Any, exc: Exception) -> Outcome:
    return Outcome(call.tool_call_id, call.name, f"error: {exc}", True)
