"""Popular third-party clients read the gateway unchanged, through keep-alives, on every endpoint.

LiteLLM (as a client), the ``llm`` CLI, pydantic-ai, LangChain and the Vercel AI SDK (Node),
each pointed at the gateway's base URL the way its documentation says, read an answer whose
upstream is silent for several keep-alive intervals: relayed from the same dialect and
translated from another.  Each ends with the full text.

The clients live in their own environments (they pin versions of the official SDKs that
the test environment must not inherit): ``make clients`` builds ``.venv-clients`` and
``tests/clients/js/node_modules``; CI builds them.  Without them these tests skip, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from tests.gateway_util import TEXT_CAPTURES, capture_text, slow_gateway

PYTHON = ROOT / ".venv-clients" / "bin" / "python"
JS = ROOT / "tests" / "clients" / "js"
KEEPALIVE, STALL = 0.15, 0.8
SOURCES = TEXT_CAPTURES
# client -> the endpoints (dialects) it speaks
CLIENTS = {
    "litellm": ["openai-chat", "anthropic-messages", "gemini"],
    "llm": ["openai-chat"],
    "pydantic-ai": ["openai-chat", "openai-responses", "anthropic-messages", "gemini"],
    "langchain": ["openai-chat", "openai-responses", "anthropic-messages", "gemini"],
    "vercel-ai": ["openai-chat", "openai-responses", "anthropic-messages", "gemini"],
}
CASES = [
    (client, endpoint, source)
    for client, endpoints in CLIENTS.items()
    for endpoint in endpoints
    for source in dict.fromkeys([endpoint, "anthropic-messages" if endpoint != "anthropic-messages" else "gemini"])
]


@pytest.fixture(scope="module")
def gw():
    with slow_gateway(KEEPALIVE, STALL, idle=20) as server:
        yield server


def run_client(client: str, endpoint: str, base: str, model: str) -> subprocess.CompletedProcess:
    if client == "vercel-ai":
        if shutil.which("node") is None or not (JS / "node_modules").is_dir():
            pytest.skip("the Vercel AI SDK is not installed: run `make clients` (needs node and npm)")
        argv = ["node", str(JS / "client.mjs"), endpoint, base, model]
    else:
        if not PYTHON.exists():
            pytest.skip("the third-party Python clients are not installed: run `make clients`")
        argv = [str(PYTHON), str(ROOT / "tests" / "clients" / "py_client.py"), client, endpoint, base, model]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize(("client", "endpoint", "source"), CASES, ids=lambda x: x)
def test_client_reads_a_slow_stream_through_keepalives(gw, client, endpoint, source):
    done = run_client(client, endpoint, gw.url, f"slow-{source}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["text"] == capture_text(source)
