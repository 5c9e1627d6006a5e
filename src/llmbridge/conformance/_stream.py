"""Sans-I/O checking of one LLM-Stream event stream, independent of our own decoder.

:class:`StreamChecker` takes the events of one turn (``observe(name, data)``) however they
were framed, and records for every check of the catalogue whether it was exercised and
which failures it saw.  :func:`sse_events` cuts an SSE body into events and checks the SSE
layer itself (UTF-8, line syntax).  Nothing here reads a socket.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import sse

__all__ = ["Findings", "StreamChecker", "sse_events"]

SAFE_SEQ = 2**53
_SSE_FIELDS = (b"event", b"data", b"id", b"retry")


class Findings:
    """Per check id: exercised or not, and the failures seen (each a short sentence)."""

    def __init__(self) -> None:
        self.exercised: set[str] = set()
        self.failures: dict[str, list[str]] = {}
        self.skips: dict[str, str] = {}

    def ok(self, check: str) -> None:
        self.exercised.add(check)

    def fail(self, check: str, message: str) -> None:
        self.exercised.add(check)
        items = self.failures.setdefault(check, [])
        if len(items) < 5:  # enough to see the pattern; a broken stream could repeat one forever
            items.append(message)

    def check(self, check: str, good: bool, message: str) -> bool:
        if good:
            self.ok(check)
        else:
            self.fail(check, message)
        return good

    def skip(self, check: str, why: str) -> None:
        self.skips.setdefault(check, why)

    def merge(self, other: Findings, prefix: str = "") -> None:
        self.exercised |= other.exercised
        for check, items in other.failures.items():
            for item in items:
                self.fail(check, f"{prefix}{item}")
        for check, why in other.skips.items():
            self.skip(check, why)


def sse_events(body: bytes, findings: Findings) -> list[sse.Event]:
    """The events of an SSE body; checks ``stream.utf8`` and ``stream.sse-lines`` on the way."""
    try:
        body.decode("utf-8")
        findings.ok("stream.utf8")
    except UnicodeDecodeError as exc:
        findings.fail("stream.utf8", f"byte {exc.start} is not UTF-8")
    bad = 0
    for line in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name = line.split(b":", 1)[0]
        if name not in _SSE_FIELDS:
            bad += 1
            if bad <= 3:
                findings.fail("stream.sse-lines", f"line {line[:60]!r} is neither a known field nor a comment")
    if not bad:
        findings.ok("stream.sse-lines")
    decoder = sse.Decoder()
    events = decoder.feed(body) + decoder.close()
    return events


class StreamChecker:
    """The §5 rules over one turn's events.

    ``request_id``: the ``metadata.request_id`` that was sent (checks the echo);
    ``tools``: the names of the tools declared in the request (checks ``tool.declared``);
    ``named``: whether events carry a name of their own (SSE ``event:``, a binary type byte)
    that must equal the JSON ``type``.
    """

    def __init__(
        self,
        findings: Findings,
        *,
        request_id: str | None = None,
        tools: set[str] | None = None,
        named: bool = True,
        where: str = "",
    ) -> None:
        self.f = findings
        self.request_id = request_id
        self.tools = tools
        self.named = named
        self.where = where
        self.n = -1
        self.next_seq = 0
        self.started = False
        self.ended = False
        self.errored = False
        self.open_blocks: set[int] = set()
        self.stopped: set[int] = set()
        self.tool_calls: list[dict] = []
        self.last_stop_reason: Any = None
        self.saw_usage = False
        self.text = []  # content text, for tests of what came through
        self.types: list[str] = []

    def _fail(self, check: str, message: str) -> None:
        self.f.fail(check, f"{self.where}event {self.n}: {message}")

    def observe(self, name: str | None, data: str) -> None:
        self.n += 1
        f = self.f
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            self._fail("stream.one-json-object", f"data is not one complete JSON object ({exc})")
            self.next_seq += 1
            return
        if type(obj) is not dict:
            self._fail("stream.one-json-object", f"data is a JSON {type(obj).__name__}, not an object")
            self.next_seq += 1
            return
        f.ok("stream.one-json-object")
        v, seq, kind = obj.get("v"), obj.get("seq"), obj.get("type")
        good = type(v) is str and v.split(".", 1)[0] == "1" and type(seq) is int and type(kind) is str
        if not good:
            self._fail("envelope.fields", f"envelope v={v!r} seq={seq!r} type={kind!r}")
        else:
            f.ok("envelope.fields")
        if type(kind) is not str:
            kind = None
        if self.named and name is not None:
            if kind is not None and name != kind:
                self._fail("envelope.event-name", f"event name {name!r} but type {kind!r}")
            else:
                f.ok("envelope.event-name")
        if type(seq) is int:
            if seq != self.next_seq:
                self._fail("seq.order", f"seq {seq}, expected {self.next_seq}")
            else:
                f.ok("seq.order")
            if seq >= SAFE_SEQ:
                self._fail("seq.safe", f"seq {seq} is not below 2^53")
            else:
                f.ok("seq.safe")
            self.next_seq = seq + 1
        else:
            self.next_seq += 1
        if kind is not None:
            self.types.append(kind)
        self._lifecycle(kind, obj)

    def _lifecycle(self, kind: str | None, obj: dict) -> None:
        f = self.f
        if self.ended:
            self._fail("lifecycle.one-end", f"{kind!r} after stream.end")
            return
        if self.n == 0:
            good = kind == "stream.start" and obj.get("seq") == 0
            if good:
                f.ok("lifecycle.start-first")
            else:
                self._fail("lifecycle.start-first", f"the first event is {kind!r} (seq {obj.get('seq')!r})")
            self.started = True
            if kind == "stream.start":
                self._echo(obj, "stream.start")
                return
        elif kind == "stream.start":
            self._fail("lifecycle.start-first", "a second stream.start")
            return
        if self.errored and kind != "stream.end":
            self._fail("error.last", f"{kind!r} after the error event")
        if kind == "content.delta":
            index, delta = obj.get("index"), obj.get("delta")
            if not f.check(
                "delta.shape", type(index) is int and type(delta) is dict, f"index={index!r} delta={delta!r}"
            ):
                return
            if index in self.stopped:
                self._fail("lifecycle.content-stop", f"content.delta for block {index} after its content.stop")
            self.open_blocks.add(index)
            text = delta.get("text")
            if type(text) is str:
                self.text.append(text)
        elif kind == "tool.call":
            self._tool_call(obj)
        elif kind == "content.stop":
            index = obj.get("index")
            if type(index) is int:
                self.open_blocks.discard(index)
                self.stopped.add(index)
            if "stop_reason" in obj:
                self.last_stop_reason = obj["stop_reason"]
        elif kind == "usage":
            self.saw_usage = True
            i, o = obj.get("input_tokens"), obj.get("output_tokens")
            f.check(
                "usage.shape",
                all(type(x) is int and x >= 0 for x in (i, o)),
                f"input_tokens={i!r} output_tokens={o!r}",
            )
        elif kind == "error":
            self.errored = True
            err = obj.get("error")
            good = type(err) is dict and type(err.get("type")) is str and type(err.get("message")) is str
            if not good:
                self._fail("error.shape", f"error={err!r}")
            else:
                f.ok("error.shape")
        elif kind == "stream.end":
            self.ended = True
            f.ok("lifecycle.one-end")
            if self.errored:
                f.ok("error.last")
            self._echo(obj, "stream.end")

    def _echo(self, obj: dict, where: str) -> None:
        if self.request_id is None:
            return
        got = obj.get("request_id")
        self.f.check("request-id.echo", got == self.request_id, f"{where} request_id={got!r}, sent {self.request_id!r}")

    def _tool_call(self, obj: dict) -> None:
        f = self.f
        call_id, name, args = obj.get("id"), obj.get("name"), obj.get("arguments")
        parsed: Any = None
        if type(args) is str:
            try:
                parsed = msgspec.json.decode(args)
            except msgspec.DecodeError:
                parsed = None
        good = type(call_id) is str and type(name) is str and type(parsed) is dict
        if not good:
            self._fail("tool.shape", f"id={call_id!r} name={name!r} arguments={args!r}")
        else:
            f.ok("tool.shape")
        index = obj.get("index")
        if type(index) is int:
            self.open_blocks.add(index)
        self.tool_calls.append(obj)
        if self.tools is not None and type(name) is str:
            f.check("tool.declared", name in self.tools, f"tool.call names {name!r}, not declared")

    def finish(self, complete: bool = True) -> None:
        """The input ended; ``complete`` is False when the transport broke off."""
        f = self.f
        if self.n < 0:
            f.fail("lifecycle.start-first", f"{self.where}the stream is empty")
            f.fail("lifecycle.one-end", f"{self.where}the stream is empty")
            return
        if not self.ended:
            f.fail("lifecycle.one-end", f"{self.where}no stream.end ({'cut off' if not complete else 'body ended'})")
            return
        if self.open_blocks and not self.errored:
            f.fail("lifecycle.content-stop", f"{self.where}blocks {sorted(self.open_blocks)} never stopped")
        elif self.stopped or self.open_blocks:
            f.ok("lifecycle.content-stop")
        if not self.errored:
            f.check(
                "lifecycle.stop-reason",
                self.last_stop_reason is not None,
                f"{self.where}no content.stop carried a stop_reason",
            )
            if self.tool_calls:
                f.check(
                    "tool.stop-reason",
                    self.last_stop_reason == "tool_use",
                    f"{self.where}tool call turn ended with stop_reason {self.last_stop_reason!r}",
                )
        f.check("usage.present", self.saw_usage or self.errored, f"{self.where}no usage event")
