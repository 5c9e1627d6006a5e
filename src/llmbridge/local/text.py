"""Incremental detokenization: token bytes to text, stop sequences held back until decided."""

from __future__ import annotations

import codecs
import ctypes
from typing import TYPE_CHECKING

__all__ = ["Pieces", "TextStream"]

if TYPE_CHECKING:
    import llama_cpp


class Pieces:
    """Token id -> the bytes it stands for (cached; a piece may be part of a UTF-8 character)."""

    def __init__(self, llm: llama_cpp.Llama) -> None:
        import llama_cpp  # here, not at import: TextStream needs no engine (and the extra is optional)

        self._to_piece = llama_cpp.llama_token_to_piece
        self._vocab = llm._model.vocab
        self._buffer = ctypes.create_string_buffer(64)
        self._cache: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        piece = self._cache.get(token)
        if piece is None:
            piece = self._cache[token] = self._render(token)
        return piece

    def _render(self, token: int) -> bytes:
        n = self._to_piece(self._vocab, token, self._buffer, len(self._buffer), 0, False)
        if n < 0:  # the buffer is too small; -n is the size needed
            self._buffer = ctypes.create_string_buffer(-n)
            n = self._to_piece(self._vocab, token, self._buffer, len(self._buffer), 0, False)
        return self._buffer.raw[:n]


class TextStream:
    """Bytes in, text out: complete UTF-8 characters only, stop sequences cut off.

    A multi-byte character split across tokens waits for its last byte.  Text that
    could be the start of a stop sequence waits until the next piece decides it, so
    a stop sequence never reaches the client; ``stop`` names the one that matched.
    """

    def __init__(self, stops: list[str] | tuple[str, ...] = ()) -> None:
        # "replace": bytes that can never be UTF-8 (the model may emit any token) become U+FFFD
        # where they stand.  Bytes that are merely *incomplete* are another matter: the decoder
        # keeps them until the next piece completes the character, and at the end they are
        # dropped (see flush), never shown as U+FFFD.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._decode = self._decoder.decode
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stop: str | None = None

    def feed(self, piece: bytes) -> str:
        """The text that is now certain; after a stop matched, call no more."""
        text = self._decode(piece)
        if not self._stops:
            return text
        text = self._held + text
        first = -1
        for stop in self._stops:
            at = text.find(stop)
            if at >= 0 and (first < 0 or at < first):
                first, self.stop = at, stop
        if first >= 0:
            self._held = ""
            return text[:first]
        hold = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:size]):
                    hold = size
                    break
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """What is left at the end of generation: the held text.

        A character the model left incomplete (generation stopped by ``max_tokens`` or the
        end-of-generation token between two bytes of one UTF-8 character) is dropped: it has
        no text form, and a U+FFFD standing for "half a character" would reach the client as if
        the model had written it.  Resets the stream's decoder.
        """
        text = self._held
        self._held = ""
        self._decoder.reset()
        return text
