"""Refuse only what the vendor refuses (issue 22), and say what a translation left out.

Two steps of the chat pipeline (``chat.py``):

* :func:`refusal` after a request body decodes: the checks the client's vendor makes that a
  lenient codec does not (a missing ``model``: 400 in every dialect; Anthropic's required
  ``max_tokens``: 400 ``max_tokens: Field required``, unless ``[gateway]
  anthropic_default_max_tokens`` supplies it). An unknown model stays the gateway's 404.
* :func:`dropped` once the upstream is known: the request fields the upstream's dialect has
  no place for (:func:`llmbridge.dialects.fields.dropped_fields`), for the
  ``x-llmbridge-dropped-fields`` response header and a debug log line. Nothing is refused
  for them: the client's vendor would have taken them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from .. import hub
from ..dialects.anthropic_messages import BETA
from ..dialects.fields import HEADER, dropped_fields
from ..errors import RequestError
from ._response import StreamResponse

__all__ = ["HEADER", "dropped", "refusal", "report"]

log = logging.getLogger("llmbridge.gateway")

# How each vendor words a missing model (OpenAI: its own sentence; Anthropic: pydantic's).
_NO_MODEL = {
    "openai-chat": RequestError("you must provide a model parameter"),
    "openai-responses": RequestError("you must provide a model parameter"),
    "anthropic-messages": RequestError("Field required", "model"),
}


def refusal(
    body: dict[str, Any],
    request: hub.Request,
    dialect: str,
    default_max_tokens: int = 0,
    headers: Mapping[str, str] | None = None,
) -> RequestError | None:
    """Why the vendor of ``dialect`` would refuse ``body`` (decoded as ``request``) with a 400,
    or ``None``. Fills Anthropic's missing ``max_tokens`` from ``default_max_tokens`` when that
    is positive (the ``[gateway] anthropic_default_max_tokens`` switch) instead of refusing,
    and keeps the client's ``anthropic-beta`` header (from ``headers``) for an Anthropic upstream."""
    if not request.model:
        return _NO_MODEL.get(dialect) or RequestError("field required", "model")
    if dialect == "anthropic-messages":
        if body.get("max_tokens") is None:
            if default_max_tokens <= 0:
                return RequestError("Field required", "max_tokens")
            request.max_tokens = default_max_tokens
        beta = (headers or {}).get("anthropic-beta")
        if beta:
            request.extensions[BETA] = beta
    return None


def dropped(request: hub.Request, source: str, target: str) -> dict[str, str]:
    """The response header naming what the ``target`` upstream did not get (empty when it
    got everything), logged at debug level too."""
    names = dropped_fields(request, source, target)
    if not names:
        return {}
    value = ",".join(names)
    log.debug("%s -> %s upstream: dropped %s", source, target, value)
    return {HEADER: value}


def report(response: Response | StreamResponse, request: hub.Request, source: str, target: str) -> None:
    """Put :func:`dropped`'s header on ``response`` (a JSON or a streamed answer)."""
    if source == target:  # (a relayed dialect drops nothing: no walk)
        return
    for key, value in dropped(request, source, target).items():
        if isinstance(response, StreamResponse):
            response.headers.append((key.encode(), value.encode("latin-1", "replace")))
        else:
            response.headers[key] = value
