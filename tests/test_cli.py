"""The ``llmbridge`` command, run as a real subprocess (and in-process where a fake is needed)."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import types
from pathlib import Path

import pytest

import llmbridge
from llmbridge import cli, dialects
from llmbridge.dialects import rules

SEED = Path(__file__).parent / "data" / "llm-stream" / "seed-example.sse"
VIOLATION_LINE = re.compile(r"^(event \d+|end of stream): [a-z-]+: .+$")


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmbridge", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env={**os.environ, "LLMBRIDGE_DEBUG": ""},
    )


def events_of(body: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]


def test_dialects_lists_every_name():
    result = run("dialects")
    assert result.returncode == 0
    assert [line.split()[0] for line in result.stdout.decode().splitlines()] == [*dialects.NAMES, *dialects.MORE_NAMES]


def test_validate_clean_stream():
    result = run("validate", "--format", "llm-stream", str(SEED))
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_validate_lists_each_violation():
    body = SEED.read_bytes().replace(b'"seq":3,', b'"seq":4,', 1).replace(b"event: usage", b"event: tokens")
    result = run("validate", "--format", "llm-stream", "-", stdin=body)
    assert result.returncode == 1
    lines, _, legend = result.stdout.decode().partition("\n\nrules:\n")
    lines = lines.splitlines()
    assert lines and all(VIOLATION_LINE.match(line) for line in lines), lines
    assert lines[0].startswith("event 3: seq: ")
    assert any(line.startswith("event 6: event-name: ") for line in lines)
    # then each broken rule once, with its one-line meaning from dialects.rules
    assert legend.splitlines() == [f"  {rule}: {rules.RULES[rule]}" for rule in ("seq", "event-name")]


def test_validate_truncated_stream():
    body = SEED.read_bytes()[:-120]
    result = run("validate", "--format", "llm-stream", stdin=body)
    assert result.returncode == 1
    assert "end of stream: end-missing: " in result.stdout.decode()


def test_translate_llm_stream_to_itself_is_exact():
    result = run("translate", "--from", "llm-stream", "--to", "llm-stream", str(SEED))
    assert (result.returncode, result.stderr) == (0, b"")
    assert result.stdout == SEED.read_bytes()


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        (SEED.read_bytes()[:500], "json"),  # cut inside an event's JSON
        (SEED.read_bytes().rsplit(b"event: stream.end", 1)[0], "end-missing"),  # transport closed early
        (SEED.read_bytes().replace(b'"seq":2,', b'"seq":9,'), "seq"),
    ],
)
def test_translate_malformed_input(body, rule):
    result = run("translate", "--from", "llm-stream", "--to", "llm-stream", stdin=body)
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert re.search(rf"(event \d+|end of stream): {rule}: ", stderr), stderr
    out = events_of(result.stdout)
    assert [e["type"] for e in out[-2:]] == ["error", "stream.end"]  # never a clean end
    assert [e["seq"] for e in out] == list(range(len(out)))


def test_translate_streams_as_input_arrives():
    """The first events come out before the input has ended."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmbridge", "translate", "--from", "llm-stream", "--to", "llm-stream"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    body = SEED.read_bytes()
    head, tail = body[:300], body[300:]
    try:
        proc.stdin.write(head)
        proc.stdin.flush()
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        assert selector.select(timeout=30), "no output while the input is still open"
        first = os.read(proc.stdout.fileno(), 65536)
        assert first.startswith(b"event: stream.start\n")
        proc.stdin.write(tail)
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert first + rest == body


def test_unknown_dialect_is_a_clear_error():
    result = run("translate", "--from", "klingon", "--to", "llm-stream", stdin=b"")
    assert result.returncode == 2
    assert b"unknown dialect 'klingon'" in result.stderr and b"Traceback" not in result.stderr


def test_missing_file_is_a_clear_error():
    result = run("validate", "--format", "llm-stream", "/nonexistent/body.sse")
    assert result.returncode == 2 and b"cannot read /nonexistent/body.sse" in result.stderr


def test_dialect_not_available_yet(monkeypatch, capsys):
    monkeypatch.setitem(dialects._MODULES, "gemini", "not_written_yet")
    monkeypatch.delitem(dialects._LOADED, "gemini", raising=False)  # an earlier test may have loaded it
    assert cli.main(["translate", "--from", "llm-stream", "--to", "gemini", str(SEED)]) == 3
    assert "dialect 'gemini' is not available" in capsys.readouterr().err
    half_done = types.ModuleType("half_done")  # a module that has landed without its encoder yet
    monkeypatch.setattr(dialects, "get", lambda name: half_done)
    assert cli.main(["validate", "--format", "gemini", str(SEED)]) == 3
    assert "no StreamDecoder" in capsys.readouterr().err


def test_serve_and_replay_call_their_modules(monkeypatch):
    calls = []
    gateway = types.ModuleType("llmbridge.gateway")
    gateway.serve = lambda config, host, port, workers: calls.append(("gateway", config, host, port, workers))
    replay = types.ModuleType("llmbridge.replay")
    replay.serve = lambda directory, host, port, seed, dialect, delay_ms: calls.append(
        ("replay", directory, host, port, seed, dialect, delay_ms)
    )
    for name, module in (("gateway", gateway), ("replay", replay)):
        monkeypatch.setitem(sys.modules, f"llmbridge.{name}", module)
        monkeypatch.setattr(llmbridge, name, module, raising=False)
    assert cli.main(["serve", "--config", "gw.toml", "--port", "9000"]) == 0
    assert cli.main(["serve", "--workers", "3"]) == 0
    assert cli.main(["serve", "--workers", "0"]) == 2
    assert cli.main(["replay", "corpus", "--seed", "7", "--format", "llm-stream", "--host", "0.0.0.0"]) == 0
    assert cli.main(["replay", "corpus", "--delay-ms", "10"]) == 0
    assert calls == [
        ("gateway", "gw.toml", "127.0.0.1", 9000, 1),
        ("gateway", None, "127.0.0.1", 8000, 3),
        ("replay", "corpus", "0.0.0.0", 8001, 7, "llm-stream", 0.0),
        ("replay", "corpus", "127.0.0.1", 8001, 0, None, 10.0),
    ]


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "llmbridge"
    if not script.exists():
        pytest.skip("package not installed into this interpreter's environment")
    result = subprocess.run(
        [str(script), "validate", "--format", "llm-stream", str(SEED)], capture_output=True, timeout=60
    )
    assert result.returncode == 0
