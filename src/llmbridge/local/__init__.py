"""The embedded local model: SmolLM2-135M-Instruct in process, through llama-cpp-python.

See docs/local-model.md.  Importing this package does not import llama_cpp; the
model loads at the first request (or ``await LocalUpstream().load()``).
"""

from .upstream import LocalUpstream

__all__ = ["LocalUpstream"]
