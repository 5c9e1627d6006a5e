"""The OpenAI Agents SDK running a three-turn conversation through the gateway, chained by
``previous_response_id`` (the gateway keeps the conversation for a stateless upstream).

Run by tests/test_responses_store.py in the client environment (.venv-clients, built by
``make clients``): ``python py_agents.py BASE_URL API_KEY MODEL``; prints
``{"ids": [...], "texts": [...]}`` for the three turns.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(base: str, key: str, model: str) -> dict[str, list[str]]:
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    client = AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
    agent = Agent(name="helper", instructions="be brief", model=OpenAIResponsesModel(model=model, openai_client=client))
    ids: list[str] = []
    texts: list[str] = []
    previous = None
    for question in ("first question", "second question", "third question"):
        result = await Runner.run(agent, question, previous_response_id=previous)
        previous = result.last_response_id
        ids.append(previous or "")
        texts.append(str(result.final_output))
    return {"ids": ids, "texts": texts}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
