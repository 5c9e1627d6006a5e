"""The gateway's check on image inputs: every inline image of a request, whatever its dialect,
after it is read into the hub (the checks themselves: ``llmbridge.media``)."""

from __future__ import annotations

from .. import hub
from ..media import image_problem

__all__ = ["check_images"]


def check_images(request: hub.Request, limit: int) -> str | None:
    """The first problem with an inline image of ``request`` (tool results included), as a
    message naming where it is, or ``None``."""
    for m, message in enumerate(request.messages):
        for p, part in enumerate(message.parts):
            parts = part.content if isinstance(part, hub.ToolResultPart) else [part]
            for part_ in parts:
                if isinstance(part_, hub.ImagePart) and part_.data is not None:
                    problem = image_problem(part_.data, part_.media_type, limit)
                    if problem:
                        return f"messages[{m}].content[{p}]: {problem}"
    return None
