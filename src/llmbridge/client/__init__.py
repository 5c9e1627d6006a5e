"""The client SDK: MMSP UniEvents from any dialect, sync and async; see docs/client.md.

A call becomes a ``hub.Request``, goes out through the dialect's request codec, and its
streamed body comes back through the dialect's stream decoder and the UniEvent view.
"""

from __future__ import annotations

from ._async import AsyncClient, AsyncConversation, AsyncStream
from ._core import Completion
from ._media import Embeddings
from ._request import build_request, to_messages
from ._sync import Client, Conversation, Stream
from .tools import Tool, ToolRegistry, ToolRun, tool

__all__ = [
    "AsyncClient",
    "AsyncConversation",
    "AsyncStream",
    "Client",
    "Completion",
    "Conversation",
    "Embeddings",
    "Stream",
    "Tool",
    "ToolRegistry",
    "ToolRun",
    "build_request",
    "to_messages",
    "tool",
]
