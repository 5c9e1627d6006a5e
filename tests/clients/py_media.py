"""Third-party Python clients asking the gateway for embeddings or images; prints one JSON line.

Run by tests/test_third_party_media.py in the client environment (.venv-clients, built by
``make clients``), like py_client.py.

    python py_media.py embed CLIENT DIALECT BASE_URL MODEL TEXT...   -> {"vectors": [[...], ...]}
    python py_media.py image CLIENT DIALECT BASE_URL MODEL PROMPT    -> {"images": ["<base64>", ...]}

Each client is configured the way its own documentation says for an OpenAI- or
Gemini-compatible server: a base URL and a key, nothing else.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

KEY = "sk-test"


# --------------------------------------------------------------------------- embeddings


def litellm_embed(dialect: str, base: str, model: str, texts: list[str]) -> list[list[float]]:
    import litellm

    prefix, api_base = {"openai-chat": ("openai", base + "/v1"), "gemini": ("gemini", base + "/v1beta")}[dialect]
    answer = litellm.embedding(model=f"{prefix}/{model}", input=texts, api_base=api_base, api_key=KEY)
    return [item["embedding"] for item in answer.data]


def llm_cli_embed(dialect: str, base: str, model: str, texts: list[str]) -> list[list[float]]:
    # llm's OpenAI embedding models are a fixed list (no extra-models file as for chat): the
    # gateway serves one of their names, and the official SDK inside finds it via OPENAI_BASE_URL.
    assert dialect == "openai-chat" and model == "text-embedding-3-small"
    cli = os.path.join(os.path.dirname(sys.executable), "llm")
    vectors = []
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "LLM_USER_PATH": home, "OPENAI_BASE_URL": base + "/v1", "OPENAI_API_KEY": KEY}
        for text in texts:
            done = subprocess.run([cli, "embed", "-m", "3-small", "-c", text], capture_output=True, text=True, env=env)
            if done.returncode:
                raise RuntimeError(done.stderr)
            vectors.append(json.loads(done.stdout))
    return vectors


def pydantic_ai_embed(dialect: str, base: str, model: str, texts: list[str]) -> list[list[float]]:
    from pydantic_ai import Embedder

    if dialect == "openai-chat":
        from pydantic_ai.embeddings.openai import OpenAIEmbeddingModel
        from pydantic_ai.providers.openai import OpenAIProvider

        embedding_model: Any = OpenAIEmbeddingModel(model, provider=OpenAIProvider(base_url=base + "/v1", api_key=KEY))
    else:
        from pydantic_ai.embeddings.google import GoogleEmbeddingModel
        from pydantic_ai.providers.google import GoogleProvider

        embedding_model = GoogleEmbeddingModel(model, provider=GoogleProvider(api_key=KEY, base_url=base))
    result = asyncio.run(Embedder(embedding_model).embed_documents(texts))
    return [list(v) for v in result.embeddings]


def langchain_embed(dialect: str, base: str, model: str, texts: list[str]) -> list[list[float]]:
    if dialect == "openai-chat":
        from langchain_openai import OpenAIEmbeddings

        # check_embedding_ctx_length=False: otherwise LangChain tokenizes with tiktoken first,
        # which downloads its encoding at run time (and sends token ids, an OpenAI-only form).
        embedder: Any = OpenAIEmbeddings(
            model=model, base_url=base + "/v1", api_key=KEY, check_embedding_ctx_length=False
        )
    else:
        from langchain_google_genai import GoogleGenerativeAIEmbeddings

        embedder = GoogleGenerativeAIEmbeddings(model=model, google_api_key=KEY, base_url=base)
    return embedder.embed_documents(texts)


# --------------------------------------------------------------------------- images


def litellm_image(dialect: str, base: str, model: str, prompt: str) -> list[str]:
    import litellm

    assert dialect == "openai-chat"
    answer = litellm.image_generation(model=f"openai/{model}", prompt=prompt, api_base=base + "/v1", api_key=KEY)
    return [item["b64_json"] for item in answer.data]


EMBED = {"litellm": litellm_embed, "llm": llm_cli_embed, "pydantic-ai": pydantic_ai_embed, "langchain": langchain_embed}
IMAGE = {"litellm": litellm_image}


def main(argv: list[str]) -> None:
    what, client, dialect, base, model, *rest = argv
    if what == "embed":
        print(json.dumps({"vectors": EMBED[client](dialect, base, model, rest)}))
    else:
        print(json.dumps({"images": IMAGE[client](dialect, base, model, rest[0])}))


if __name__ == "__main__":
    main(sys.argv[1:])
