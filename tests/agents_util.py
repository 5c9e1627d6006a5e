"""A scripted upstream for the coding-agent tests: a real HTTP server of every dialect.

It answers each generation request from a *script* named by the requested model
(``loop``, ``think``, ``error`` ...), in the dialect of the endpoint that was called
(OpenAI Chat, OpenAI Responses, Anthropic Messages, Gemini), streamed event by event.
The bytes are our own encoders' rendering of hub events — the upstream is a vendor as
far as the gateway can tell.

Scripts are stateless: the step is the number of tool results in the conversation so far,
so any request (a retry too) gets the answer that fits its history.  Which agent is calling
is read from the tools its request offers: Claude Code's ``Bash``/``Write``, Codex's
``exec_command``, Gemini CLI's ``run_shell_command``/``write_file``.  A request that
offers none of them (an agent's side request: a title, a quota probe) gets a short text.

Every request is kept in ``requests`` (path, JSON body, decoded hub request), so a test can
see a tool's output arrive in the upstream's next request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge import dialects, hub
from llmbridge.gateway import _replies as replies
from llmbridge.gateway._response import StreamResponse

NOTE = "notes.txt"  # the file the write tool creates
NOTE_TEXT = "alpha beta"
# The shell step: uppercases the note and computes a number, so its output is nowhere in the
# script (only running the command produces it).
SHELL = f"tr a-z A-Z < {NOTE} && expr 6007 '*' 7"
SHELL_OUTPUT = ("ALPHA BETA", "42049")
THOUGHT = "The user wants the note written, then read back through the shell."
ERROR_MESSAGE = "the scripted upstream broke down mid-stream"
FINAL_PREFIX = "The command printed:"

# agent -> (write step, shell step); each a (tool name, arguments)
TOOLS: dict[str, tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    "claude": (
        ("Write", {"file_path": "{cwd}/" + NOTE, "content": NOTE_TEXT + "\n"}),
        ("Bash", {"command": SHELL, "description": "Read the note back"}),
    ),
    "codex": (
        ("exec_command", {"cmd": f"printf '{NOTE_TEXT}\\n' > {NOTE}"}),
        ("exec_command", {"cmd": SHELL}),
    ),
    "gemini": (
        ("write_file", {"file_path": "{cwd}/" + NOTE, "content": NOTE_TEXT + "\n"}),
        ("run_shell_command", {"command": SHELL, "description": "Read the note back"}),
    ),
}
AGENT_BY_TOOL = {"Bash": "claude", "exec_command": "codex", "run_shell_command": "gemini"}


@dataclass
class Seen:
    path: str
    dialect: str
    body: dict[str, Any]
    request: hub.Request
    agent: str | None
    step: int


@dataclass
class ScriptedUpstream:
    cwd: str = ""  # the agent's working directory, for the file tools' absolute paths
    requests: list[Seen] = field(default_factory=list)

    def agent_of(self, request: hub.Request) -> str | None:
        names = {t.name for t in request.tools}
        return next((a for tool, a in AGENT_BY_TOOL.items() if tool in names), None)

    def events(self, script: str, request: hub.Request, dialect: str) -> list[hub.Event]:
        """The answer to ``request``: hub events, from ``script`` and the conversation so far."""
        agent = self.agent_of(request)
        results = [p for m in request.messages for p in m.parts if isinstance(p, hub.ToolResultPart)]
        step = len(results)
        self.requests[-1].agent, self.requests[-1].step = agent, step
        out: list[hub.Event] = [hub.ResponseStart(id=f"resp_{len(self.requests)}", model=request.model)]
        index = 0

        def block(kind: str, text: str, **start: Any) -> None:
            nonlocal index
            stop_fidelity = start.pop("stop_fidelity", None)
            out.extend([hub.BlockStart(index, kind, **start), hub.Delta(index, text)])
            out.append(hub.BlockStop(index, fidelity=stop_fidelity))
            index += 1

        if script == "think" and agent is not None:
            block("thinking", THOUGHT, **_thinking_fidelity(dialect, step))
        if script == "error" and agent is not None:
            block("text", "Starting. ")
            out.append(hub.Error(ERROR_MESSAGE, "api_error"))
            out.append(hub.ResponseEnd())
            return out
        if agent is None:  # a side request: a title, a probe
            block("text", "OK")
            finish = "end_turn"
        elif step < 2:
            name, args = TOOLS[agent][step]
            args = {k: v.replace("{cwd}", self.cwd) if isinstance(v, str) else v for k, v in args.items()}
            extra: dict[str, Any] = {}
            if script == "think" and dialect == "gemini":  # Gemini 3 signs the call that follows a thought
                extra["fidelity"] = {dialect: {"thoughtSignature": signature(dialect, step)}}
            block("tool_call", json.dumps(args), id=f"call_{step}_{len(self.requests)}", name=name, **extra)
            finish = "tool_use"
        else:
            block("text", f"{FINAL_PREFIX} {_result_text(results[-1]).strip()}")
            finish = "end_turn"
        out += [hub.Usage(input_tokens=100, output_tokens=20), hub.Finish(finish), hub.ResponseEnd()]  # type: ignore[arg-type]
        return out

    # -- HTTP

    async def generate(self, request: Request) -> Response:
        dialect = {
            "/v1/chat/completions": "openai-chat",
            "/v1/responses": "openai-responses",
            "/v1/messages": "anthropic-messages",
        }[request.url.path]
        return await self.serve(request, dialect, None, None)

    async def gemini(self, request: Request) -> Response:
        model, _, action = request.path_params["target"].rpartition(":")
        if action not in ("generateContent", "streamGenerateContent"):
            return replies.error("gemini", f"unknown method {action!r}", "not_found")
        return await self.serve(request, "gemini", model.removeprefix("models/"), action == "streamGenerateContent")

    async def serve(self, request: Request, dialect: str, model: str | None, stream: bool | None) -> Response:
        body = json.loads(await request.body())
        codec = dialects.get(dialect)
        hreq = codec.decode_request(body, model=model)
        hreq.model = hreq.model or model
        self.requests.append(Seen(request.url.path, dialect, body, hreq, None, 0))
        events = self.events(str(hreq.model), hreq, dialect)
        if stream is None:
            stream = bool(body.get("stream"))
        if not stream:
            response = hub.assemble(events)
            if response.error is not None:
                return replies.error_response(dialect, response.error)
            return replies.json_response(codec.encode_response(response))
        encoder = dialects.stream_encoder(codec, hreq)
        return StreamResponse(_paced([encoder.encode(e) for e in events]), media_type=codec.STREAM_CONTENT_TYPE)

    def app(self) -> Starlette:
        routes = [Route(p, self.generate, methods=["POST"]) for p in ("/v1/chat/completions", "/v1/responses")]
        routes.append(Route("/v1/messages", self.generate, methods=["POST"]))
        routes.append(Route("/v1beta/models/{target:path}", self.gemini, methods=["POST"]))
        return Starlette(routes=routes)


async def _paced(pieces: list[bytes]) -> Any:
    for piece in pieces:
        if piece:
            yield piece
            await asyncio.sleep(0)


def signature(dialect: str, step: int) -> str:
    """The opaque reasoning state the upstream attaches at ``step``: Anthropic's thinking
    ``signature``, a Responses reasoning item's ``encrypted_content``, Gemini's ``thoughtSignature``."""
    return {"anthropic-messages": "c2lnbmF0dXJl", "openai-responses": "ZW5jcnlwdGVk", "gemini": "dGhvdWdodA"}.get(
        dialect, "none"
    ) + str(step)


def _thinking_fidelity(dialect: str, step: int) -> dict[str, Any]:
    """What the vendor attaches to a thinking block (a signature, an encrypted item)."""
    if dialect == "anthropic-messages":
        return {"stop_fidelity": {dialect: {"signature": signature(dialect, step)}}}
    if dialect == "openai-responses":
        item = {"id": f"rs_{step}"}
        return {
            "id": f"rs_{step}",
            "fidelity": {dialect: item},
            "stop_fidelity": {dialect: {**item, "encrypted_content": signature(dialect, step)}},
        }
    return {}


def _result_text(part: hub.ToolResultPart) -> str:
    return "".join(p.text for p in part.content if isinstance(p, hub.TextPart))
