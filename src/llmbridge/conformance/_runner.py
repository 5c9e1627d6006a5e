"""The I/O shell of the conformance suite: the requests, the bindings, the verdicts.

:func:`run` sends a fixed set of requests to ``URL/v1/stream`` (plain HTTP/1.1 or HTTP/2 as
httpx negotiates, the binary binding, the WebSocket binding) and checks every answer with
:class:`~._stream.StreamChecker`.  Every check of :data:`~._catalogue.CHECKS` ends as
``pass``, ``fail`` or ``skip`` (not exercised: the server never did the thing, or the
binding is not offered).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec

from ._catalogue import CHECKS, Check
from ._stream import Findings, StreamChecker, sse_events

__all__ = ["Report", "Result", "run"]

REQUEST_TYPE = "application/llm-request+json"
BINARY_TYPE = "application/llm-stream+binary"
PROFILE_ACCEPT = 'text/event-stream; profile="llm-stream-1.0"'
MAX_BODY = 16 * 1024 * 1024  # what the suite reads of one answer (a runaway server must not eat memory)
_KNOWN_TYPE_BYTES = {
    0x01: "stream.start",
    0x02: "content.delta",
    0x03: "tool.call",
    0x04: "content.stop",
    0x05: "usage",
    0x06: "error",
    0x07: "stream.end",
}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@dataclass
class Result:
    check: Check
    status: str  # "pass" | "fail" | "skip"
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        c = self.check
        return {
            "id": c.id,
            "section": c.section,
            "level": c.level,
            "title": c.title,
            "status": self.status,
            "details": self.details,
        }


@dataclass
class Report:
    url: str
    model: str
    results: list[Result]

    @property
    def must_failures(self) -> list[Result]:
        return [r for r in self.results if r.status == "fail" and r.check.level == "MUST"]

    @property
    def ok(self) -> bool:
        """No MUST check failed."""
        return not self.must_failures

    def status_of(self, check_id: str) -> str:
        for r in self.results:
            if r.check.id == check_id:
                return r.status
        raise KeyError(check_id)


class _Suite:
    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None,
        tool_model: str | None,
        cancel_model: str | None,
        timeout: float,
        http2: bool,
        verify: Any,
        log: Callable[[str], None] | None,
    ) -> None:
        self.base = url.rstrip("/")
        self.endpoint = self.base + "/v1/stream"
        self.model = model
        self.tool_model = tool_model or model
        self.cancel_model = cancel_model or model
        self.api_key = api_key
        self.f = Findings()
        self.log = log or (lambda _: None)
        self.timeout = timeout
        self.verify = verify
        # HTTP/2 on http:// is h2c with prior knowledge (httpx does no Upgrade: h2c); on https://, ALPN
        h2c = http2 and url.startswith("http://")
        self.http = httpx.Client(timeout=httpx.Timeout(timeout, connect=10), http1=not h2c, http2=http2, verify=verify)

    # -- helpers

    def headers(self, content_type: str | None = REQUEST_TYPE, accept: str | None = None) -> dict[str, str]:
        h = {}
        if content_type:
            h["content-type"] = content_type
        if accept:
            h["accept"] = accept
        if self.api_key:
            h["authorization"] = f"Bearer {self.api_key}"
        return h

    def body(self, text: str = "Say hello in one short sentence.", **extra: Any) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": text}],
            "parameters": {"max_tokens": 24, "temperature": 0},
        }
        for key, value in extra.items():
            if key == "parameters":
                body["parameters"] = {**body["parameters"], **value}
            else:
                body[key] = value
        return body

    def post(self, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and (at most MAX_BODY bytes of) body; transport errors raise httpx errors."""
        content = body if isinstance(body, bytes) else msgspec.json.encode(body)
        with self.http.stream("POST", self.endpoint, content=content, headers=headers) as r:
            parts, size = [], 0
            for chunk in r.iter_bytes():
                parts.append(chunk)
                size += len(chunk)
                if size > MAX_BODY:
                    break
            return r.status_code, dict(r.headers), b"".join(parts)

    def sse_turn(
        self,
        where: str,
        body: Any,
        headers: dict[str, str] | None = None,
        request_id: str | None = None,
        tools: set[str] | None = None,
    ) -> tuple[int, StreamChecker | None]:
        """One request expected to stream SSE; runs every stream check over the answer."""
        try:
            status, rh, data = self.post(body, headers or self.headers())
        except httpx.HTTPError as exc:
            self.f.fail("request.media-type", f"{where}: transport error {type(exc).__name__}: {exc}")
            return 0, None
        if status != 200:
            return status, None
        ctype = rh.get("content-type", "").split(";")[0].strip().lower()
        self.f.check("stream.content-type", ctype == "text/event-stream", f"{where}: Content-Type {ctype!r}")
        checker = StreamChecker(self.f, request_id=request_id, tools=tools, where=f"{where}: ")
        for event in sse_events(data, self.f):
            checker.observe(event.event, event.data)
        checker.finish()
        return status, checker

    # -- scenarios

    def basic(self) -> None:
        rid = "conformance-" + uuid.uuid4().hex[:12]
        status, _checker = self.sse_turn("basic", self.body(metadata={"request_id": rid}), request_id=rid)
        self.f.check("request.media-type", status == 200, f"basic request answered HTTP {status}")

    def version_param(self) -> None:
        status, _ = self.sse_turn("version", self.body(), self.headers(f"{REQUEST_TYPE}; version=1.0"))
        self.f.check("request.version-param", status == 200, f"answered HTTP {status}")

    def unknown(self) -> None:
        cases = {
            "request.unknown-fields": self.body(conformance_unknown_field={"nested": [1, 2]}),
            "request.unknown-parameters": self.body(parameters={"conformance_unknown_knob": 0.5}),
            "request.unknown-extensions": self.body(extensions={"vendor:conformance-unknown": {"x": 1}}),
        }
        for check, body in cases.items():
            status, _ = self.sse_turn(check, body)
            self.f.check(check, status == 200, f"answered HTTP {status}")

    def multibyte(self) -> None:
        text = "Répète ceci: 日本語のテキスト ✓ 🎉 Ünïcödé — Ελληνικά"
        status, checker = self.sse_turn("multibyte", self.body(text))
        self.f.check("content.multibyte", status == 200 and checker is not None, f"answered HTTP {status}")

    def large(self) -> None:
        text = "Summarise: " + ("the quick brown fox jumps over the lazy dog; " * 1500)  # ~66 KB
        try:
            status, _rh, data = self.post(self.body(text), self.headers())
        except httpx.HTTPError as exc:
            self.f.fail("errors.large-request", f"transport error {type(exc).__name__}")
            return
        if status == 200:
            checker = StreamChecker(self.f, where="large: ")
            for event in sse_events(data, self.f):
                checker.observe(event.event, event.data)
            checker.finish()
            self.f.ok("errors.large-request")
        else:
            self.f.check("errors.large-request", 400 <= status < 500, f"answered HTTP {status}")

    def negotiation(self) -> None:
        status, _, _ = self.post(b"hello", self.headers("text/plain"))
        self.f.check("negotiation.415", status == 415, f"text/plain body answered HTTP {status}")
        status, _ = self.sse_turn("profile", self.body(), self.headers(REQUEST_TYPE, PROFILE_ACCEPT))
        self.f.check("negotiation.profile", status == 200, f"answered HTTP {status}")
        status, _, _ = self.post(self.body(), self.headers(REQUEST_TYPE, "application/xml"))
        self.f.check("negotiation.406", status == 406, f"Accept: application/xml answered HTTP {status}")

    def _json_error(self, check: str, what: str, body: Any) -> None:
        status, _rh, data = self.post(body, self.headers())
        if not self.f.check(check, 400 <= status < 500, f"{what} answered HTTP {status}"):
            return
        try:
            parsed = msgspec.json.decode(data)
            good = type(parsed) is dict and "error" in parsed
        except msgspec.DecodeError:
            good = False
        self.f.check(check, good, f"{what}: the {status} body is not a JSON object with 'error': {data[:80]!r}")

    def errors(self) -> None:
        self._json_error("errors.bad-request", "a body that is not JSON", b"{not json")
        self._json_error("errors.bad-request", "a request without messages", {"model": self.model})
        self._json_error(
            "errors.unknown-model",
            "an unknown model",
            {**self.body(), "model": "no-such-model-" + uuid.uuid4().hex[:8]},
        )

    def tool(self) -> None:
        body = self.body(
            "What is the weather in Vienna? Use the tool.",
            tools=[WEATHER_TOOL],
            tool_choice={"name": "get_weather"},
            parameters={"max_tokens": 64},
        )
        body["model"] = self.tool_model
        status, checker = self.sse_turn("tool", body, tools={"get_weather"})
        if checker is None or not checker.tool_calls:
            why = f"HTTP {status}" if checker is None else "the model answered without a tool.call"
            for check in ("tool.shape", "tool.stop-reason", "tool.declared"):
                self.f.skip(check, why)

    def cancel(self) -> None:
        body = self.body("Count from 1 to 300, one number per line.", parameters={"max_tokens": 400})
        body["model"] = self.cancel_model
        try:
            with self.http.stream(
                "POST", self.endpoint, content=msgspec.json.encode(body), headers=self.headers()
            ) as r:
                for _ in r.iter_bytes():
                    break  # the first bytes arrived: go away mid-stream
        except httpx.HTTPError as exc:
            self.f.fail("cancel.server-survives", f"the cancelled request failed: {type(exc).__name__}")
            return
        status, _ = self.sse_turn("after-cancel", self.body())
        self.f.check("cancel.server-survives", status == 200, f"the request after a cancel answered HTTP {status}")

    # -- binary binding

    def binary(self) -> None:
        try:
            status, rh, data = self.post(self.body(), self.headers(REQUEST_TYPE, BINARY_TYPE))
        except httpx.HTTPError as exc:
            self.f.fail("binary.content-type", f"transport error {type(exc).__name__}")
            return
        ctype = rh.get("content-type", "").split(";")[0].strip().lower()
        if status == 406 or (status == 200 and ctype == "text/event-stream"):
            for check in ("binary.content-type", "binary.framing", "binary.type-byte", "binary.stream"):
                self.f.skip(check, "the server does not offer the binary binding")
            return
        if not self.f.check("binary.content-type", status == 200 and ctype == BINARY_TYPE, f"HTTP {status} {ctype!r}"):
            return
        sub = Findings()
        checker = StreamChecker(sub, where="binary: ")
        pos, ok = 0, True
        while pos < len(data):
            if len(data) - pos < 5:
                self.f.fail("binary.framing", f"{len(data) - pos} bytes left: a cut-off frame header")
                ok = False
                break
            type_byte, length = struct.unpack_from(">BI", data, pos)
            if pos + 5 + length > len(data):
                self.f.fail("binary.framing", f"frame at byte {pos} says {length} bytes, {len(data) - pos - 5} left")
                ok = False
                break
            payload = data[pos + 5 : pos + 5 + length]
            pos += 5 + length
            if type_byte == 0x41:
                if length:
                    self.f.fail("binary.framing", "keep-alive frame with a payload")
                continue
            if type_byte in _KNOWN_TYPE_BYTES or type_byte == 0x40:
                try:
                    text = payload.decode()
                except UnicodeDecodeError:
                    self.f.fail("binary.framing", f"frame at byte {pos} is not UTF-8")
                    ok = False
                    continue
                name = _KNOWN_TYPE_BYTES.get(type_byte)
                if name is not None:
                    kind = _json_type(text)
                    self.f.check(
                        "binary.type-byte",
                        kind is None or kind == name,
                        f"type byte 0x{type_byte:02x} carries {kind!r}",
                    )
                checker.observe(None, text)
            elif 0x08 <= type_byte <= 0x3F or 0x42 <= type_byte <= 0x7F:
                continue  # ignorable reserved values
            else:
                self.f.fail("binary.framing", f"type byte 0x{type_byte:02x} is not defined")
                ok = False
                break
        if ok:
            self.f.ok("binary.framing")
        checker.finish()
        self._binding_verdict("binary.stream", sub)

    def _binding_verdict(self, check: str, sub: Findings) -> bool:
        """A binding's turn: its MUST breaks fail ``check``; SHOULD breaks count under their own ids."""
        must = False
        for inner, items in sub.failures.items():
            if CHECKS[inner].level == "MUST":
                must = True
                self.f.fail(check, f"[{inner}] {items[0]}")
            else:
                for item in items:
                    self.f.fail(inner, item)
        if not must:
            self.f.ok(check)
        return not must

    # -- WebSocket binding

    def websocket(self) -> None:
        try:
            from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
            from websockets.sync.client import ClientConnection, connect
        except ImportError:
            for check in (
                "ws.subprotocol",
                "ws.stream",
                "ws.turns",
                "ws.cancel",
                "ws.bad-request",
                "ws.binary-message",
            ):
                self.f.skip(check, "the websockets package is not installed")
            return
        url = "ws" + self.endpoint[4:] if self.endpoint.startswith("http") else self.endpoint
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        ssl = None
        if url.startswith("wss:") and self.verify is not True:
            import ssl as _ssl

            if isinstance(self.verify, _ssl.SSLContext):
                ssl = self.verify
            elif isinstance(self.verify, str):  # a CA bundle, as httpx takes it
                ssl = _ssl.create_default_context(cafile=self.verify)
            else:
                ssl = _ssl.create_default_context()
                ssl.check_hostname = False
                ssl.verify_mode = _ssl.CERT_NONE
        stack = contextlib.ExitStack()
        try:
            ws = stack.enter_context(
                connect(
                    url,
                    subprotocols=["llm-stream.v1"],
                    additional_headers=headers,
                    open_timeout=min(self.timeout, 10.0),
                    max_size=MAX_BODY,
                    ssl=ssl,
                    create_connection=_shutting_down(ClientConnection),
                )
            )
        except (InvalidStatus, InvalidHandshake, OSError) as exc:
            for check in (
                "ws.subprotocol",
                "ws.stream",
                "ws.turns",
                "ws.cancel",
                "ws.bad-request",
                "ws.binary-message",
            ):
                self.f.skip(check, f"no WebSocket on {url}: {exc}")
            return
        try:
            self.f.check("ws.subprotocol", ws.subprotocol == "llm-stream.v1", f"selected {ws.subprotocol!r}")
            for turn in (1, 2):
                ws.send(msgspec.json.encode(self.body()).decode())
                sub = Findings()
                checker = StreamChecker(sub, named=False, where=f"ws turn {turn}: ")
                self._ws_turn(ws, checker)
                good = self._binding_verdict("ws.stream", sub)
                if turn == 2:
                    self.f.check("ws.turns", checker.ended and good, "the second turn was not a whole stream")
            # cancel: mid-stream first; a turn that ended on its own before the cancel arrived
            # (a short answer) proves nothing either way, so then once more with the cancel
            # sent right behind the request, which lands while the turn is surely running
            body = self.body("Count from 1 to 300.", parameters={"max_tokens": 400})
            body["model"] = self.cancel_model
            problems = []
            for immediate in (False, True):
                ws.send(msgspec.json.encode(body).decode())
                sub = Findings()
                checker = StreamChecker(sub, named=False, where="ws cancel: ")
                if not immediate:
                    first = ws.recv(timeout=self.timeout)
                    checker.observe(None, first if isinstance(first, str) else first.decode())
                ws.send('{"type":"cancel"}')
                self._ws_turn(ws, checker)
                bad = sub.failures.keys() - {"usage.present", "lifecycle.stop-reason"}
                if checker.ended and checker.errored and not bad:
                    problems = []
                    break
                problems.append(
                    f"after cancel{' (sent at once)' if immediate else ''}: events "
                    f"{checker.types[-3:]} {dict((k, sub.failures[k]) for k in bad)}"
                )
            if problems:
                for problem in problems:
                    self.f.fail("ws.cancel", problem)
            else:
                self.f.ok("ws.cancel")
            # a bad request: a failed turn, the connection still usable
            ws.send("{not json")
            sub = Findings()
            checker = StreamChecker(sub, named=False, where="ws bad request: ")
            self._ws_turn(ws, checker)
            self._carry(sub, ("error.shape", "error.last"))
            good = checker.ended and checker.errored and not sub.failures
            if self.f.check("ws.bad-request", good, f"events {checker.types}"):
                ws.send(msgspec.json.encode(self.body()).decode())
                sub = Findings()
                checker = StreamChecker(sub, named=False, where="ws after bad request: ")
                self._ws_turn(ws, checker)
                self.f.check("ws.bad-request", checker.ended, "the connection did not serve the next turn")
            # a binary message: close 1003
            ws.send(b"\x01\x00\x00\x00\x02{}")
            try:
                while True:
                    ws.recv(timeout=min(self.timeout, 5.0))  # a conforming server closes at once
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                self.f.check("ws.binary-message", code == 1003, f"closed with {code}")
            except TimeoutError:
                self.f.fail("ws.binary-message", "the connection stayed open")
        except ConnectionClosed as exc:
            self.f.fail("ws.stream", f"the server closed the connection: {exc}")
        except TimeoutError:
            self.f.fail("ws.stream", "no message within the timeout")
        finally:
            stack.close()

    def _carry(self, sub: Findings, checks: tuple[str, ...]) -> None:
        """Count the generic checks ``checks`` that a binding's turn exercised."""
        for check in checks:
            if check in sub.failures:
                for item in sub.failures[check]:
                    self.f.fail(check, item)
            elif check in sub.exercised:
                self.f.ok(check)

    def _ws_turn(self, ws: Any, checker: StreamChecker) -> None:
        while not checker.ended:
            message = ws.recv(timeout=self.timeout)
            if isinstance(message, bytes):
                checker.f.fail("ws.stream", "a binary message from the server")
                message = message.decode("utf-8", "replace")
            checker.observe(None, message)
        checker.finish()


def _shutting_down(base: type[Any]) -> type[Any]:
    """``base`` (websockets' sync ``ClientConnection``), its socket shut down before it is closed.

    The sync client reads in a thread of its own and, once it gives up on a connection (a
    handshake that failed or timed out, a close that timed out), closes the socket and then
    joins that thread *without a timeout*.  Over TLS the thread can be inside a blocking read
    that ``close()`` does not interrupt on Linux: a TLS 1.3 server sends its session tickets
    right after the handshake, the reader's poll sees them as readable, and the TLS read that
    consumes them goes on waiting for application data that a server which never answers the
    upgrade never sends.  The join then waits for ever (seen once in CI, against a server
    that failed the WebSocket handshake).  ``shutdown(2)`` does interrupt the read (it returns
    end of file), so the thread ends and the join returns.  The TCP socket's own ``shutdown``
    is called, not ``SSLSocket.shutdown``, which would first drop the TLS object the reading
    thread is using."""

    class ShuttingDownConnection(base):  # type: ignore[misc, valid-type]
        def close_socket(self) -> None:
            with contextlib.suppress(OSError):  # (not connected, or closed already)
                socket.socket.shutdown(self.socket, socket.SHUT_RDWR)
            super().close_socket()

    return ShuttingDownConnection


def _json_type(text: str) -> str | None:
    try:
        obj = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    kind = obj.get("type") if type(obj) is dict else None
    return kind if type(kind) is str else None


SCENARIOS = (
    "basic",
    "version_param",
    "unknown",
    "multibyte",
    "large",
    "negotiation",
    "errors",
    "tool",
    "cancel",
    "binary",
    "websocket",
)


def run(
    url: str,
    model: str = "local",
    *,
    api_key: str | None = None,
    tool_model: str | None = None,
    cancel_model: str | None = None,
    timeout: float = 120.0,
    http2: bool = False,
    verify: Any = True,
    log: Callable[[str], None] | None = None,
) -> Report:
    """Run every check against the server at ``url`` (its root; the suite calls ``/v1/stream``).

    Returns the :class:`Report`; never raises for what the server does (a refused
    connection is a failed check).  ``tool_model``: the model for the tool-call scenario,
    ``cancel_model``: for the cancellation scenarios (default ``model`` for both); ``http2``:
    HTTP/2 — h2c with prior knowledge on ``http://``, ALPN on ``https://``; ``verify``: TLS verification
    as httpx takes it (``False`` for a self-signed test server).
    """
    if isinstance(verify, str):  # a CA bundle: one context for httpx and the WebSocket client
        import ssl

        verify = ssl.create_default_context(cafile=verify)
    suite = _Suite(url, model, api_key, tool_model, cancel_model, timeout, http2, verify, log)
    try:
        for name in SCENARIOS:
            suite.log(f"scenario {name}")
            try:
                getattr(suite, name)()
            except httpx.HTTPError as exc:
                suite.f.fail("request.media-type", f"{name}: transport error {type(exc).__name__}: {exc}")
    finally:
        suite.http.close()
    results = []
    for check in CHECKS.values():
        failures = suite.f.failures.get(check.id)
        if failures:
            results.append(Result(check, "fail", failures))
        elif check.id in suite.f.exercised:
            results.append(Result(check, "pass"))
        else:
            results.append(Result(check, "skip", [suite.f.skips.get(check.id, "not exercised by this server")]))
    return Report(url, model, results)
