"""Third-party Python clients reading one streamed answer from the gateway; prints {"text": ...}.

Run by tests/test_third_party_clients.py in the client environment (.venv-clients, built by
``make test-clients``): these libraries pin versions of the official SDKs that the test
environment must not inherit.  ``python py_client.py CLIENT DIALECT BASE_URL MODEL``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile

KEY = "sk-test"
PROMPT = "hi"


def litellm_text(dialect: str, base: str, model: str) -> str:
    import litellm

    prefix, api_base = {
        "openai-chat": ("openai", base + "/v1"),
        "anthropic-messages": ("anthropic", base),
        "gemini": ("gemini", base),
    }[dialect]
    stream = litellm.completion(
        model=f"{prefix}/{model}",
        api_base=api_base,
        api_key=KEY,
        stream=True,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=64,
    )
    return "".join((c.choices[0].delta.content or "") for c in stream if c.choices)


def llm_cli_text(dialect: str, base: str, model: str) -> str:
    assert dialect == "openai-chat"
    with tempfile.TemporaryDirectory() as home:
        with open(os.path.join(home, "extra-openai-models.yaml"), "w") as f:
            f.write(f"- model_id: gw\n  model_name: {model}\n  api_base: {base}/v1\n  api_key_name: gw\n")
        with open(os.path.join(home, "keys.json"), "w") as f:
            json.dump({"gw": KEY}, f)
        env = {**os.environ, "LLM_USER_PATH": home}
        cli = os.path.join(os.path.dirname(sys.executable), "llm")
        done = subprocess.run([cli, "-m", "gw", "--no-log", PROMPT], capture_output=True, text=True, env=env)
        if done.returncode:
            raise RuntimeError(done.stderr)
        return done.stdout.rstrip("\n")


def pydantic_ai_text(dialect: str, base: str, model: str) -> str:
    from pydantic_ai import Agent

    if dialect == "openai-chat":
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        llm = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base + "/v1", api_key=KEY))
    elif dialect == "openai-responses":
        from pydantic_ai.models.openai import OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        llm = OpenAIResponsesModel(model, provider=OpenAIProvider(base_url=base + "/v1", api_key=KEY))
    elif dialect == "anthropic-messages":
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        client = AsyncAnthropic(base_url=base, api_key=KEY)
        llm = AnthropicModel(model, provider=AnthropicProvider(anthropic_client=client))
    else:
        from google import genai
        from google.genai import types
        from pydantic_ai.models.google import GoogleModel
        from pydantic_ai.providers.google import GoogleProvider

        client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=base))
        llm = GoogleModel(model, provider=GoogleProvider(client=client))

    async def run() -> str:
        async with Agent(llm).run_stream(PROMPT) as result:
            return "".join([delta async for delta in result.stream_text(delta=True)])

    return asyncio.run(run())


def langchain_text(dialect: str, base: str, model: str) -> str:
    if dialect == "openai-chat":
        from langchain_openai import ChatOpenAI

        chat = ChatOpenAI(model=model, base_url=base + "/v1", api_key=KEY)
    elif dialect == "openai-responses":
        from langchain_openai import ChatOpenAI

        chat = ChatOpenAI(model=model, base_url=base + "/v1", api_key=KEY, use_responses_api=True)
    elif dialect == "anthropic-messages":
        from langchain_anthropic import ChatAnthropic

        chat = ChatAnthropic(model=model, base_url=base, api_key=KEY, max_tokens=64)
    else:
        from langchain_google_genai import ChatGoogleGenerativeAI

        chat = ChatGoogleGenerativeAI(model=model, google_api_key=KEY, base_url=base)
    parts = []
    for chunk in chat.stream(PROMPT):
        content = chunk.content
        if isinstance(content, str):
            parts.append(content)
        else:  # content blocks
            parts += [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return "".join(parts)


CLIENTS = {"litellm": litellm_text, "llm": llm_cli_text, "pydantic-ai": pydantic_ai_text, "langchain": langchain_text}

if __name__ == "__main__":
    client, dialect, base, model = sys.argv[1:5]
    print(json.dumps({"text": CLIENTS[client](dialect, base, model)}))
