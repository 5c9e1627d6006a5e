"""The UniEvent view: MMSP's stream grammar ("Streaming events", see docs/references.md) derived from hub events.

A UniEvent stream is ``delta_event* stop_event``.  Every delta event holds exactly one
content item; the items form groups ``K.delta+ K.done`` that never interleave; each
``.done`` item is the complete item (the assistant message is the list of them); the
``stop`` event comes last, once, with the usage and the finish reason.  A stream ends
with ``stop`` or with an exception, never both.

:class:`UniEventView` is sans-I/O: hub events in, UniEvents out.  Hub blocks may be
open at the same time; the view streams one group live and buffers the fragments of
the others, releasing each as its own group after the live one's ``.done`` (in the
order the blocks started).  What the grammar cannot express travels in ``fidelity``
under the key ``"llmbridge"`` (block-level) or in :attr:`UniEvent.llmbridge`
(stream-level); see docs/unievent.md.

Files: ``_items`` (the item model, events, :class:`Message`, usage, finish reasons and
item fidelity), ``_view`` (:class:`UniEventView`, :func:`view_events`), ``_grammar``
(:func:`grammar_violations`); MMSP's wire around it is :mod:`llmbridge.dialects.mmsp`.
"""

from __future__ import annotations

from ._grammar import grammar_violations
from ._items import (
    FINISH_FROM_MMSP,
    FINISH_TO_MMSP,
    Embedding,
    ImageUrl,
    InlineData,
    InlineThinking,
    Item,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UniEvent,
    UsageMetadata,
    assemble_message,
    from_item_fidelity,
    item_from_dict,
    to_item_fidelity,
)
from ._view import UniEventView, view_events

__all__ = [
    "Item",
    "Text",
    "Thinking",
    "ToolCall",
    "InlineData",
    "InlineThinking",
    "Embedding",
    "ImageUrl",
    "ToolResult",
    "UsageMetadata",
    "UniEvent",
    "Message",
    "UniEventView",
    "assemble_message",
    "item_from_dict",
    "view_events",
    "to_item_fidelity",
    "from_item_fidelity",
    "FINISH_TO_MMSP",
    "FINISH_FROM_MMSP",
    "grammar_violations",
]
