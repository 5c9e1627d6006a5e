"""The docs' Python examples run, and examples/quickstart.py runs against a real gateway.

Convention: every ```python block in README.md and docs/**/*.md runs, in a subprocess with
cwd = the repo root (docs refer to the corpus as ``../shared/corpus/...``; ``CORPUS`` is
predefined, top-level ``await`` works), unless the line before its fence is
``<!-- no-run: why -->`` (fragments, blocks that need a vendor key ...).  A block that talks
to ``http://127.0.0.1:8000`` runs against a gateway on the embedded local model instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmbridge.gateway import create_app
from tests.conftest import CORPUS, ROOT
from tests.gateway_util import serving

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DEFAULT_GATEWAY = "http://127.0.0.1:8000"
NO_RUN = re.compile(r"<!--\s*no-run\b.*-->")
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)

# Runs a block with top-level await allowed, so async examples run as written.
RUNNER = """
import ast, asyncio, inspect, pathlib, sys
source = sys.stdin.read()
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
namespace = {"__name__": "__main__", "CORPUS": pathlib.Path(sys.argv[2])}
result = eval(code, namespace)
if inspect.iscoroutine(result):
    asyncio.run(result)
"""


class Block:
    def __init__(self, path: Path, line: int, source: str, runs: bool):
        self.path, self.line, self.source, self.runs = path, line, source, runs
        self.needs_gateway = DEFAULT_GATEWAY in source

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def python_blocks() -> list[Block]:
    blocks = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            line = text.count("\n", 0, match.start()) + 1
            blocks.append(Block(path, line, match.group(1), runs=not NO_RUN.search(before)))
    return blocks


BLOCKS = python_blocks()
RUNNABLE = [b for b in BLOCKS if b.runs]


def run_python(args: list[str], stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout
    )


@pytest.fixture(scope="module")
def gateway():
    with serving(create_app()) as server:  # no config: the embedded local model, "local"
        yield server


def test_the_docs_have_runnable_examples():
    # The scan itself: a broken fence regex or a docs move would silently run nothing.
    names = {b.name.split(":")[0] for b in RUNNABLE}
    assert {"docs/index.md", "docs/client.md", "docs/replay.md", "docs/local-model.md"} <= names
    assert len(RUNNABLE) >= 5


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.name)
def test_docs_example_runs(block: Block, request):
    source = block.source
    if block.needs_gateway:
        gw = request.getfixturevalue("gateway")
        source = source.replace(DEFAULT_GATEWAY, gw.url)
    result = run_python(["-c", RUNNER, block.name, str(CORPUS)], stdin=source)
    assert result.returncode == 0, f"{block.name} failed:\n{result.stderr[-3000:]}"


def test_quickstart_runs_against_the_local_model(gateway):
    started = time.monotonic()
    result = run_python([str(ROOT / "examples" / "quickstart.py"), gateway.url], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for dialect in ("llm-stream", "openai-chat", "openai-responses", "anthropic-messages", "gemini", "mmsp"):
        assert f"--- {dialect}\n" in out
    assert out.count(" tokens]") == 6  # every dialect's stream reached its stop event
    assert "history: ['user', 'assistant', 'user', 'assistant']" in out
    assert "tools run: ['get_weather']" in out
    assert "async stop:" in out
    assert time.monotonic() - started < 90
