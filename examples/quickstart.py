"""The llmbridge client in five minutes: one event grammar whatever the wire.

Start the gateway on the embedded local model first (model name "local")::

    llmbridge serve            # http://127.0.0.1:8000

then run ``python examples/quickstart.py [BASE_URL]``.
"""

from __future__ import annotations

import asyncio
import sys

import llmbridge
from llmbridge.errors import LLMBridgeError

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
# Every dialect the gateway speaks; the client gives the same UniEvents over each.
# (MMSP's own wire sits under /mmsp on the gateway.)
DIALECTS = {
    "llm-stream": BASE,
    "openai-chat": BASE,
    "openai-responses": BASE,
    "anthropic-messages": BASE,
    "gemini": BASE,
    "mmsp": BASE + "/mmsp",
}


def stream_in_every_dialect() -> None:
    for dialect, url in DIALECTS.items():
        with llmbridge.Client(url, dialect=dialect) as client:
            print(f"--- {dialect}")
            with client.stream(model="local", messages=["Name one planet."], max_tokens=24) as stream:
                for event in stream:
                    if event.event_type == "delta" and event.item.type == "text.delta":
                        print(event.item.text, end="", flush=True)
                    elif event.event_type == "stop":
                        print(f"\n[{event.finish_reason}, {event.usage_metadata.response_tokens} tokens]")


def complete_and_converse() -> None:
    with llmbridge.Client(BASE, dialect="openai-chat") as client:
        answer = client.complete("local", [{"role": "user", "content": "Say hi in French."}], max_tokens=16)
        print("complete():", answer.text, "|", answer.finish, answer.usage.output_tokens, "tokens")

        chat = client.conversation("local", system="You answer in one short sentence.", max_tokens=32)
        print("turn 1:", chat.complete("My name is Ada.").text)
        print("turn 2:", chat.complete("What is my name?").text)
        print("history:", [m.role for m in chat.history])


@llmbridge.tool
def get_weather(city: str) -> dict:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    return {"city": city, "temperature_c": 21, "sky": "clear"}


def tools() -> None:
    with llmbridge.Client(BASE, dialect="anthropic-messages") as client:
        run = client.run_tools(
            "local",
            "What is the weather in Paris?",
            tools=[get_weather],
            tool_choice="get_weather",  # forced on the first call only: small models call tools reliably then
            max_tokens=64,
        )
        calls = [m.parts[0].name for m in run.transcript if m.role == "tool"]
        print(f"tool loop: {run.rounds} rounds, tools run: {calls}; answer: {run.text}")


async def in_asyncio() -> None:
    async with llmbridge.AsyncClient(BASE, dialect="gemini") as client:
        async for event in client.stream("local", "Count to three.", max_tokens=16):
            if event.event_type == "stop":
                print("async stop:", event.to_dict()["finish_reason"])


if __name__ == "__main__":
    try:
        stream_in_every_dialect()
        complete_and_converse()
        tools()
        asyncio.run(in_asyncio())
    except LLMBridgeError as exc:
        sys.exit(f"{type(exc).__name__}: {exc}")
