"""The codec library, the client SDK and the CLI's translate/validate install without the
gateway's and the team features' dependencies (pyproject's ``gateway`` and ``teams`` extras):
run in a fresh interpreter where importing any of those fails."""

from __future__ import annotations

import subprocess
import sys

GATEWAY_ONLY = ("starlette", "uvicorn", "httptools", "uvloop", "prometheus_client", "opentelemetry", "redis", "asyncpg")

SCRIPT = f"""
import importlib, sys
BLOCKED = {GATEWAY_ONLY!r}

class Absent:  # as if the extras were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None

sys.meta_path.insert(0, Absent())
for name in ("llmbridge", "llmbridge.sse", "llmbridge.hub", "llmbridge.client", "llmbridge.bindings",
             "llmbridge.conformance", "llmbridge.unievent", "llmbridge.media", "llmbridge.cli"):
    importlib.import_module(name)
from llmbridge import dialects
for name in dialects.NAMES + dialects.MORE_NAMES:
    dialects.get(name)
from llmbridge import cli
sys.exit(cli.main(["serve", "--port", "1"]))
"""


def test_the_codec_library_needs_no_gateway_dependency():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert "llmbridge[gateway]" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and out.returncode != 0
