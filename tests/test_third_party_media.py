"""Popular third-party clients get embeddings and images from the gateway unchanged.

LiteLLM, the ``llm`` CLI, pydantic-ai, LangChain and the Vercel AI SDK, each pointed at the
gateway the way its documentation says for an OpenAI- or Gemini-compatible server, ask for
embeddings of the embedded ``local-embed`` model (served under an OpenAI and a Gemini model
name) and for images replayed from captures.  What each client hands its caller must be what
the gateway answers a plain HTTP request with in the same run: the same vectors, the same
image bytes.  The embedding checks are properties of a real sentence-embedding model (a
paraphrase nearer than a sentence sharing its words), never fixed numbers.

The clients live in their own environments, as in test_third_party_clients.py (``make
clients``); without them these tests skip, saying so.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess

import httpx
import numpy as np
import pytest

from llmbridge import replay
from llmbridge.gateway import config, create_app
from tests.conftest import ROOT
from tests.gateway_util import replay_config, serving

PYTHON = ROOT / ".venv-clients" / "bin" / "python"
JS = ROOT / "tests" / "clients" / "js"
DATA = ROOT / "tests" / "data"

TEXTS = [
    "How do I bake bread at home?",
    "Instructions for making a homemade loaf.",
    "How do I fix my car at home?",
]
OPENAI_EMBED, GEMINI_EMBED = "text-embedding-3-small", "gemini-embedding-001"

# client -> the dialects it asks for embeddings in
EMBED_CLIENTS = {
    "litellm": ["openai-chat", "gemini"],
    "llm": ["openai-chat"],
    "pydantic-ai": ["openai-chat", "gemini"],
    "langchain": ["openai-chat", "gemini"],
    "vercel-ai": ["openai-chat", "gemini"],
}
# client -> (dialect, gateway model): an OpenAI Images stream; a Gemini image model's parts
IMAGE_CASES = [
    ("litellm", "openai-chat", "gpt-image-1"),
    ("vercel-ai", "openai-chat", "gpt-image-1"),
    ("vercel-ai", "openai-chat", "dall-e-3"),  # the AI SDK asks DALL-E models for response_format b64_json
    ("vercel-ai", "gemini", "gemini-2.5-flash-image"),
]


@pytest.fixture(scope="module")
def gw():
    with serving(replay.create_app(DATA, seed=3)) as upstream:
        raw = replay_config(
            upstream.url,
            {
                "gpt-image-1": ("openai-chat", "gpt-image-stream"),
                "dall-e-3": ("openai-chat", "gpt-image-stream"),
                "gemini-2.5-flash-image": ("gemini", "gemini-image"),
            },
            extra_upstreams={"here": {"format": "local"}},
        )
        for name in (OPENAI_EMBED, GEMINI_EMBED):
            raw["models"].append(
                {"name": name, "upstream": "here", "upstream_model": "local-embed", "kind": "embedding"}
            )
        with serving(create_app(config.parse(raw))) as server:
            yield server


def run(kind: str, client: str, dialect: str, base: str, model: str, *args: str) -> dict:
    if client == "vercel-ai":
        if shutil.which("node") is None or not (JS / "node_modules").is_dir():
            pytest.skip("the Vercel AI SDK is not installed: run `make clients` (needs node and npm)")
        argv = ["node", str(JS / "media.mjs"), kind, dialect, base, model, *args]
    else:
        if not PYTHON.exists():
            pytest.skip("the third-party Python clients are not installed: run `make clients`")
        argv = [str(PYTHON), str(ROOT / "tests" / "clients" / "py_media.py"), kind, client, dialect, base, model, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def direct_vectors(gw) -> np.ndarray:
    """The gateway's own answer to a plain OpenAI embeddings request, in this run."""
    answer = httpx.post(f"{gw.url}/v1/embeddings", json={"model": OPENAI_EMBED, "input": TEXTS}, timeout=60)
    assert answer.status_code == 200, answer.text
    return np.array([item["embedding"] for item in answer.json()["data"]], dtype=np.float64)


@pytest.mark.parametrize(
    ("client", "dialect"), [(c, d) for c, ds in EMBED_CLIENTS.items() for d in ds], ids=lambda x: x
)
def test_client_gets_the_gateways_embeddings(gw, direct_vectors, client, dialect):
    model = OPENAI_EMBED if dialect == "openai-chat" else GEMINI_EMBED
    vectors = np.array(run("embed", client, dialect, gw.url, model, *TEXTS)["vectors"], dtype=np.float64)
    assert vectors.shape == (3, 384)
    # The same model behind both names, the same texts: the same vectors, through any client and
    # either dialect (float JSON or base64 float32 on the wire: float32 precision).
    assert np.allclose(vectors, direct_vectors, atol=1e-6)
    bread, loaf, car = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert bread @ loaf > bread @ car  # the paraphrase is nearer than the sentence that shares its words


@pytest.mark.parametrize(("client", "dialect", "model"), IMAGE_CASES, ids=lambda x: x)
def test_client_gets_the_gateways_images(gw, client, dialect, model):
    direct = httpx.post(f"{gw.url}/v1/images/generations", json={"model": model, "prompt": "a lighthouse"}, timeout=60)
    assert direct.status_code == 200, direct.text
    expected = [base64.b64decode(item["b64_json"]) for item in direct.json()["data"]]
    assert expected and all(expected)
    images = run("image", client, dialect, gw.url, model, "a lighthouse")["images"]
    assert [base64.b64decode(image) for image in images] == expected
