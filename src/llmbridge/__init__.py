"""llmbridge: one wire format for LLM streaming, and lossless codecs for every vendor dialect."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["AsyncClient", "AsyncConversation", "Client", "Completion", "Conversation", "__version__", "tool"]

# The client SDK, imported on first use so `import llmbridge` stays light (codecs, CLI).
_CLIENT_NAMES = ("Client", "AsyncClient", "Conversation", "AsyncConversation", "Completion", "tool")


def __getattr__(name: str):
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'llmbridge' has no attribute {name!r}")
