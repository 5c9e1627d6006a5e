"""The gateway's web console at ``/ui``: Playground, Translator, Traffic (docs/ui.md).

The page is plain HTML/CSS/JS shipped in ``static/`` (no build step, no Node.js); everything
it does goes through the JSON API of :class:`Console`.  The cores are sans-I/O:
:class:`Fanout` (one hub event -> six dialects), :func:`analyze` (a pasted body -> a
:class:`Report`) and :class:`TrafficLog` (a bounded ring of recent exchanges).
"""

from __future__ import annotations

from .._traffic import Entry, TrafficLog
from ._playground import BadRequest, Fanout, parse_request
from ._routes import Console
from ._translate import NotAStream, Report, analyze, detect, event_dict

__all__ = [
    "BadRequest",
    "Console",
    "Entry",
    "Fanout",
    "NotAStream",
    "Report",
    "TrafficLog",
    "analyze",
    "detect",
    "event_dict",
    "parse_request",
]
