"""llmbridge: one wire format for LLM streaming, and lossless codecs for every vendor dialect."""

from __future__ import annotations

__version__ = "0.1.0"
