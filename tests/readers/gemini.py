"""Reads a ``gemini`` stream with the official ``google-genai`` SDK (its real HTTP code path,
through ``httpx.MockTransport``)."""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from google import genai
from google.genai import types

from . import FINISH_CATEGORY, Summary

CARRIES_THINKING = True

_FILTER = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "MODEL_ARMOR",
}
_ERROR = {
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "MISSING_THOUGHT_SIGNATURE",
    "MALFORMED_RESPONSE",
}


class _Canned:
    """The one response every request gets; swapped per read (one client: building one costs ~0.4 s)."""

    body = b""
    content_type = "text/event-stream"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=self.body, headers={"content-type": self.content_type})


_canned = _Canned()
_client: genai.Client | None = None


def client_for(body: bytes, content_type: str = "text/event-stream") -> genai.Client:
    """A google-genai client whose every request is answered with ``body``."""
    global _client
    _canned.body, _canned.content_type = body, content_type
    if _client is None:
        http = httpx.Client(transport=httpx.MockTransport(_canned))
        options = types.HttpOptions(base_url="http://gemini.test", httpx_client=http)
        _client = genai.Client(api_key="x", http_options=options)
    return _client


# Gemini's FinishReason values (API reference) as the standard's stop_reason; STOP with
# function calls in the turn is a tool_use turn (see reason()).
REASON = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
REASON.update(dict.fromkeys(_FILTER, "content_filter"))
REASON.update(dict.fromkeys(_ERROR, "error"))
# everything else (OTHER, LANGUAGE, NO_IMAGE, FINISH_REASON_UNSPECIFIED ...) is "other"

# The lossy table: the finishReason the SDK shows for each of the standard's reasons.
SHOWS = {
    "end_turn": "STOP",
    "stop_sequence": "STOP",
    "max_tokens": "MAX_TOKENS",
    "tool_use": "STOP",  # Gemini ends a function-calling turn with STOP
    "content_filter": "SAFETY",
    "refusal": "SAFETY",
    "pause_turn": "OTHER",
    "other": "OTHER",
    "error": "MALFORMED_RESPONSE",
}

UNKNOWN_COUNT = None  # no usageMetadata count, no count
NO_USAGE_COUNT = None
NO_FINISH = None
ERROR_SHOWS_FINISH = True  # they came in earlier chunks


def category(word: str | None, tool_calls: bool) -> str | None:
    if word is None:
        return None
    if word == "STOP" and tool_calls:
        return "tool"
    return FINISH_CATEGORY[REASON.get(word, "other")]


def reason(summary: Summary) -> str | None:
    """The standard's stop_reason for what the SDK showed."""
    if summary.stop == "STOP" and summary.tool_calls:
        return "tool_use"
    return REASON.get(summary.stop, "other") if summary.stop else None


def read(body: bytes) -> Summary:
    """What google-genai's ``generate_content_stream`` shows for ``body``."""
    return summarize(client_for(body).models.generate_content_stream(model="gemini-test", contents="hi"))


def summarize(chunks: Iterable[types.GenerateContentResponse]) -> Summary:
    """Candidate 0 over the SDK's response chunks; an exception while iterating is the error."""
    s = Summary(thinking="")
    word = None
    try:
        for chunk in chunks:
            for cand in chunk.candidates or ():
                if cand.index not in (0, None):
                    continue
                for part in (cand.content.parts if cand.content else None) or ():
                    if part.function_call is not None:
                        s.tool_calls.append((part.function_call.name or "", dict(part.function_call.args or {})))
                        s.tool_call_ids.append(part.function_call.id or "")
                    elif part.text is not None:
                        if part.thought:
                            s.thinking += part.text
                        else:
                            s.text += part.text
                if cand.finish_reason is not None:
                    word = cand.finish_reason.value if hasattr(cand.finish_reason, "value") else cand.finish_reason
            u = chunk.usage_metadata
            if u is not None and (
                u.prompt_token_count is not None
                or u.candidates_token_count is not None
                or u.thoughts_token_count is not None
            ):
                # the standard counts every prompt token and every generated one, thoughts included
                if u.prompt_token_count is not None or u.tool_use_prompt_token_count is not None:
                    s.input_tokens = (u.prompt_token_count or 0) + (u.tool_use_prompt_token_count or 0)
                if u.candidates_token_count is not None or u.thoughts_token_count is not None:
                    s.output_tokens = (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)
    except Exception as exc:  # the SDK's verdict is part of the summary
        s.error = f"{type(exc).__name__}: {exc}"
    s.stop = word
    s.finish = category(word, bool(s.tool_calls))
    return s
