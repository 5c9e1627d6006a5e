"""What a translated request keeps: the request fields a target dialect carries, maps or drops.

A request goes to an upstream of another dialect through the hub; what the target has no
field for is left out of the upstream request, never refused (the vendor of the client's
dialect would have taken it). :func:`dropped_fields` names what was left out, in the
client's own spelling, so the gateway can say so (the ``x-llmbridge-dropped-fields``
response header and a debug log line). The tables per dialect are docs/dialects/*.md.

The names are short paths: ``context_management``, ``top_k``, ``system.cache_control``
(a key on a system block), ``messages.cache_control`` (on a content block),
``tools.cache_control`` (on a tool), ``tools.web_search_20250305`` (a server tool the
target cannot run), ``messages.server_tool_use`` (a native block it cannot replay).
"""

from __future__ import annotations

from typing import Any

from .. import hub

__all__ = ["HEADER", "OPENAI_SHARED", "OURS", "dropped_fields", "server_tool_type"]

HEADER = "x-llmbridge-dropped-fields"
# Our own dialects carry every hub field (and extensions) as they are.
OURS = frozenset(("llm-stream", "mmsp"))

# Top-level fields Chat Completions and Responses spell alike: mapped between the two.
OPENAI_SHARED = ("prompt_cache_key", "prompt_cache_retention", "safety_identifier", "store")
_OPENAI = ("openai-chat", "openai-responses")

# Extension keys a codec keeps for its own round trip (spelling, not content): never "dropped".
_BOOKKEEPING = frozenset(
    (
        "anthropic-messages:output_format",  # the flag "said as output_format"; the format itself is mapped
        "openai-chat:max_tokens_field",
        "openai-chat:stream_options",  # the gateway asks every upstream for usage anyway
        "gemini:includeThoughts",  # mapped: thinking summaries are what every target streams
        "gemini:dynamicBudget",
        "gemini:schemaField",
        "gemini:responseMimeType",
    )
)
# Keys inside a part's or a tool's own extensions that are spelling, not content.
_PART_BOOKKEEPING = frozenset(("role", "content_blocks", "source", "type", "schemaField"))

# Hub fields each target has no request field for (what its encoder leaves out or carries
# only under our "llmbridge" key, which the gateway strips for a vendor's upstream).
_UNSAID: dict[str, tuple[str, ...]] = {
    "anthropic-messages": ("seed", "presence_penalty", "frequency_penalty", "n"),
    "openai-chat": (),
    "openai-responses": ("top_k", "stop", "seed", "n", "presence_penalty", "frequency_penalty"),
    "gemini": ("parallel_tool_calls", "service_tier"),
}
# How each source dialect spells a hub field (where it is not the hub's own name).
_SPELLING: dict[str, dict[str, str]] = {
    "anthropic-messages": {"stop": "stop_sequences"},
    "openai-chat": {},
    "openai-responses": {},
    "gemini": {
        "stop": "generationConfig.stopSequences",
        "top_k": "generationConfig.topK",
        "seed": "generationConfig.seed",
        "presence_penalty": "generationConfig.presencePenalty",
        "frequency_penalty": "generationConfig.frequencyPenalty",
        "n": "generationConfig.candidateCount",
        "service_tier": "serviceTier",
    },
}


def server_tool_type(tool: hub.Tool, target: str) -> str | None:
    """The vendor's type of ``tool`` when it is another dialect's server tool (Anthropic
    ``web_search_20250305``, ``bash_20250124`` ...), which ``target`` cannot run; ``None`` for
    a function tool or one of ``target``'s own."""
    for namespace, own in (tool.extensions or {}).items():
        if namespace != target and type(own) is dict:
            kind = own.get("type")
            if type(kind) is str and kind not in ("custom", "function"):
                return kind
    return None


def dropped_fields(request: hub.Request, source: str, target: str) -> list[str]:
    """The fields of ``request`` (decoded from ``source``) that an upstream of ``target``
    does not get, in ``source``'s spelling, sorted; empty for a same-dialect upstream and for
    our own dialects, which carry everything."""
    if source == target or target not in _UNSAID or source in OURS:
        return []  # the same dialect, or ours (and the local model), which carry everything
    out: set[str] = set()
    for key in request.extensions:
        namespace, _, name = key.partition(":")
        if namespace != target and key not in _BOOKKEEPING and name and not name.startswith("$"):
            if namespace in _OPENAI and target in _OPENAI and _openai_mapped(name, request.extensions[key]):
                continue
            out.update(_extension_names(namespace, name, request.extensions[key]))
    for message in request.messages:
        where = "system" if message.role == "system" else "messages"
        for part in message.parts:
            if type(part) is hub.TextPart:  # (nearly every part: only its extensions can say more)
                if part.extensions:
                    _part_fields(part, where, target, out)
                continue
            if type(part) is hub.NativePart:
                if part.namespace != target:
                    kind = part.data.get("type") if type(part.data) is dict else None
                    out.add(f"messages.{kind or part.namespace}")
                continue
            _part_fields(part, where, target, out)
            if target == "anthropic-messages" and type(part) is hub.FilePart and _is_audio(part):
                out.add("messages.input_audio" if source == "openai-chat" else "messages.audio")
            if type(part) is hub.ToolResultPart:
                for inner in part.content:
                    _part_fields(inner, where, target, out)
    for tool in request.tools:
        kind = server_tool_type(tool, target)
        if kind is not None:
            out.add(f"tools.{kind}")
            continue
        for namespace, own in (tool.extensions or {}).items():
            if namespace != target and type(own) is dict:
                out.update(f"tools.{k}" for k in own if k not in _PART_BOOKKEEPING)
    spelling = _SPELLING.get(source, _NO_SPELLING)
    for name in _UNSAID.get(target, ()):
        value = getattr(request, name)
        if value is not None and value != [] and not (name == "n" and value == 1):
            out.add(spelling.get(name, name))
    fmt = request.response_format
    if target == "anthropic-messages" and fmt and fmt.get("type") != "json_schema":  # JSON mode: no Anthropic form
        out.add(_FORMAT_FIELD.get(source, "response_format"))
    # metadata: Anthropic takes only user_id, Gemini none (request_id is the gateway's own)
    kept = _METADATA_KEPT.get(target)
    if kept is not None:
        for key in request.metadata:
            if key not in kept:
                out.add("user" if (key, source) == ("user_id", "openai-chat") else f"metadata.{key}")
    return sorted(out)


_NO_SPELLING: dict[str, str] = {}
_METADATA_KEPT = {"anthropic-messages": ("user_id", "request_id"), "gemini": ("request_id",)}
_FORMAT_FIELD = {"openai-responses": "text.format", "gemini": "generationConfig.responseMimeType"}


def _is_audio(part: hub.FilePart) -> bool:
    return (part.media_type or "").startswith("audio/") or (part.url or "").startswith("data:audio/")


def _openai_mapped(name: str, value: Any) -> bool:
    """Whether Chat <-> Responses carry this field: the shared ones, and verbosity (Chat's
    ``verbosity`` is Responses' ``text.verbosity``)."""
    if name in OPENAI_SHARED or name == "verbosity":
        return True
    return name == "text" and type(value) is dict and set(value) <= {"verbosity"}


def _extension_names(namespace: str, name: str, value: Any) -> list[str]:
    if name in ("hosted_tools", "tools") and type(value) is list:  # Responses built-ins, Chat's non-function tools
        return [f"tools.{t.get('type') or next(iter(t), '')}" for t in value if type(t) is dict] or ["tools"]
    if namespace == "gemini" and name == "generationConfig" and type(value) is dict:
        return [f"generationConfig.{k}" for k in value] or ["generationConfig"]
    return [name]


def _part_fields(part: hub.Part, where: str, target: str, out: set[str]) -> None:
    extensions = getattr(part, "extensions", None)
    if not extensions:
        return
    for namespace, own in extensions.items():
        if namespace != target and type(own) is dict:
            out.update(f"{where}.{k}" for k in own if k not in _PART_BOOKKEEPING)
