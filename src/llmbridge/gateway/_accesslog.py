"""The access log off the request's path: lines written once per event-loop turn, not per request.

uvicorn logs one access line per response through a plain ``StreamHandler``, which writes
and flushes (a system call each) while the request's first bytes wait behind it. This
handler formats the line as before (same formatter, same :class:`~._server.RedactSecrets`
filter, same text) but only queues it; everything queued in one turn of the event loop is
written in one call at the end of the turn. Outside a running loop (start-up, shutdown,
another thread) a line is written at once, and :meth:`flush` (``logging.shutdown`` calls it
at exit) writes whatever is still queued.

:class:`AccessLine` goes one step further for the shipped configuration (issue 23): with
uvicorn's access logger set up as ``log_config`` sets it up — this handler, the plain
formatter, filters that say how they redact — a line costs one f-string and the filters'
redaction of the path, instead of a ``LogRecord`` (its frame walk, ``os.path`` calls and
clock reads), two filter passes and a formatter: about a tenth of a request's CPU before.
Any other set-up (another handler or formatter, colours, a filter that does not say how it
redacts, a level that drops the line) goes through ``logging`` as before.
"""

from __future__ import annotations

import asyncio
import http
import logging
from typing import Any

from uvicorn.logging import AccessFormatter
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

__all__ = ["AccessLine", "BatchedStreamHandler", "PlainAccessFormatter", "access_logger"]

_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}
UVICORN_ACCESS_FORMAT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
_REQUEST_LINES = 64  # masked request lines an AccessLine keeps
UVICORN_ACCESS_MESSAGE = '%s - "%s %s HTTP/%s" %d'  # what uvicorn's cycle passes to access_logger.info


class PlainAccessFormatter(AccessFormatter):
    """uvicorn's access formatter, its uncoloured line made in one f-string: the same text
    (``tests/test_gateway_overhead.py`` compares them) without two copies of the record and
    an ``HTTPStatus`` lookup per request. Coloured output, another format or other arguments
    go to uvicorn's own code."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        args = record.args
        if self.use_colors or self._fmt != UVICORN_ACCESS_FORMAT or not isinstance(args, tuple) or len(args) != 5:
            return super().formatMessage(record)
        client, method, path, version, status = args
        code = int(status)  # type: ignore[call-overload]  # (uvicorn logs an int)
        level = record.levelname
        prefix = f"{level}:{' ' * (8 - len(level))}"
        return f'{prefix} {client} - "{method} {path} HTTP/{version}" {code} {_PHRASES.get(code, "")}'


class BatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``StreamHandler`` that writes the lines of one event-loop turn together."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: as a StreamHandler would
            self._lines.append(line)
            self.flush()
            return
        self._lines.append(line)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.flush)

    def queue(self, line: str) -> None:
        """Write ``line`` (formatted, with its terminator) with the rest of this loop turn's.

        Called on the loop's thread only, and without the handler's lock (issue 23: taking it
        was 2 k instructions a request): ``list.append`` is one atomic step under the GIL,
        and :meth:`flush` never replaces the list, it removes from its front only what it
        copied, so a line appended from here while another thread flushes is either in that
        copy or left for the next flush, never dropped. The flag is cleared by a flush before
        it copies: seen set here after the append, a flush is due on this loop and will take
        the line; seen clear, this call schedules one (at worst a flush with nothing to do)."""
        self._lines.append(line)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write every queued line in one call, then flush the stream (under the handler's
        lock: one flush at a time). Lines queued meanwhile stay queued (see :meth:`queue`);
        a write that fails is reported through ``handleError``, never raised."""
        with self.lock:  # type: ignore[union-attr]  # (the lock itself: acquire()/release() are two calls more)
            self._scheduled = False
            queued = self._lines
            n = len(queued)  # (write that many, then remove them from the front: see queue())
            text = queued[0] if n == 1 else "".join(queued[:n])  # (one line, as a serial server has: no join)
            del queued[:n]
            stream = self.stream
            if stream is None:
                return
            try:
                if text:
                    stream.write(text)
                if hasattr(stream, "flush"):
                    stream.flush()
            except Exception:  # a closed or broken stream: logging's own policy (stderr note), never raise
                if text:
                    self.handleError(logging.makeLogRecord({"msg": "access log write failed"}))


class AccessLine:
    """Stands in for uvicorn's access logger (its ``info`` is all uvicorn calls) and writes
    the shipped configuration's line without ``logging``'s machinery: the same text, masked
    by the same filters (each one's ``redact_access``, in the order logging would apply
    them: the logger's, then the handler's). Anything else goes to ``logger``.

    Made per connection by :func:`access_logger`, which checks the configuration."""

    __slots__ = ("_handler", "_lines", "_logger", "_redactions", "_requests")

    def __init__(self, logger: logging.Logger, handler: BatchedStreamHandler, redactions: list[Any]) -> None:
        self._logger = logger
        self._handler = handler
        self._redactions = redactions
        # "METHOD path HTTP/version" as masked, by what the client sent: a keep-alive
        # connection asks the same few paths again and again (bounded: cleared when full)
        self._requests: dict[tuple[str, str, str], str] = {}
        # whole lines by the scope's raw fields and the status (served(); bounded likewise)
        self._lines: dict[tuple[Any, ...], str] = {}

    def served(self, scope: Any, status: int) -> None:
        """What ``info(UVICORN_ACCESS_MESSAGE, get_client_addr(scope), scope["method"],
        get_path_with_query_string(scope), scope["http_version"], status)`` writes -- uvicorn's
        access line for a response -- from the scope's raw fields: a keep-alive connection's
        line is the same from one request to the next (same client, request line, status),
        so it is made once (issue 23: the two argument helpers, the masking look-up and the
        f-string were ~5 k instructions a request). The level is asked every time."""
        if not self._logger.isEnabledFor(logging.INFO):  # (logging would drop it too)
            return
        key = (scope.get("client"), scope["method"], scope["raw_path"], scope["query_string"],
               scope["http_version"], status)  # fmt: skip
        line = self._lines.get(key)
        if line is None:
            if len(self._lines) >= _REQUEST_LINES:
                self._lines.clear()
            client, method, path, version = (get_client_addr(scope), scope["method"],
                                             get_path_with_query_string(scope), scope["http_version"])  # fmt: skip
            line = self._lines[key] = self._line(client, method, path, version, status)
        self._handler.queue(line)

    def info(self, msg: str, *args: Any) -> None:
        if msg != UVICORN_ACCESS_MESSAGE or len(args) != 5 or not self._logger.isEnabledFor(logging.INFO):
            self._logger.info(msg, *args)
            return
        self._handler.queue(self._line(*args))

    def _line(self, client: str, method: str, path: str, version: str, status: int) -> str:
        request = self._requests.get((method, path, version))
        if request is None:
            request = self._request_line(method, path, version)
        phrase = _PHRASES.get(status, "")
        return f'INFO:     {client} - "{request}" {status} {phrase}\n'

    def _request_line(self, method: str, path: str, version: str) -> str:
        key = (method, path, version)
        for redact in self._redactions:  # (the client address holds no credential: not scanned)
            method, path, version = redact(method), redact(path), redact(version)
        if len(self._requests) >= _REQUEST_LINES:
            self._requests.clear()
        line = self._requests[key] = f"{method} {path} HTTP/{version}"
        return line

    def __getattr__(self, name: str) -> Any:  # anything else a caller may use: the logger's
        return getattr(self._logger, name)


def access_logger(logger: logging.Logger) -> logging.Logger | AccessLine:
    """``logger`` (uvicorn's access logger), or an :class:`AccessLine` writing its lines when
    it is set up as shipped: enabled, not propagating, one :class:`BatchedStreamHandler`
    at INFO or below with the uncoloured :class:`PlainAccessFormatter` in uvicorn's format,
    and only filters (on the logger and the handler) that redact through ``redact_access``."""
    handlers = logger.handlers
    if logger.disabled or logger.propagate or len(handlers) != 1:
        return logger
    handler = handlers[0]
    formatter = handler.formatter
    if (
        type(handler) is not BatchedStreamHandler
        or handler.level > logging.INFO
        or type(formatter) is not PlainAccessFormatter
        or formatter.use_colors
        or formatter._fmt != UVICORN_ACCESS_FORMAT
    ):
        return logger
    redactions = [getattr(f, "redact_access", None) for f in (*logger.filters, *handler.filters)]
    if any(r is None for r in redactions):
        return logger
    return AccessLine(logger, handler, redactions)
