"""Coding agents, end to end: Claude Code, Codex CLI and Gemini CLI through the gateway.

Each agent runs headless (``claude -p``, ``codex exec``, ``gemini -p``) against the gateway
on an upstream of every dialect — relayed where the upstream speaks the agent's own dialect,
translated otherwise.  The upstream is scripted (tests/agents_util.py): it asks for the
agent's own file-write tool, then its own shell tool; the agent runs both; the final answer
quotes what the shell printed.  The tests check the file the agent wrote, that the shell's
output reached the upstream in its next request, and that the agent printed it.  Variants:
thinking/reasoning in every answer, and an upstream error mid-stream (the agent reports it
and exits; a timeout guards against a hang).

Every agent lives in a temporary home (HOME, CODEX_HOME, its settings) with telemetry,
auto-update and every call to its vendor off; it reaches only the gateway on 127.0.0.1.

The agents are npm packages pinned in tests/clients/agents (``make clients``); without
them these tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llmbridge.gateway import config, create_app
from tests.agents_util import ERROR_MESSAGE, NOTE, NOTE_TEXT, SHELL_OUTPUT, ScriptedUpstream, signature
from tests.conftest import ROOT
from tests.gateway_util import replay_config, serving

BIN = ROOT / "tests" / "clients" / "agents" / "node_modules" / ".bin"
DIALECTS = ["openai-chat", "openai-responses", "anthropic-messages", "gemini"]
OWN = {"claude": "anthropic-messages", "codex": "openai-responses", "gemini": "gemini"}
# What each agent shows of an upstream error mid-stream, and its exit status. Claude Code
# shows the message of an error that arrives before any text; after text it retries
# ("resume") three times, then says "API Error: Server error mid-response" — with Anthropic's
# own error event as much as with a translated one. Gemini CLI's SDK (@google/genai) sees
# an error only in a network read that is bare JSON, never in an SSE `data:` line, so it
# sees a stream without a finish reason: it retries (4 attempts, ~10 s), says so, exits 0.
SHOWN = {"claude": "API Error", "codex": ERROR_MESSAGE, "gemini": "Model stream ended without a finish reason"}
FAILED_STATUS = {"claude": 1, "codex": 1, "gemini": 0}
TIMEOUT = 90  # seconds for one agent run; a run takes a few
KEY = "sk-agent-test"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if shutil.which("node") is None or not (BIN.parent / ".installed").exists():
        pytest.skip("the coding agents are not installed: run `make clients` (needs node and npm)")
    upstream = ScriptedUpstream()
    with serving(upstream.app()) as up:
        models = {f"{script}-{d}": (d, script) for d in DIALECTS for script in ("loop", "think", "error")}
        raw = replay_config(up.url, models, gateway={"api_keys": [KEY]})
        with serving(create_app(config.parse(raw))) as gw:
            yield gw, upstream


def agent_env(home: Path) -> dict[str, str]:
    """A clean environment: a private home, nothing of the caller's, no calls home."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "CI": "1",
        # Claude Code
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        # Gemini CLI
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_TELEMETRY_ENABLED": "false",
    }
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def run_agent(
    agent: str, gateway_url: str, model: str, home: Path, work: Path, prompt: str, wrap: list[str] | None = None
) -> subprocess.CompletedProcess:
    env = agent_env(home)
    if agent == "claude":
        env |= {"ANTHROPIC_BASE_URL": gateway_url, "ANTHROPIC_API_KEY": KEY, "CLAUDE_CODE_MAX_RETRIES": "0"}
        argv = [str(BIN / "claude"), "-p", prompt, "--model", model, "--allowedTools", "Bash,Write,Read,Edit"]
    elif agent == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            f'model = "{model}"\n'
            'model_provider = "gateway"\n'
            "check_for_update_on_startup = false\n"
            "[model_providers.gateway]\n"
            'name = "llmbridge"\n'
            f'base_url = "{gateway_url}/v1"\n'
            'env_key = "LLMBRIDGE_KEY"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
            "[features]\nplugins = false\n"  # no curated-plugin sync from GitHub / chatgpt.com
            "[analytics]\nenabled = false\n"
            '[otel]\nexporter = "none"\n'
        )
        env |= {"CODEX_HOME": str(codex_home), "LLMBRIDGE_KEY": KEY}
        argv = [
            str(BIN / "codex"),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--color",
            "never",
            prompt,
        ]
    else:
        settings = home / ".gemini"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "settings.json").write_text(
            json.dumps(
                {
                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                    "privacy": {"usageStatisticsEnabled": False},
                    "telemetry": {"enabled": False},
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                }
            )
        )
        env |= {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": gateway_url}
        argv = [str(BIN / "gemini"), "-p", prompt, "-m", model, "--yolo"]
    return subprocess.run(
        [*(wrap or []), *argv],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


CASES = [(agent, d) for agent in OWN for d in DIALECTS]


def _id(case):
    agent, dialect = case
    return f"{agent}-via-{dialect}" + ("-relayed" if OWN[agent] == dialect else "")


@pytest.mark.parametrize("script", ["loop", "think"])
@pytest.mark.parametrize(("agent", "dialect"), CASES, ids=[_id(c) for c in CASES])
def test_agent_tool_loop(stack, tmp_path, agent, dialect, script):
    gw, upstream = stack
    work = tmp_path / "work"
    work.mkdir()
    upstream.cwd = str(work)
    first = len(upstream.requests)
    done = run_agent(
        agent, gw.url, f"{script}-{dialect}", tmp_path / "home", work, "Write the note, then read it back."
    )
    seen = [s for s in upstream.requests[first:] if s.agent == agent]
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert (work / NOTE).read_text().strip() == NOTE_TEXT  # the write tool ran
    assert [s.step for s in seen][-3:] == [0, 1, 2], output[-4000:]
    last = json.dumps(seen[-1].body)
    assert all(part in last for part in SHELL_OUTPUT)  # the shell's output went back upstream
    assert all(part in done.stdout for part in SHELL_OUTPUT), output[-4000:]  # and the answer quotes it
    if script == "think" and OWN[agent] == dialect:  # relayed: the vendor's reasoning state comes back to it
        assert signature(dialect, 0) in json.dumps(seen[-2].body)


@pytest.mark.parametrize(("agent", "dialect"), CASES, ids=[_id(c) for c in CASES])
def test_agent_reports_a_mid_stream_error(stack, tmp_path, agent, dialect):
    gw, upstream = stack
    work = tmp_path / "work"
    work.mkdir()
    first = len(upstream.requests)
    done = run_agent(agent, gw.url, f"error-{dialect}", tmp_path / "home", work, "Write the note.")
    output = done.stdout + done.stderr
    assert SHOWN[agent] in output, output[-4000:]
    assert done.returncode == FAILED_STATUS[agent], output[-4000:]
    assert not (work / NOTE).exists()  # no tool ran
    assert all(s.step == 0 for s in upstream.requests[first:])


ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6?, "([^"]+)"')  # strace's IPv4 and IPv6 forms


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to watch the agents' sockets")
@pytest.mark.parametrize("agent", list(OWN))
def test_agents_reach_only_the_gateway(stack, tmp_path, agent):
    """Every socket an agent opens (its child processes' too) goes to 127.0.0.1: no telemetry,
    update check, plugin sync or name lookup leaves the machine."""
    gw, upstream = stack
    work = tmp_path / "work"
    work.mkdir()
    upstream.cwd = str(work)
    trace = tmp_path / "strace.txt"
    wrap = ["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace)]
    done = run_agent(agent, gw.url, f"loop-{OWN[agent]}", tmp_path / "home", work, "Write the note.", wrap)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    calls = trace.read_text(errors="replace")
    addresses = {a or b for a, b in ADDRESS.findall(calls)}
    assert addresses and addresses <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, addresses
    assert "htons(53)" not in calls  # no DNS query either
